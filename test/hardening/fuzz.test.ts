/**
 * Grammar-aware fuzzing beyond test/server/protocol.test.ts's: the same frame arbitraries
 * (test/helpers/frames.ts) plus huge and edge-case counts and lengths, NULs and binary junk inside
 * headers, and the pre-authentication limits (half the cases go to a server with requirepass). After
 * every case another connection must get PONG and the keys written before must be exactly as they
 * were (peeked with COST 0 under a frozen clock). Bounded: a fixed seed and number of runs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, RawConnection, parseReplies, processAlive, type Reply } from '../helpers/raw.js';
import { frame } from '../helpers/frames.js';

const RUNS = process.env.CELLGATE_SOAK === '1' ? 3000 : 250;

/** Counts and lengths at and around every limit: INT_MAX, the argument cap, proto-max-bulk-len, 2^53, i64. */
const edgeNumber = fc.constantFrom(
  '0', '1', '-1', '10', '11', '16384', '16385', '1048576', '1048577', '2147483647', '2147483648', '536870912', '536870913',
  '629145600', '9007199254740993', '9223372036854775807', '-9223372036854775808', '99999999999999999999', '01', '+1', ' 1', '1 ', '',
);
const hugeHeaders = fc.tuple(fc.constantFrom('*', '*1\r\n$', '*2\r\n$4\r\nECHO\r\n$', '*3\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n$'), edgeNumber, fc.constantFrom('\r\n', '\n', '\r\nabc', '\r\nPING\r\n'))
  .map(([prefix, n, tail]) => Buffer.from(prefix + n + tail, 'latin1'));
const nulJunk = fc.tuple(fc.constantFrom('', '*', '$', '*1\r\n$', 'PING'), fc.uint8Array({ maxLength: 30 }), fc.constantFrom('\x00', '\r\x00\n', '\x00\r\n'))
  .map(([prefix, body, nul]) => Buffer.concat([Buffer.from(prefix + nul, 'latin1'), Buffer.from(body), Buffer.from('\r\n')]));
const richFrame = fc.array(fc.oneof({ weight: 3, arbitrary: frame }, { weight: 1, arbitrary: hugeHeaders }, { weight: 1, arbitrary: nulJunk }), { minLength: 1, maxLength: 3 })
  .map((parts) => Buffer.concat(parts));
const withSplits = richFrame.chain((buf) => fc.tuple(fc.constant(buf), fc.uniqueArray(fc.integer({ min: 1, max: Math.max(1, buf.length - 1) }), { maxLength: 5 }), fc.boolean()));

let open: RunningServer;
let locked: RunningServer;
beforeAll(async () => {
  [open, locked] = await Promise.all([startServer(), startServer({ args: ['--requirepass', 'pw'] })]);
});
afterAll(async () => {
  const alive = [open, locked].map((s) => s !== undefined && processAlive(s));
  await Promise.all([open?.stop(), locked?.stop()]);
  expect(alive).toEqual([true, true]);
});

const ANCHORS = ['fz:tb', 'fz:gcra', 'fz:log', 'fz:win'];

async function writeAnchors(c: Checker): Promise<void> {
  await c.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
  await c.call('RL.TOKENBUCKET', 'fz:tb', '100', '86400000', 'COST', '3');
  await c.call('CL.THROTTLE', 'fz:gcra', '10', '1', '86400');
  await c.call('RL.SLIDINGLOG', 'fz:log', '5', '86400000');
  await c.call('RL.FIXEDWINDOW', 'fz:win', '5', '86400000', 'COST', '2');
}

/** The anchors' state, one command at a time (a Checker handles one call in flight). */
async function anchorState(c: Checker): Promise<Reply[]> {
  const state = [
    await c.call('RL.TOKENBUCKET', 'fz:tb', '100', '86400000', 'COST', '0'),
    await c.call('CL.THROTTLE', 'fz:gcra', '10', '1', '86400', '0'),
    await c.call('RL.SLIDINGLOG', 'fz:log', '5', '86400000', 'COST', '0'),
    await c.call('RL.FIXEDWINDOW', 'fz:win', '5', '86400000', 'COST', '0'),
    await c.call('DBSIZE'),
  ];
  for (const k of ANCHORS) state.push(await c.call('PTTL', k));
  return state;
}

describe('fuzz with edge-case headers, NULs and pre-auth limits', () => {
  it(`survives ${RUNS} random frames on open and password servers; PING and keys unaffected after each`, async () => {
    const checkers = { open: await Checker.open(open.port), locked: await Checker.open(locked.port) };
    expect(await checkers.locked.call('AUTH', 'pw')).toBe('OK');
    await writeAnchors(checkers.open);
    await writeAnchors(checkers.locked);
    const before = { open: await anchorState(checkers.open), locked: await anchorState(checkers.locked) };
    let protocolErrors = 0;
    let noauth = 0;
    try {
      await fc.assert(
        fc.asyncProperty(withSplits, async ([buf, cuts, toLocked]) => {
          const target = toLocked ? locked : open;
          const checker = toLocked ? checkers.locked : checkers.open;
          const conn = await RawConnection.open(target.port);
          try {
            await conn.writeInPieces(buf, cuts);
            await conn.settle();
            const { replies, rest } = parseReplies(conn.received);
            expect(rest).toBe(0);
            const errors = replies.map((r) => (typeof r === 'object' && r !== null && 'error' in r ? r.error : null));
            const protoIdx = errors.findIndex((e) => e !== null && e.startsWith('ERR Protocol error: '));
            if (protoIdx !== -1) {
              protocolErrors++;
              // The protocol error is the last reply, and the connection closes after it.
              expect(protoIdx).toBe(replies.length - 1);
              await conn.waitForEnd();
            }
            if (toLocked) {
              // Unauthenticated: only AUTH/HELLO/QUIT/RESET run; everything else is NOAUTH or unknown.
              noauth += errors.filter((e) => e === 'NOAUTH Authentication required.').length;
              expect(replies.every((r, i) => errors[i] !== null || r === 'OK' || r === 'RESET')).toBe(true);
            }
          } finally {
            conn.destroy();
          }
          expect(await checker.call('PING')).toBe('PONG');
          expect(await anchorState(checker)).toEqual(toLocked ? before.locked : before.open);
        }),
        { numRuns: RUNS, seed: 6061, endOnFailure: true },
      );
      expect(protocolErrors).toBeGreaterThan(RUNS / 5);
      expect(noauth).toBeGreaterThan(10);
    } finally {
      checkers.open.close();
      checkers.locked.close();
    }
  });
});
