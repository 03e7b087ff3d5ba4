/**
 * RL.ALL's keys for the ACL are the keys its own parse finds, the ones it spends (docs/security.md "ACL
 * users"): random argument vectors, valid and hostile (repeated BURST/COST, option names and
 * algorithm names as keys, case variants, junk spliced in), run on a real server:
 *
 * - a user limited to `~b*` never makes a key outside `b*` exist, whatever it sends;
 * - when the command spends on every limit, ACL DRYRUN for a user allowed exactly those keys says
 *   OK, and for a user allowed all of them but one names that one: the ACL sees exactly the keys spent;
 * - when the arguments do not parse, nothing is spent and the ACL sees no key.
 *
 * Before, RL.ALL accepted BURST twice while the ACL's key walk assumed one, so `RL.ALL 2 b:1
 * TOKENBUCKET 10 60000 BURST 10 burst 10 secret:victim ...` showed the ACL `b:1` and `burst` and
 * spent `secret:victim`.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, type Reply } from '../helpers/raw.js';

const SOAK = process.env.CELLGATE_SOAK === '1';
let server: RunningServer;
let admin: Checker;
let limited: Checker;

beforeAll(async () => {
  server = await startServer();
  admin = await Checker.open(server.port);
  expect(await admin.call('ACL', 'SETUSER', 'lim', 'on', '>p', '~b*', '+rl.all')).toBe('OK');
  limited = await Checker.open(server.port);
  expect(await limited.call('AUTH', 'lim', 'p')).toBe('OK');
});
afterAll(async () => {
  admin?.close();
  limited?.close();
  await server?.stop();
});

/** Keys without glob characters (each can be a literal ACL pattern); option and algorithm names among them. */
const KEYS = ['b:1', 'b:2', 'bz', 'burst', 'BURST', 'Burst', 'cost', 'COST', 'secret:victim', 's:1', 'tokenbucket', 'GCRA', '10'];
const ALGOS = ['TOKENBUCKET', 'tokenbucket', 'LeakyBucket', 'FIXEDWINDOW', 'slidinglog', 'SLIDINGWINDOW', 'gcra', 'NOSUCH'];
const NUMBERS = ['1', '5', '10', '60000', '0', '-1', 'x', '10.5'];
const OPTIONS = ['BURST', 'burst', 'Burst', 'COST', 'cost'];
const JUNK = [...KEYS, ...ALGOS, ...NUMBERS, ...OPTIONS, '2', ''];

/** Mostly valid choices, sometimes hostile ones: most vectors parse, many do not. */
const mostly = (valid: string[], hostile: string[]): fc.Arbitrary<string> =>
  fc.oneof({ weight: 20, arbitrary: fc.constantFrom(...valid) }, { weight: 1, arbitrary: fc.constantFrom(...hostile) });
const option = fc.tuple(fc.constantFrom(...OPTIONS), mostly(['1', '10', '20'], ['0', 'x']));
const BURST_ALGOS = new Set(['tokenbucket', 'leakybucket', 'gcra']);
/** BURST only where the algorithm takes it, mostly; any options sometimes. */
const limitOptions = (algo: string): fc.Arbitrary<string[]> => fc.oneof(
  { weight: 8, arbitrary: BURST_ALGOS.has(algo.toLowerCase()) ? fc.constantFrom<string[]>([], ['BURST', '20'], ['burst', '10']) : fc.constant<string[]>([]) },
  { weight: 1, arbitrary: fc.array(option, { maxLength: 2 }).map((o) => o.flat()) },
);
const OPTION_KEYS = ['burst', 'BURST', 'Burst', 'cost', 'COST'];
const limit = fc.tuple(mostly(KEYS.filter((k) => !OPTION_KEYS.includes(k)), OPTION_KEYS), mostly(ALGOS.slice(0, -1), ['NOSUCH', 'burst']), mostly(['10', '20'], ['0', '-1', 'x']), mostly(['60000', '1000'], ['x', '0']))
  .chain(([key, algo, n, period]) => limitOptions(algo).map((opts) => [key, algo, n, period, ...opts]));
const trailingCost = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom<string[]>([], ['COST', '1'], ['cost', '2'], ['COST', '0']) },
  { weight: 1, arbitrary: fc.array(option, { maxLength: 2 }).map((o) => o.flat()) },
);
const structured = fc.tuple(
  fc.array(limit, { minLength: 1, maxLength: 4 }),
  fc.oneof({ weight: 12, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.constantFrom(-1, 1, 60) }),
  trailingCost,
  fc.oneof({ weight: 8, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.tuple(fc.nat(), fc.constantFrom(...JUNK)) }),
).map(([limits, countOff, trailing, splice]) => {
  const args = [String(limits.length + countOff), ...limits.flat(), ...trailing];
  if (splice !== null) args.splice(splice[0] % (args.length + 1), 0, splice[1]);
  return args;
});
const anything = fc.array(fc.constantFrom(...JUNK), { minLength: 5, maxLength: 20 });
const vectors = fc.oneof({ weight: 4, arbitrary: structured }, { weight: 1, arbitrary: anything });

async function keys(): Promise<string[]> {
  return ((await admin.call('KEYS', '*')) as string[]).sort();
}

async function dryRunWith(patterns: string[], args: string[]): Promise<Reply> {
  expect(await admin.call('ACL', 'SETUSER', 'probe', 'reset', 'on', 'nopass', '+rl.all', ...patterns.map((k) => `~${k}`))).toBe('OK');
  return admin.call('ACL', 'DRYRUN', 'probe', 'RL.ALL', ...args);
}

describe('RL.ALL: the keys the ACL checks are the keys the command spends', () => {
  it('the reported walk-around: a second BURST is a syntax error, secret:victim untouched', async () => {
    const attack = ['2', 'b:1', 'TOKENBUCKET', '10', '60000', 'BURST', '10', 'burst', '10', 'secret:victim', 'TOKENBUCKET', '10', '60000', 'COST', '10'];
    await admin.call('FLUSHALL');
    expect(await limited.call('RL.ALL', ...attack)).toEqual({ error: 'ERR syntax error' });
    expect(await admin.call('RL.ALL', ...attack)).toEqual({ error: 'ERR syntax error' });
    expect(await keys()).toEqual([]);
    // Without the repeat, the second key is the victim's, and the ACL sees it.
    const plain = ['2', 'b:1', 'TOKENBUCKET', '10', '60000', 'BURST', '10', 'secret:victim', 'TOKENBUCKET', '10', '60000', 'COST', '1'];
    expect(await limited.call('RL.ALL', ...plain)).toEqual({ error: 'NOPERM No permissions to access a key' });
    expect(await admin.call('ACL', 'DRYRUN', 'lim', 'RL.ALL', ...plain)).toBe("No permissions to access the 'secret:victim' key");
    expect(await keys()).toEqual([]);
  });

  it('BURST and COST at most once in the single-limit commands too', async () => {
    expect(await admin.call('RL.TOKENBUCKET', 'b:x', '10', '1000', 'BURST', '5', 'burst', '6')).toEqual({ error: 'ERR syntax error' });
    expect(await admin.call('RL.FIXEDWINDOW', 'b:x', '10', '1000', 'COST', '1', 'cost', '2')).toEqual({ error: 'ERR syntax error' });
    expect(await admin.call('RL.GCRA', 'b:x', '10', '1000', 'COST', '1', 'BURST', '3')).toHaveLength(6);
  });

  it('random argument vectors: a ~b* user spends only b* keys; the ACL sees exactly the keys spent', async () => {
    const seen = { parsed: 0, spentAll: 0, refused: 0, denied: 0 };
    await fc.assert(
      fc.asyncProperty(vectors, async (args) => {
        // What the command spends, run by a user without key patterns.
        await admin.call('FLUSHALL');
        const asAdmin = await admin.call('RL.ALL', ...args);
        const spent = await keys();
        // The limited user: only b* keys may ever exist afterwards.
        await admin.call('FLUSHALL');
        const asLimited = await limited.call('RL.ALL', ...args);
        const after = await keys();
        expect(after.filter((k) => !k.startsWith('b'))).toEqual([]);
        if (typeof asLimited === 'object' && asLimited !== null && 'error' in asLimited && asLimited.error.startsWith('NOPERM')) {
          seen.denied++;
          expect(after).toEqual([]);
          expect(Array.isArray(asAdmin)).toBe(true); // the ACL sees keys only of a vector that parses
        }
        if (!Array.isArray(asAdmin)) {
          // Did not parse: nothing spent, and the ACL sees no key (a user with no pattern may send it).
          seen.refused++;
          expect(spent).toEqual([]);
          expect(await dryRunWith([], args)).toBe('OK');
          expect(asLimited).toEqual(asAdmin);
          return;
        }
        seen.parsed++;
        if (asAdmin[0] !== 0 || spent.length !== asAdmin.length - 1) return; // limited, or COST 0: not every key was written
        seen.spentAll++;
        expect(await dryRunWith(spent, args)).toBe('OK');
        for (const k of spent) {
          expect(await dryRunWith(spent.filter((other) => other !== k), args)).toBe(`No permissions to access the '${k}' key`);
        }
      }),
      { numRuns: SOAK ? 2000 : 250 },
    );
    console.log(`[rl.all] ${JSON.stringify(seen)}`);
    // The generator reaches every branch (a vector that parses and spends, one refused, one denied).
    expect(seen.spentAll).toBeGreaterThan(10);
    expect(seen.refused).toBeGreaterThan(10);
    expect(seen.denied).toBeGreaterThan(5);
  }, 120_000);
});
