/**
 * DEBUG CLOCK SET may move the server clock backwards (the real clock never does), and a key may be
 * called with other limits than the call that wrote its state. Every limiter must then:
 * - treat the jump as no time passing: never admit more than it would have at the latest time it
 *   saw, never report a negative or fractional field, never corrupt the sliding log;
 * - keep retry_after true: after it has passed (nothing else called meanwhile) the same request is
 *   allowed; and keep remaining ≥ 0 whatever limits wrote the state.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cellParams, cellThrottle, type CellParams } from '../../src/limiters/cell-throttle.ts';
import { gcraDecide, gcraParams, type GcraParams } from '../../src/limiters/redis-gcra.ts';
import { checkTimes, FakeKey, paramsArb, T0, type Algo, type Params } from './rl-harness.ts';
import { newDecision } from '../../src/limiters/decision.ts';

/**
 * A sliding log ring (src/limiters/sliding-log.ts): timestamps strictly increase, each entry's
 * running total exceeds the one before it (every entry holds at least one unit), and the totals
 * count C units from the oldest entry on, at most `limit`.
 */
function expectRingSane(key: FakeKey, limit: number): void {
  const blob = key.blob!;
  const cap = blob.length / 2;
  expect(key.b).toBeGreaterThanOrEqual(2);
  expect(key.b).toBeLessThanOrEqual(cap);
  const at = (k: number) => 2 * ((key.a + k) % cap);
  const offset = blob[at(key.b - 1) + 1] - key.c;
  expect(offset).toBeGreaterThanOrEqual(0);
  expect(blob[at(0) + 1]).toBeGreaterThan(offset);
  for (let k = 1; k < key.b; k++) {
    expect(blob[at(k)]).toBeGreaterThan(blob[at(k - 1)]);
    expect(blob[at(k) + 1]).toBeGreaterThan(blob[at(k - 1) + 1]);
  }
  expect(key.c).toBeLessThanOrEqual(limit);
}

const ALGOS: Algo[] = ['tokenbucket', 'leakybucket', 'fixedwindow', 'slidinglog', 'slidingwindow', 'gcra'];

describe('RL.* with a clock that jumps backwards', () => {
  for (const algo of ALGOS) {
    it(`${algo}: replies stay sane and the log stays ordered`, () => {
      const withBurst = algo === 'tokenbucket' || algo === 'leakybucket' || algo === 'gcra';
      const arb = paramsArb(withBurst).chain((p) => fc.record({
        p: fc.constant(p),
        moves: fc.array(fc.record({ deltaMs: fc.integer({ min: -3 * p.periodMs, max: 2 * p.periodMs }), cost: fc.integer({ min: 0, max: p.burst + 1 }) }), { minLength: 1, maxLength: 60 }),
      }));
      fc.assert(fc.property(arb, ({ p, moves }) => {
        const key = new FakeKey(algo, p);
        const capacity = withBurst ? p.burst : p.limit;
        let t = T0 + 10 * p.periodMs;
        for (const { deltaMs, cost } of moves) {
          t += deltaMs;
          const r = key.call(cost, t);
          for (const v of Object.values(r)) expect(Number.isInteger(v)).toBe(true);
          expect(r.remaining).toBeGreaterThanOrEqual(0);
          expect(r.remaining).toBeLessThanOrEqual(capacity);
          expect(r.retryAfterMs).toBeGreaterThanOrEqual(-1);
          expect(r.resetAfterMs).toBeGreaterThanOrEqual(0);
          expect(r.delayMs).toBeGreaterThanOrEqual(0);
          if (algo === 'slidinglog' && key.blob !== undefined) expectRingSane(key, p.limit);
        }
      }), { numRuns: 150 });
    });
  }
});

// ---------------------------------------------------------------------------------------------
// retry_after is true and remaining never negative, under clock steps back and forward and under
// limits that change between calls (a key called with a smaller limit/BURST, or another period,
// than the call that wrote its state).
// ---------------------------------------------------------------------------------------------

/** A key's stored state, shared by calls made with different parameters. */
interface Stored {
  exists: boolean;
  a: number;
  b: number;
  c: number;
  blob: Float64Array | undefined;
  expireAtMs: number;
}

/** A FakeKey for `p` holding a copy of `s` (its blob copied too: decide may be probed freely). */
function keyWith(algo: Algo, p: Params, s: Stored): FakeKey {
  const k = new FakeKey(algo, p);
  k.exists = s.exists;
  k.a = s.a;
  k.b = s.b;
  k.c = s.c;
  k.blob = s.blob === undefined ? undefined : Float64Array.from(s.blob);
  k.expireAtMs = s.expireAtMs;
  return k;
}

function storedOf(k: FakeKey): Stored {
  return { exists: k.exists, a: k.a, b: k.b, c: k.c, blob: k.blob, expireAtMs: k.expireAtMs };
}

/** One move of a timeline: a clock step (back or forward), then a call with one of the parameter sets. */
interface Move {
  deltaMs: number;
  cost: number;
  params: number;
}

function movesArb(sets: Params[]): fc.Arbitrary<Move[]> {
  const longest = Math.max(...sets.map((s) => s.periodMs));
  const capacity = Math.max(...sets.map((s) => Math.max(s.burst, s.limit)));
  const delta = fc.oneof(
    { weight: 3, arbitrary: fc.constant(0) },
    { weight: 4, arbitrary: fc.integer({ min: 1, max: Math.max(1, Math.ceil(longest / 3)) }) },
    { weight: 2, arbitrary: fc.integer({ min: -3 * longest, max: -1 }) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 3 * longest }) },
  );
  return fc.array(fc.record({
    deltaMs: delta,
    cost: fc.oneof({ weight: 3, arbitrary: fc.constant(1) }, { weight: 2, arbitrary: fc.integer({ min: 0, max: capacity + 1 }) }),
    params: fc.integer({ min: 0, max: sets.length - 1 }),
  }), { minLength: 1, maxLength: 60 });
}

/**
 * Parameter sets for one key: the first as drawn, the others smaller or larger in limit and BURST;
 * with `samePeriod` they keep the first one's period, else each has its own.
 */
function paramSetsArb(withBurst: boolean, samePeriod: boolean): fc.Arbitrary<Params[]> {
  return fc.array(paramsArb(withBurst), { minLength: 1, maxLength: 3 })
    .map((sets) => (samePeriod ? sets.map((s) => ({ ...s, periodMs: sets[0].periodMs })) : sets));
}

/**
 * Replays `moves`; after every call checks: every field an integer, 0 ≤ remaining ≤ capacity; when
 * refused with retry_after_ms r ≥ 0, r ≥ 1 and the same call r ms later (nothing else between) is
 * allowed. With one set of limits r is also the earliest such wait (r − 1 ms later is still refused);
 * with several it need not be: the key's TTL was set by the limits that wrote it, and it may expire
 * (and so allow) before the state, read with smaller limits, would.
 */
function checkTruthful(algo: Algo, sets: Params[], moves: Move[]): void {
  let stored: Stored = { exists: false, a: 0, b: 0, c: 0, blob: undefined, expireAtMs: 0 };
  let t = T0 + 10 * sets[0].periodMs;
  for (const { deltaMs, cost, params } of moves) {
    t += deltaMs;
    const p = sets[params];
    const capacity = algo === 'tokenbucket' || algo === 'leakybucket' || algo === 'gcra' ? p.burst : p.limit;
    const key = keyWith(algo, p, stored);
    const r = key.call(cost, t);
    const where = `${JSON.stringify(p)} cost ${cost} at +${t - T0}: ${JSON.stringify(r)}`;
    for (const v of Object.values(r)) expect(Number.isInteger(v), where).toBe(true);
    expect(r.remaining, where).toBeGreaterThanOrEqual(0);
    expect(r.remaining, where).toBeLessThanOrEqual(capacity);
    expect(r.resetAfterMs, where).toBeGreaterThanOrEqual(0);
    expect(r.delayMs, where).toBeGreaterThanOrEqual(0);
    if (r.limited === 1 && r.retryAfterMs !== -1) {
      expect(r.retryAfterMs, where).toBeGreaterThanOrEqual(1);
      if (sets.length === 1) expect(keyWith(algo, p, storedOf(key)).decide(cost, t + r.retryAfterMs - 1).limited, `${where}: allowed before retry_after_ms`).toBe(true);
      expect(keyWith(algo, p, storedOf(key)).decide(cost, t + r.retryAfterMs).limited, `${where}: refused at retry_after_ms`).toBe(false);
    }
    if (r.limited === 1 && cost <= capacity) expect(r.retryAfterMs, `${where}: never, though cost <= capacity`).not.toBe(-1);
    stored = storedOf(key);
  }
}

describe('RL.* retry_after_ms is true and remaining never negative (clock steps, changing limits)', () => {
  for (const algo of ALGOS) {
    const withBurst = algo === 'tokenbucket' || algo === 'leakybucket' || algo === 'gcra';
    it(`${algo}: clock steps back and forward, one set of limits: retry, PTTL and reset as without steps`, () => {
      const arb = paramsArb(withBurst).chain((p) => fc.record({ p: fc.constant(p), moves: movesArb([p]) }));
      fc.assert(fc.property(arb, ({ p, moves }) => {
        checkTruthful(algo, [p], moves);
        // With one set of limits the timing properties of the harness hold after every call too.
        const key = new FakeKey(algo, p);
        const capacity = withBurst ? p.burst : p.limit;
        let t = T0 + 10 * p.periodMs;
        for (const { deltaMs, cost } of moves) {
          t += deltaMs;
          const r = key.call(cost, t);
          expect(checkTimes(keyWith(algo, p, storedOf(key)), cost, t, r, capacity), `cost ${cost} at +${t - T0}: ${JSON.stringify(r)}`).toBeNull();
        }
      }), { numRuns: 200 });
    });

    it(`${algo}: limits (limit, BURST) that change between calls, same period`, () => {
      fc.assert(fc.property(paramSetsArb(withBurst, true).chain((sets) => fc.record({ sets: fc.constant(sets), moves: movesArb(sets) })), ({ sets, moves }) => {
        checkTruthful(algo, sets, moves);
      }), { numRuns: 200 });
    });

    it(`${algo}: limits and period that change between calls`, () => {
      fc.assert(fc.property(paramSetsArb(withBurst, false).chain((sets) => fc.record({ sets: fc.constant(sets), moves: movesArb(sets) })), ({ sets, moves }) => {
        checkTruthful(algo, sets, moves);
      }), { numRuns: 200 });
    });
  }
});

// ---------------------------------------------------------------------------------------------
// CL.THROTTLE and GCRA: their state is an absolute TAT, so a clock stepped back or smaller limits
// leave their waits true. Their replies are redis-cell's and Redis's to the byte (see the recorded
// vectors), quirks included: CL.THROTTLE's whole seconds drop a sub-millisecond remainder (a
// limited reply can even say retry_after 0), so its wait is true to within 1 ms; GCRA rounds up.
// ---------------------------------------------------------------------------------------------

/** The key both commands share (A = TAT µs, B = TAT extra ns), expiring as the keyspace does. */
interface TatKey {
  has: boolean;
  tatUs: number;
  tatNs: number;
  expireAtMs: number;
}

const cellOut = newDecision();
const gcraOut = newDecision();

/** CL.THROTTLE as src/commands/throttle.ts runs it (quantity 0 writes too); returns the reply. */
function throttle(k: TatKey, p: CellParams, quantity: number, nowUs: number, store: boolean): number[] {
  const has = k.has && Math.floor(nowUs / 1000) <= k.expireAtMs;
  cellThrottle(p, quantity, has, k.tatUs, k.tatNs, nowUs, cellOut);
  if (store) {
    k.has = has;
    if (cellOut.write) Object.assign(k, { has: true, tatUs: cellOut.a, tatNs: cellOut.b, expireAtMs: cellOut.expireAtMs });
  }
  return [cellOut.limited ? 1 : 0, cellOut.limit, cellOut.remaining, cellOut.retryAfter, cellOut.resetAfter];
}

/** GCRA as src/commands/throttle.ts runs it (it stores the TAT in whole µs). */
function gcra(k: TatKey, p: GcraParams, nowUs: number, store: boolean): number[] {
  const has = k.has && Math.floor(nowUs / 1000) <= k.expireAtMs;
  gcraDecide(p, has, k.tatUs, nowUs, gcraOut);
  if (store) {
    k.has = has;
    if (gcraOut.write) Object.assign(k, { has: true, tatUs: gcraOut.a, tatNs: 0, expireAtMs: gcraOut.expireAtMs });
  }
  return [gcraOut.limited ? 1 : 0, gcraOut.limit, gcraOut.remaining, gcraOut.retryAfter, gcraOut.resetAfter];
}

/** [max_burst, count, period s] triples for one key, and a timeline of µs steps back and forward. */
const tatCaseArb = fc.record({
  sets: fc.array(fc.tuple(fc.integer({ min: 0, max: 5 }), fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 6 })), { minLength: 1, maxLength: 3 }),
  moves: fc.array(fc.record({
    deltaUs: fc.oneof(
      { weight: 3, arbitrary: fc.constant(0) },
      { weight: 4, arbitrary: fc.integer({ min: 1, max: 2_000_000 }) },
      { weight: 2, arbitrary: fc.integer({ min: -20_000_000, max: -1 }) },
      { weight: 1, arbitrary: fc.integer({ min: 0, max: 20_000_000 }) },
    ),
    quantity: fc.integer({ min: 0, max: 8 }),
    params: fc.nat(),
  }), { minLength: 1, maxLength: 60 }),
});

describe('CL.THROTTLE and GCRA: waits stay true under clock steps and changing limits', () => {
  it('CL.THROTTLE: remaining >= 0; refused with retry_after R >= 0 -> allowed R s + 1 ms later', () => {
    fc.assert(fc.property(tatCaseArb, ({ sets, moves }) => {
      const k: TatKey = { has: false, tatUs: 0, tatNs: 0, expireAtMs: 0 };
      let nowUs = T0 * 1000;
      for (const { deltaUs, quantity, params } of moves) {
        nowUs += deltaUs;
        const p = cellParams(...sets[params % sets.length]) as CellParams;
        const r = throttle(k, p, quantity, nowUs, true);
        const where = `${JSON.stringify(sets[params % sets.length])} quantity ${quantity} at ${nowUs}: ${JSON.stringify(r)}`;
        expect(r[2], where).toBeGreaterThanOrEqual(0);
        if (r[0] === 1 && r[3] >= 0) expect(throttle({ ...k }, p, quantity, nowUs + r[3] * 1_000_000 + 1000, false)[0], where).toBe(0);
        if (r[0] === 1 && quantity <= p.limit) expect(r[3], where).toBeGreaterThanOrEqual(0);
      }
    }), { numRuns: 300 });
  });

  it('CL.THROTTLE: a key written with a larger tolerance reports remaining 0, not -1 (a case found by the property above)', () => {
    const k: TatKey = { has: false, tatUs: 0, tatNs: 0, expireAtMs: 0 };
    const nowUs = T0 * 1000 + 1;
    throttle(k, cellParams(3, 6, 1) as CellParams, 4, nowUs, true);
    // T = 2/9 s; τ − ttl lies in (−T, −⌊T⌋µs], where redis-cell's integer division gives −1.
    expect(throttle(k, cellParams(1, 9, 2) as CellParams, 0, nowUs, true)).toEqual([1, 2, 0, 1, 1]);
  });

  it('GCRA: remaining >= 0; refused with retry_after R >= 0 -> allowed R s later', () => {
    fc.assert(fc.property(tatCaseArb, ({ sets, moves }) => {
      const k: TatKey = { has: false, tatUs: 0, tatNs: 0, expireAtMs: 0 };
      let nowUs = T0 * 1000;
      for (const { deltaUs, quantity, params } of moves) {
        nowUs += deltaUs;
        const [maxBurst, count, periodSec] = sets[params % sets.length];
        const p = gcraParams(maxBurst, count, periodSec, Math.max(1, quantity)) as GcraParams;
        const r = gcra(k, p, nowUs, true);
        const where = `${JSON.stringify(sets[params % sets.length])} tokens ${Math.max(1, quantity)} at ${nowUs}: ${JSON.stringify(r)}`;
        expect(r[2], where).toBeGreaterThanOrEqual(0);
        if (r[0] === 1 && r[3] >= 0) {
          expect(r[3], where).toBeGreaterThanOrEqual(1);
          expect(gcra({ ...k }, p, nowUs + r[3] * 1_000_000, false)[0], where).toBe(0);
        }
      }
    }), { numRuns: 300 });
  });
});
