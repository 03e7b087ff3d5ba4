/**
 * Crafted snapshots with VALID checksums: a real server writes one key of every type (SAVE, the real
 * encoder), then the file is mutated (state numbers, expiries, blob numbers and lengths, type and flag
 * bytes, duplicated keys, any byte) and its CRC-32 recomputed, so only the loader's value rules stand
 * between the bytes and the limiters.
 *
 * - In process (a few thousand cases, fast-check, fixed seed): the verdict does not depend on the
 *   time of the load (as `check` and a server load at different times), and for an accepted file
 *   every limiter decision on every key, for several parameter sets, is a safe integer (what RESP
 *   can carry), as is its PTTL.
 * - Real processes (a few dozen cases): `cellgate-server check` and a server start agree; an accepted
 *   file loads, and every key answers TYPE, PTTL and its peeks (COST 0) with valid RESP, each within
 *   a per-command client timeout of a few seconds (the "never hangs" check).
 * - The three crafted files named in the hardening review: a sliding log claiming 10^15 entries,
 *   NaN state, a fractional expiry: refused by both.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import zlib from 'node:zlib';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';
import { SnapshotError, SnapshotLoad } from '../../src/persistence/reader.js';
import { cellParams, cellThrottle, type CellParams } from '../../src/limiters/cell-throttle.js';
import { gcraDecide, gcraParams, type GcraParams } from '../../src/limiters/redis-gcra.js';
import { gcraMsDecide, gcraMsParams, newGcraMsParams } from '../../src/limiters/gcra-ms.js';
import { newDecision, type Decision } from '../../src/limiters/decision.js';
import { tokenBucketDecide } from '../../src/limiters/token-bucket.js';
import { leakyBucketDecide } from '../../src/limiters/leaky-bucket.js';
import { fixedWindowDecide } from '../../src/limiters/fixed-window.js';
import { slidingWindowDecide } from '../../src/limiters/sliding-window.js';
import { slidingLogDecide, slidingLogRecord } from '../../src/limiters/sliding-log.js';
import { RawConnection, mbulk } from '../helpers/raw.js';
import { runToExit } from '../helpers/replies.js';
import { startServer, type RunningServer } from '../helpers/server.js';
import { T0_AHEAD_MS } from '../persistence/helpers.js';

const T0 = T0_AHEAD_MS;
const dirs: string[] = [];
function newDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'cellgate-snapfuzz-'));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------
// The base file: one key of every type, written by a real server. Every key name has 2 bytes, so
// one key's bytes can be copied over another's (a duplicate) without moving anything.
// ---------------------------------------------------------------------------------------------

let base: Buffer;

beforeAll(async () => {
  const s = await startServer();
  const c = await StrictClient.open(s.port);
  try {
    await c.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await c.call('CL.THROTTLE', 'g1', '5', '10', '60');
    await c.call('GCRA', 'g2', '5', '10', '60');
    await c.call('RL.GCRA', 'g3', '10', '60000');
    await c.call('RL.TOKENBUCKET', 'tb', '10', '60000', 'COST', '3');
    await c.call('RL.LEAKYBUCKET', 'lb', '10', '60000', 'COST', '2');
    await c.call('RL.FIXEDWINDOW', 'fw', '10', '60000', 'COST', '2');
    await c.call('RL.SLIDINGWINDOW', 'sw', '10', '60000', 'COST', '2');
    await c.call('RL.SLIDINGLOG', 's1', '10', '60000');
    for (let i = 0; i < 3; i++) {
      await c.call('RL.SLIDINGLOG', 's2', '10', '60000', 'COST', String(i + 1));
      await c.call('DEBUG', 'CLOCK', 'ADVANCE', '1000');
    }
    expect(await c.call('SAVE')).toBe('OK');
  } finally {
    c.close();
  }
  base = readFileSync(join(s.dir, 'cellgate.snap'));
  await s.stop('SIGKILL');
});

/** Where an entry's fields are in the file (the layout of docs/snapshot-format.md). */
interface EntryAt {
  start: number;
  keyStart: number;
  keyLength: number;
  numbers: number;
  blobLengthAt: number;
  blobAt: number;
  blobLength: number;
}

function entries(buf: Buffer): EntryAt[] {
  const out: EntryAt[] = [];
  let p = 24;
  while (buf[p] !== 0xff) {
    const flags = buf[p + 1];
    const keyLength = buf.readUInt32LE(p + 2);
    const e: EntryAt = { start: p, keyStart: p + 6, keyLength, numbers: p + 6 + keyLength, blobLengthAt: -1, blobAt: -1, blobLength: 0 };
    p = e.numbers + 32;
    if (flags & 1) {
      e.blobLengthAt = p;
      e.blobLength = buf.readUInt32LE(p);
      e.blobAt = p + 4;
      p += 4 + 8 * e.blobLength;
    }
    out.push(e);
  }
  return out;
}

/** Recomputes the footer's CRC-32 over every byte before it, so a mutated file carries a valid checksum. */
function withValidCrc(buf: Buffer): Buffer {
  if (buf.length >= 4) buf.writeUInt32LE(zlib.crc32(buf.subarray(0, buf.length - 4)), buf.length - 4);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Mutations
// ---------------------------------------------------------------------------------------------

const nastyNumber = fc.oneof(
  fc.constantFrom(NaN, Infinity, -Infinity, -0, -1, 0.5, 1.5, 999, 1000, 2 ** 52, 2 ** 52 + 1, 2 ** 53, 2 ** 53 - 1, 1e15, 1e21, 1e300, -1e300,
    Number.MAX_VALUE, Number.MIN_VALUE, 2, 3, 4, 1_000_000, 1_000_001, T0, T0 + 60_000, T0 - 1),
  fc.integer({ min: -10, max: 2_000_000 }).map(Number),
  fc.double(),
  fc.integer({ min: 0, max: 2 ** 31 }).map((n) => T0 + n - 2 ** 30),
);

type Mutation =
  | { kind: 'number'; entry: number; field: number; value: number }
  | { kind: 'blob'; entry: number; index: number; value: number }
  | { kind: 'blobLength'; entry: number; value: number }
  | { kind: 'type'; entry: number; value: number }
  | { kind: 'flags'; entry: number; value: number }
  | { kind: 'duplicate'; from: number; to: number }
  | { kind: 'byte'; at: number; value: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('number' as const), entry: fc.nat(20), field: fc.nat(3), value: nastyNumber }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('blob' as const), entry: fc.nat(20), index: fc.nat(7), value: nastyNumber }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('blobLength' as const), entry: fc.nat(20), value: fc.constantFrom(0, 1, 2, 3, 4, 6, 8, 2 ** 31) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('type' as const), entry: fc.nat(20), value: fc.integer({ min: 0, max: 8 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('flags' as const), entry: fc.nat(20), value: fc.integer({ min: 0, max: 3 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('duplicate' as const), from: fc.nat(20), to: fc.nat(20) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('byte' as const), at: fc.nat(100_000), value: fc.nat(255) }) },
);

function mutate(src: Buffer, ms: Mutation[]): Buffer {
  const buf = Buffer.from(src);
  for (const m of ms) {
    let es: EntryAt[];
    try {
      es = entries(buf);
    } catch {
      es = []; // an earlier mutation broke the structure: only byte mutations still apply
    }
    if (m.kind === 'byte') {
      buf[m.at % buf.length] = m.value;
      continue;
    }
    if (es.length === 0) continue;
    if (m.kind === 'duplicate') {
      const from = es[m.from % es.length];
      const to = es[m.to % es.length];
      if (from.keyLength === to.keyLength) buf.copy(buf, to.keyStart, from.keyStart, from.keyStart + from.keyLength);
      continue;
    }
    const e = es[m.entry % es.length];
    if (m.kind === 'number') buf.writeDoubleLE(m.value, e.numbers + 8 * m.field);
    else if (m.kind === 'type') buf[e.start] = m.value;
    else if (m.kind === 'flags') buf[e.start + 1] = m.value;
    else if (e.blobAt !== -1 && m.kind === 'blob') buf.writeDoubleLE(m.value, e.blobAt + 8 * (m.index % e.blobLength));
    else if (e.blobAt !== -1 && m.kind === 'blobLength') buf.writeUInt32LE(m.value, e.blobLengthAt);
  }
  return withValidCrc(buf);
}

const mutatedFile = fc.array(mutation, { minLength: 1, maxLength: 3 }).map((ms) => mutate(base, ms));
/** Random bytes after a valid header, with a valid CRC: the structure checks must hold too. */
const randomFile = fc.uint8Array({ minLength: 0, maxLength: 200 }).map((tail) => withValidCrc(Buffer.concat([base.subarray(0, 24), Buffer.from(tail)])));
const anyFile = fc.oneof({ weight: 9, arbitrary: mutatedFile }, { weight: 1, arbitrary: randomFile });

/** The loader's verdict: null when it loads, else the problem. */
function verdict(buf: Buffer, nowMs: number, ks = new Keyspace()): string | null {
  try {
    new SnapshotLoad(buf, 'f', ks, nowMs).run();
    return null;
  } catch (e) {
    if (!(e instanceof SnapshotError)) throw e;
    return e.message;
  }
}

// ---------------------------------------------------------------------------------------------
// Every decision a command can ask of a loaded key, in process
// ---------------------------------------------------------------------------------------------

const rate = newDecision();
const cell = newDecision();
const gcra = newDecision();
const cellSets = [cellParams(4, 10, 60), cellParams(0, 1, 1), cellParams(1_000_000, 1, 86400)].filter((p): p is CellParams => typeof p !== 'string');
const gcraSets = [gcraParams(4, 10, 60, 1), gcraParams(0, 1, 1, 1)].filter((p): p is GcraParams => typeof p !== 'string');
const msSets = [[10, 60000, 10], [1, 1, 1], [1000, 1000, 5]].map(([l, p, b]) => {
  const out = newGcraMsParams();
  expect(gcraMsParams(l, p, b, out)).toBe(null);
  return out;
});
/** limit, period_ms, burst: small, the writer's own, the largest. */
const rateSets: [number, number, number][] = [[1, 1, 1], [10, 60000, 10], [5, 1000, 2 ** 40], [1_000_000, 1_000_000, 1_000_000]];

function safeRate(d: Decision): void {
  for (const v of [d.remaining, d.retryAfter, d.resetAfter, d.delayMs, d.limit]) expect(Number.isSafeInteger(v), `decision field ${v}`).toBe(true);
}

function checkEveryDecision(ks: Keyspace, nowMs: number): number {
  let keys = 0;
  ks.scan(0, 1_000_000, nowMs, (slot) => {
    keys++;
    expect(Number.isSafeInteger(Math.max(0, ks.expireAtMs(slot) - nowMs))).toBe(true);
    const a = ks.getA(slot);
    const b = ks.getB(slot);
    const c = ks.getC(slot);
    const nowUs = nowMs * 1000;
    switch (ks.typeOf(slot)) {
      case KeyType.Gcra:
        for (const p of cellSets) {
          for (const q of [0, 1]) {
            cellThrottle(p, q, true, a, b, nowUs, cell);
            for (const v of [cell.remaining, cell.retryAfter, cell.resetAfter]) expect(Number.isSafeInteger(v), `CL.THROTTLE field ${v}`).toBe(true);
          }
        }
        for (const p of gcraSets) {
          gcraDecide(p, true, a, nowUs, gcra);
          for (const v of [gcra.remaining, gcra.retryAfter, gcra.resetAfter]) expect(Number.isSafeInteger(v), `GCRA field ${v}`).toBe(true);
        }
        for (const p of msSets) for (const cost of [0, 1]) { gcraMsDecide(p, cost, true, a, b, nowUs, rate); safeRate(rate); }
        break;
      case KeyType.TokenBucket:
        for (const [l, p, burst] of rateSets) for (const cost of [0, 1]) { tokenBucketDecide(l, p, burst, cost, true, a, b, nowMs, rate); safeRate(rate); }
        break;
      case KeyType.LeakyBucket:
        for (const [l, p, burst] of rateSets) for (const cost of [0, 1]) { leakyBucketDecide(l, p, burst, cost, true, a, b, nowMs, rate); safeRate(rate); }
        break;
      case KeyType.FixedWindow:
        for (const [l, p] of rateSets) for (const cost of [0, 1]) { fixedWindowDecide(l, p, cost, true, a, b, nowMs, rate); safeRate(rate); }
        break;
      case KeyType.SlidingWindow:
        for (const [l, p] of rateSets) for (const cost of [0, 1]) { slidingWindowDecide(l, p, cost, true, a, b, c, nowMs, rate); safeRate(rate); }
        break;
      case KeyType.SlidingLog:
        for (const [l, p] of rateSets) {
          for (const cost of [0, 1]) {
            const log = ks.getBlob(slot);
            slidingLogDecide(l, p, cost, true, a, b, c, log, nowMs, rate);
            safeRate(rate);
            // Recording works on a copy: the key must stay as loaded for the next parameter set.
            if (rate.write) slidingLogRecord(l, p, cost, true, a, b, c, log && Float64Array.from(log), nowMs, rate);
          }
        }
        break;
      default:
        throw new Error(`unexpected type ${ks.typeOf(slot)}`);
    }
  });
  return keys;
}

describe('crafted snapshots, in process', () => {
  it('the base file loads, and its keys give safe integers everywhere', () => {
    const ks = new Keyspace();
    expect(verdict(base, T0, ks)).toBe(null);
    expect(checkEveryDecision(ks, T0 + 1500)).toBe(9);
  });

  it('a few thousand mutated files with valid CRCs: the verdict ignores the time of loading; accepted keys only ever give safe integers', () => {
    let accepted = 0;
    let refused = 0;
    fc.assert(
      fc.property(anyFile, fc.constantFrom(0, T0, T0 + 30_000, 8e15), (buf, nowMs) => {
        const ks = new Keyspace();
        const v = verdict(buf, nowMs, ks);
        // `check` loads at the wall clock, a server at its own clock: the same verdict at any time.
        expect(verdict(buf, nowMs === 0 ? 8e15 : 0)).toBe(v);
        if (v !== null) {
          refused++;
          return;
        }
        accepted++;
        for (const at of [nowMs, T0 + 1500, T0 + 10_000_000]) checkEveryDecision(ks, at);
      }),
      { numRuns: 3000, seed: 20261201 },
    );
    // Both outcomes were explored.
    expect(accepted).toBeGreaterThan(100);
    expect(refused).toBeGreaterThan(1000);
  });
});

// ---------------------------------------------------------------------------------------------
// Real processes
// ---------------------------------------------------------------------------------------------

/**
 * A strict RESP2 reader: integers must be whole decimal numbers (":NaN", ":1.5" or ":1e+21" are not
 * RESP), lengths must match. Returns the parsed replies and the bytes used, or null if incomplete.
 */
function strictReply(buf: Buffer, at = 0): [unknown, number] | null {
  if (at >= buf.length) return null;
  const cr = buf.indexOf('\r\n', at, 'latin1');
  if (cr === -1) return null;
  const head = buf.toString('latin1', at + 1, cr);
  const next = cr + 2;
  switch (buf[at]) {
    case 0x2b: return [head, next];
    case 0x2d: return [{ error: head }, next];
    case 0x3a:
      if (!/^-?\d{1,20}$/.test(head)) throw new Error(`invalid RESP integer ":${head}"`);
      return [Number(head), next];
    case 0x24: {
      if (!/^-?\d+$/.test(head)) throw new Error(`invalid bulk length "${head}"`);
      const n = Number(head);
      if (n < 0) return [null, next];
      if (next + n + 2 > buf.length) return null;
      if (buf[next + n] !== 13 || buf[next + n + 1] !== 10) throw new Error('bulk string not followed by CRLF');
      return [buf.subarray(next, next + n), next + n + 2];
    }
    case 0x2a: {
      if (!/^-?\d+$/.test(head)) throw new Error(`invalid array length "${head}"`);
      const n = Number(head);
      if (n < 0) return [null, next];
      const items: unknown[] = [];
      let p = next;
      for (let i = 0; i < n; i++) {
        const r = strictReply(buf, p);
        if (r === null) return null;
        items.push(r[0]);
        p = r[1];
      }
      return [items, p];
    }
    default:
      throw new Error(`not a RESP2 reply: ${JSON.stringify(buf.toString('latin1', at, at + 40))}`);
  }
}

/** One command at a time, each reply validated strictly and awaited at most CALL_TIMEOUT_MS. */
const CALL_TIMEOUT_MS = 4000;
class StrictClient {
  private constructor(private readonly conn: RawConnection) {}

  static async open(port: number): Promise<StrictClient> {
    return new StrictClient(await RawConnection.open(port));
  }

  async call(...args: (string | Buffer)[]): Promise<unknown> {
    const start = this.conn.length;
    await this.conn.write(mbulk(...args));
    let result: [unknown, number] | null = null;
    let invalid: unknown = null;
    await this.conn.waitFor(() => {
      try {
        result = strictReply(this.conn.received.subarray(start));
      } catch (e) {
        invalid = e; // thrown here it would escape from the socket's data handler
      }
      return result !== null || invalid !== null || this.conn.ended;
    }, CALL_TIMEOUT_MS, `a reply to ${args.map(String).join(' ').slice(0, 60)}`);
    if (invalid !== null) throw new Error(`${args.map(String).join(' ').slice(0, 60)}: ${(invalid as Error).message}`);
    if (result === null) throw new Error('connection closed before the reply');
    return (result as [unknown, number])[0];
  }

  close(): void {
    this.conn.destroy();
  }
}

/** The peeks (COST 0) a key of `type` answers, with the writer's parameters and with others. */
function peeks(type: string, key: Buffer): (string | Buffer)[][] {
  switch (type) {
    case 'gcra':
      return [['CL.THROTTLE', key, '5', '10', '60', '0'], ['CL.THROTTLE', key, '0', '1', '1', '0'], ['GCRA', key, '5', '10', '60'], ['RL.GCRA', key, '10', '60000', 'COST', '0']];
    case 'slidinglog':
      return [['RL.SLIDINGLOG', key, '10', '60000', 'COST', '0'], ['RL.SLIDINGLOG', key, '1000000', '1', 'COST', '0']];
    default:
      return [[`RL.${type.toUpperCase()}`, key, '10', '60000', 'COST', '0'], [`RL.${type.toUpperCase()}`, key, '1', '1', 'COST', '0']];
  }
}

/** Starts a server on a directory holding `bytes` as its snapshot: the server, or the refusal on stderr. */
async function serve(bytes: Buffer): Promise<{ server: RunningServer } | { refused: string }> {
  const d = newDir();
  writeFileSync(join(d, 'cellgate.snap'), bytes);
  try {
    return { server: await startServer({ args: ['--dir', d, '--save', ''] }) };
  } catch (e) {
    return { refused: (e as Error).message };
  }
}

async function answersEveryKey(s: RunningServer): Promise<number> {
  const c = await StrictClient.open(s.port);
  try {
    const scan = (await c.call('SCAN', '0', 'COUNT', '1000')) as [Buffer, Buffer[]];
    expect(scan[0].toString()).toBe('0');
    for (const key of scan[1]) {
      const type = String(await c.call('TYPE', key));
      expect(typeof (await c.call('PTTL', key))).toBe('number');
      for (const peek of peeks(type, key)) {
        const r = await c.call(...peek);
        expect(Array.isArray(r), `${peek.map(String).join(' ')} -> ${JSON.stringify(r)}`).toBe(true);
      }
    }
    expect(await c.call('PING')).toBe('PONG');
    return scan[1].length;
  } finally {
    c.close();
  }
}

/** `check` and a real start agree; an accepted file answers every key with valid RESP. Returns true when accepted. */
async function checkAgreesWithServer(bytes: Buffer): Promise<boolean> {
  const d = newDir();
  writeFileSync(join(d, 'x.snap'), bytes);
  const check = runToExit(['check', join(d, 'x.snap')]);
  const started = await serve(bytes);
  if ('refused' in started) {
    expect(check.status, `check accepted what the server refused: ${started.refused}`).toBe(1);
    // The same problem, word for word (the file name aside).
    const problem = /snapshot \S+: (.*) at byte offset (\d+)/.exec(check.stderr);
    expect(problem).not.toBe(null);
    expect(started.refused).toContain(`${problem![1]} at byte offset ${problem![2]}`);
    return false;
  }
  try {
    expect(check.status, `check refused what the server loaded: ${check.stderr}`).toBe(0);
    await answersEveryKey(started.server);
    return true;
  } finally {
    await started.server.stop('SIGKILL');
  }
}

describe('crafted snapshots, real processes', () => {
  it('a few dozen mutated files: check and the server agree; accepted files answer TYPE/PTTL/peeks with valid RESP in time', async () => {
    // From a fixed sample, the first 10 files the loader accepts and the first 12 it refuses for a
    // number (the cases where a looser rule would let a key through to the limiters)...
    const sample = fc.sample(mutatedFile, { numRuns: 400, seed: 7 });
    const acceptedFiles = sample.filter((f) => verdict(f, Date.now()) === null).slice(0, 10);
    const numberRefused = sample.filter((f) => /corrupt entry \d+: (?!unknown|duplicate)/.test(verdict(f, Date.now()) ?? '')).slice(0, 12);
    // ...plus a duplicated key (check must see it as the loader does), the base file and a later expiry.
    const dup = Buffer.from(base);
    const es = entries(dup);
    dup.copy(dup, es[1].keyStart, es[0].keyStart, es[0].keyStart + 2);
    const later = Buffer.from(base);
    later.writeDoubleLE(T0 + 3_600_000, entries(later)[3].numbers);
    const files = [...acceptedFiles, ...numberRefused, withValidCrc(dup), base, withValidCrc(later)];
    expect(acceptedFiles.length).toBe(10);
    expect(numberRefused.length).toBe(12);
    let accepted = 0;
    for (const f of files) if (await checkAgreesWithServer(f)) accepted++;
    expect(accepted).toBe(12);
  }, 240_000);
});

describe('the three crafted files of the review', () => {
  /** The entry of key `name` in the base file. */
  function entryOf(buf: Buffer, name: string): EntryAt {
    const e = entries(buf).find((x) => buf.toString('latin1', x.keyStart, x.keyStart + x.keyLength) === name);
    if (e === undefined) throw new Error(`no key ${name}`);
    return e;
  }

  const crafted: [string, (b: Buffer) => void, RegExp][] = [
    ['a sliding log claiming 10^15 entries (inline)', (b) => b.writeDoubleLE(1e15, entryOf(b, 's1').numbers + 16), /sliding log with no ring must have 1 entry, not 1000000000000000/],
    ['a sliding log ring claiming 10^15 entries', (b) => b.writeDoubleLE(1e15, entryOf(b, 's2').numbers + 16), /sliding log of 1000000000000000 entries in a ring of 4/],
    ['NaN state (a token bucket deficit)', (b) => b.writeDoubleLE(NaN, entryOf(b, 'tb').numbers + 16), /tokenbucket state B NaN is not an integer/],
    ['a fractional expiry', (b) => b.writeDoubleLE(T0 + 60_000.5, entryOf(b, 'fw').numbers), /expiry 1\d+\.5 is not an integer number of ms/],
  ];

  for (const [name, craft, message] of crafted) {
    it(`${name}: check and the server refuse it, naming the entry`, async () => {
      const bytes = Buffer.from(base);
      craft(bytes);
      withValidCrc(bytes);
      const d = newDir();
      writeFileSync(join(d, 'x.snap'), bytes);
      const check = runToExit(['check', join(d, 'x.snap')]);
      expect(check.status).toBe(1);
      expect(check.stderr).toMatch(message);
      expect(check.stderr).toMatch(/corrupt entry \d+: /);
      const started = await serve(bytes);
      if ('server' in started) await started.server.stop('SIGKILL');
      expect('refused' in started && started.refused).toMatch(message);
    });
  }
});
