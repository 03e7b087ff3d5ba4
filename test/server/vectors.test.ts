/**
 * Replays the recorded ground-truth vectors (test/fixtures/vectors, see its README) against one real
 * cellgate process over TCP: redis-cell 0.5's CL.THROTTLE and Redis 8.8's GCRA.
 *
 * Every step runs at the recorded instant on the debug clock: `DEBUG CLOCK SET <at_us/1000>` (exact
 * decimal milliseconds, so the server sees the same microsecond), the command, then `PTTL key`.
 * Steps are pipelined timeline by timeline, so the ~12,000 recorded steps take a few seconds.
 * Each timeline uses its own key, so no state leaks between them (time goes backwards between
 * timelines, as the README notes).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { useServer } from '../helpers/server.js';

/** The recorded vectors in test/fixtures/vectors (CELLGATE_VECTORS=/path/ overrides; keep the trailing slash). */
const VECTORS = process.env.CELLGATE_VECTORS ?? fileURLToPath(new URL('../fixtures/vectors/', import.meta.url));

interface ThrottleStep { at_us: number; quantity: number; reply: number[]; pttl: number }
interface GcraStep { at_us: number; tokens: number | null; reply: number[]; pttl: number; expiry_edge?: boolean }
interface Timeline<P, S> { params: P; start_us: number; steps: S[] }
type Reply = number | string | null | Reply[] | { error: string };
interface EdgeStep { at_us: number; cmd: string[]; reply: Reply }
interface EdgeCase { name: string; steps: EdgeStep[] }

function readJsonl<T>(name: string): T[] {
  return readFileSync(VECTORS + name, 'utf8').split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as T);
}

/** at_us as the exact decimal milliseconds DEBUG CLOCK SET takes ("1800000000000.125"). */
function clockMs(atUs: number): string {
  return `${Math.floor(atUs / 1000)}.${String(atUs % 1000).padStart(3, '0')}`;
}

/** A pipelined reply as a value the vectors can be compared with: errors become { error }. */
function decode([err, value]: [Error | null, unknown]): Reply {
  return err !== null ? { error: err.message } : (value as Reply);
}

/** One step's outcome, for a readable diff when a timeline disagrees. */
interface Mismatch { timeline: number; step: number; params: unknown; at_us: number; arg: unknown; expected: unknown; actual: unknown }

const env = useServer();

/**
 * The oracles of these vectors, as their README records them: redis-cell 0.5.0 loaded into Redis
 * 7.0.15 (CL.THROTTLE) and a Redis 8.8 development build (GCRA). No redis-server runs here; the
 * replies were recorded once, with a controlled clock.
 */
const ORACLES = ['redis-cell 0.5.0', 'Redis 7.0.15', 'Redis 8.8 development build'];

it('the vectors name the implementations they were recorded from', () => {
  const readme = readFileSync(VECTORS + 'README.md', 'utf8');
  for (const oracle of ORACLES) expect(readme.replace(/\*\*/g, ''), oracle).toContain(oracle);
  console.log(`[oracle] vectors recorded from ${ORACLES[0]} on ${ORACLES[1]} (CL.THROTTLE) and a ${ORACLES[2]} (GCRA): test/fixtures/vectors/README.md`);
});

/**
 * Runs `timelines` in pipelined batches. `command(t, step)` is the limiter command for a step. Returns
 * every mismatch (the test prints the first few and the count, so one bug does not flood the log).
 */
async function replay<P, S extends { at_us: number; reply: number[]; pttl: number }>(
  prefix: string,
  timelines: Timeline<P, S>[],
  command: (key: string, params: P, step: S) => string[],
  stepArg: (step: S) => unknown,
): Promise<{ mismatches: Mismatch[]; steps: number }> {
  const mismatches: Mismatch[] = [];
  let steps = 0;
  const BATCH = 25;
  for (let first = 0; first < timelines.length; first += BATCH) {
    const pipe = env.redis.pipeline();
    const batch = timelines.slice(first, first + BATCH);
    batch.forEach((t, j) => {
      const key = `${prefix}:${first + j}`;
      for (const s of t.steps) {
        pipe.call('DEBUG', 'CLOCK', 'SET', clockMs(s.at_us));
        const [name, ...args] = command(key, t.params, s);
        pipe.call(name, ...args);
        pipe.call('PTTL', key);
      }
    });
    const results = (await pipe.exec())!.map((r) => decode(r as [Error | null, unknown]));
    let r = 0;
    batch.forEach((t, j) => {
      t.steps.forEach((s, k) => {
        steps++;
        const clock = results[r++];
        const reply = results[r++];
        const pttl = results[r++];
        expect(clock, 'DEBUG CLOCK SET').toBe('OK');
        const actual = { reply, pttl };
        const expected = { reply: s.reply, pttl: s.pttl };
        if (JSON.stringify(actual) !== JSON.stringify(expected)) {
          mismatches.push({ timeline: first + j, step: k, params: t.params, at_us: s.at_us, arg: stepArg(s), expected, actual });
        }
      });
    });
  }
  return { mismatches, steps };
}

function report(mismatches: Mismatch[]): string {
  return `${mismatches.length} mismatching steps; first ones:\n` +
    mismatches.slice(0, 10).map((m) => JSON.stringify(m)).join('\n');
}

describe('recorded timelines', () => {
  it('CL.THROTTLE equals redis-cell 0.5 at every step (reply and PTTL)', async () => {
    const timelines = readJsonl<Timeline<[number, number, number], ThrottleStep>>('cl-throttle-redis-cell.jsonl');
    expect(timelines).toHaveLength(300);
    const { mismatches, steps } = await replay('cl', timelines,
      (key, [burst, count, period], s) => ['CL.THROTTLE', key, String(burst), String(count), String(period), String(s.quantity)],
      (s) => ({ quantity: s.quantity }));
    expect(steps).toBe(6072);
    expect(mismatches, report(mismatches)).toEqual([]);
  });

  it('GCRA equals Redis 8.8 at every step (reply and PTTL)', async () => {
    const timelines = readJsonl<Timeline<[number, number, string], GcraStep>>('gcra-redis.jsonl');
    expect(timelines).toHaveLength(300);
    const { mismatches, steps } = await replay('gcra', timelines,
      (key, [burst, tokensPerPeriod, period], s) => [
        'GCRA', key, String(burst), String(tokensPerPeriod), period,
        ...(s.tokens === null ? [] : ['TOKENS', String(s.tokens)]),
      ],
      (s) => ({ tokens: s.tokens, expiry_edge: s.expiry_edge ?? false }));
    expect(steps).toBe(5991);
    expect(mismatches, report(mismatches)).toEqual([]);
  });

  it('the replayer reports a wrong expectation with its timeline, step and both values', async () => {
    const [first] = readJsonl<Timeline<[number, number, number], ThrottleStep>>('cl-throttle-redis-cell.jsonl');
    const steps = first.steps.map((s, i) => (i === 3 ? { ...s, pttl: s.pttl + 1 } : s));
    const { mismatches } = await replay('self-check', [{ ...first, steps }],
      (key, [burst, count, period], s) => ['CL.THROTTLE', key, String(burst), String(count), String(period), String(s.quantity)],
      (s) => ({ quantity: s.quantity }));
    expect(mismatches).toHaveLength(1);
    expect(mismatches[0]).toMatchObject({ timeline: 0, step: 3, params: first.params, expected: { pttl: first.steps[3].pttl + 1 }, actual: { pttl: first.steps[3].pttl } });
  });
});

/** Runs one edge case's steps on a flushed database, each at its recorded instant. */
async function runSteps(steps: { at_us: number; cmd: string[] }[]): Promise<Reply[]> {
  const pipe = env.redis.pipeline();
  pipe.call('FLUSHALL');
  for (const s of steps) {
    pipe.call('DEBUG', 'CLOCK', 'SET', clockMs(s.at_us));
    const [name, ...args] = s.cmd;
    pipe.call(name, ...args);
  }
  const results = (await pipe.exec())!.map((r) => decode(r as [Error | null, unknown]));
  expect(results[0]).toBe('OK');
  return results.filter((_, i) => i > 0 && i % 2 === 0);
}

/** Redis string commands cellgate does not have: steps using them are left out (see each case). */
const STRING_COMMANDS = new Set(['GET', 'SET']);

describe('GCRA errors and edges (Redis 8.8, byte for byte)', () => {
  const cases = readJsonl<EdgeCase>('gcra-redis-errors.jsonl');
  it('has the 17 recorded cases', () => expect(cases).toHaveLength(17));
  for (const c of cases) {
    // `wrongtype` needs a key of another type, made with SET. cellgate has no string type, and
    // CL.THROTTLE shares GCRA's key type (TYPE answers `gcra` for both), so no command here can
    // make a key GCRA must refuse; WRONGTYPE is covered where other key types exist.
    const skip = c.steps.some((s) => STRING_COMMANDS.has(s.cmd[0].toUpperCase()));
    it.skipIf(skip)(c.name, async () => {
      const actual = await runSteps(c.steps);
      expect(actual).toEqual(c.steps.map((s) => s.reply));
    });
  }
});

/**
 * CL.THROTTLE's errors file. The rule (vectors README, "How cellgate is held to these vectors"):
 * where redis-cell answers an error, cellgate answers an error, whose text may be clearer; where
 * redis-cell does something accidental with invalid input, cellgate answers a clear error naming the
 * argument and leaves the key untouched. Valid input must give redis-cell's exact replies.
 */
describe('CL.THROTTLE errors and edges (redis-cell 0.5, with cellgate\'s stricter rules)', () => {
  const cases = new Map(readJsonl<EdgeCase>('cl-throttle-redis-cell-errors.jsonl').map((c) => [c.name, c]));
  it('has the 25 recorded cases', () => expect(cases.size).toBe(25));

  /** A case from the file, with its recorded instant. */
  function recorded(name: string): EdgeCase {
    const c = cases.get(name);
    if (c === undefined) throw new Error(`no recorded case ${name}`);
    return c;
  }

  /** The case's own steps, minus GET/SET which cellgate does not have. */
  function withoutStringCommands(c: EdgeCase): EdgeStep[] {
    return c.steps.filter((s) => !STRING_COMMANDS.has(s.cmd[0].toUpperCase()));
  }

  const covered = new Set<string>();
  /** Cases whose recorded replies cellgate must give exactly (all valid input). */
  const exactly = (name: string, why = '') => {
    covered.add(name);
    it(`${name}: exact redis-cell replies${why}`, async () => {
      const steps = withoutStringCommands(recorded(name));
      expect(await runSteps(steps)).toEqual(steps.map((s) => s.reply));
    });
  };
  /**
   * Cases where redis-cell answers an error: cellgate answers an error too; its text must name
   * `argName` and quote the offending text when redis-cell reports one. Other steps (EXISTS) must match.
   */
  const errorNaming = (name: string, argName: string | null) => {
    covered.add(name);
    it(`${name}: an error${argName ? ` naming ${argName}` : ''}, nothing stored`, async () => {
      const c = recorded(name);
      const actual = await runSteps(c.steps);
      c.steps.forEach((s, i) => {
        const expected = s.reply;
        if (typeof expected === 'object' && expected !== null && 'error' in expected) {
          const got = actual[i] as { error?: string };
          expect(got, `step ${i} ${JSON.stringify(s.cmd)}`).toHaveProperty('error');
          expect(got.error!).toMatch(/^ERR /);
          if (argName !== null) expect(got.error!).toContain(argName);
          const quoted = /^Cell error: Store error: Couldn't parse as integer: (.*)$/s.exec(expected.error);
          if (quoted !== null) expect(got.error!).toContain(`'${quoted[1]}'`);
        } else {
          expect(actual[i], `step ${i} ${JSON.stringify(s.cmd)}`).toEqual(expected);
        }
      });
      // The key was never created.
      const key = c.steps[0].cmd[1];
      if (key !== undefined) expect(await env.redis.exists(key)).toBe(0);
    });
  };

  errorNaming('arity_no_args', 'cl.throttle');
  errorNaming('arity_key_only', 'cl.throttle');
  errorNaming('arity_too_many', 'cl.throttle');
  errorNaming('parse_burst_word', 'max_burst');
  errorNaming('parse_count_decimal', 'count_per_period');
  errorNaming('parse_period_decimal', 'period');
  errorNaming('parse_quantity_word', 'quantity');
  errorNaming('parse_first_bad_argument_wins', 'count_per_period');
  errorNaming('parse_empty', 'max_burst');
  errorNaming('parse_leading_space', 'max_burst');
  errorNaming('parse_hex', 'max_burst');
  errorNaming('parse_i64_overflow', 'period');
  errorNaming('zero_count', 'count_per_period');
  errorNaming('zero_period', 'period');

  exactly('leading_plus_sign');
  exactly('quantity_omitted_is_1');
  exactly('lowercase_command');
  // The GET step (which shows the stored nanosecond TAT) is left out: cellgate has no GET.
  exactly('quantity_0_on_fresh_key_creates_it', ' (GET left out)');

  covered.add('arity_three_numbers_missing_one');
  it('arity_three_numbers_missing_one: cellgate\'s short form (capacity 1, rate 2/s) succeeds', async () => {
    // redis-cell answers a usage error; cellgate defines `CL.THROTTLE key capacity rate_per_second`,
    // so `e 1 2` ≡ `e 0 2 1`: T = 0.5 s, τ = 0.5 s, the one token is taken and refills in 500 ms.
    const [step] = recorded('arity_three_numbers_missing_one').steps;
    const actual = await runSteps([step, { at_us: step.at_us, cmd: ['PTTL', 'e'] }]);
    expect(actual).toEqual([[0, 1, 0, -1, 1], 500]);
    const longForm = await runSteps([
      { at_us: step.at_us, cmd: ['CL.THROTTLE', 'e', '0', '2', '1'] },
      { at_us: step.at_us, cmd: ['PTTL', 'e'] },
    ]);
    expect(longForm).toEqual(actual);
  });

  covered.add('negative_quantity_fresh_key');
  it('negative_quantity_fresh_key: an error naming quantity, no key; the next call starts fresh', async () => {
    // redis-cell writes TAT = now − 1.5 s with no expiry (PTTL −1) and answers an expire error.
    // cellgate refuses the argument and stores nothing; the follow-up call then matches redis-cell
    // (its stale TAT in the past behaves like a fresh bucket).
    const c = recorded('negative_quantity_fresh_key');
    const [bad, , , next, nextPttl] = c.steps;
    const actual = await runSteps([bad, { at_us: bad.at_us, cmd: ['PTTL', 'nq'] }, next, nextPttl]);
    expect(actual[0]).toEqual({ error: "ERR invalid quantity '-1': must be >= 0" });
    expect(actual.slice(1)).toEqual([-2, next.reply, nextPttl.reply]);
  });

  covered.add('negative_quantity_as_refund');
  it('negative_quantity_as_refund: negative quantities are refused and leave the key untouched', async () => {
    // redis-cell treats −2 as a refund (PTTL 10000 → 6000) and −4 writes a key with no expiry.
    const c = recorded('negative_quantity_as_refund');
    const at = c.steps[0].at_us;
    const actual = await runSteps([
      c.steps[0],
      { at_us: at, cmd: ['PTTL', 'rf'] },
      c.steps[1],
      { at_us: at, cmd: ['PTTL', 'rf'] },
      c.steps[3],
      { at_us: at, cmd: ['PTTL', 'rf'] },
      // The bucket is exactly as the first call left it: all 5 tokens taken.
      { at_us: at, cmd: ['CL.THROTTLE', 'rf', '4', '5', '10', '0'] },
    ]);
    expect(actual).toEqual([
      [0, 5, 0, -1, 10], 10000,
      { error: "ERR invalid quantity '-2': must be >= 0" }, 10000,
      { error: "ERR invalid quantity '-4': must be >= 0" }, 10000,
      [0, 5, 0, -1, 10],
    ]);
  });

  for (const [name, arg] of [['negative_burst', 'max_burst'], ['negative_count', 'count_per_period']] as const) {
    covered.add(name);
    it(`${name}: an error naming ${arg} instead of redis-cell's "limited" reply`, async () => {
      const c = recorded(name);
      const actual = await runSteps(c.steps);
      expect(actual[0]).toHaveProperty('error');
      expect((actual[0] as { error: string }).error).toMatch(new RegExp(`^ERR invalid ${arg} '-\\d+'`));
      expect(actual[1]).toBe(0);
    });
  }

  covered.add('huge_burst_limit_wraps');
  it('huge_burst_limit_wraps: an error naming max_burst instead of a wrapped limit', async () => {
    const c = recorded('huge_burst_limit_wraps');
    const actual = await runSteps([...c.steps, { at_us: c.steps[0].at_us, cmd: ['EXISTS', 'hb'] }]);
    expect(actual[0]).toHaveProperty('error');
    expect((actual[0] as { error: string }).error).toMatch(/^ERR invalid max_burst/);
    expect(actual[1]).toBe(0);
  });

  covered.add('string_key_holding_integer_is_a_tat');
  it('string_key_holding_integer_is_a_tat: adapted (no SET in cellgate): a fresh key gives the same reply', async () => {
    // redis-cell reads the string "12345" as a TAT of 12345 ns after the epoch: far in the past, so
    // the bucket behaves as a fresh one. cellgate has no string keys, so the SET and GET steps are
    // left out and the same replies are required from a missing key.
    const steps = withoutStringCommands(recorded('string_key_holding_integer_is_a_tat'));
    expect(await runSteps(steps)).toEqual(steps.map((s) => s.reply));
  });

  it('covers every recorded case', () => {
    expect([...cases.keys()].filter((n) => !covered.has(n))).toEqual([]);
  });
});
