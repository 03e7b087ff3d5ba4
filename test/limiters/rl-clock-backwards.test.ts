/**
 * DEBUG CLOCK SET may move the server clock backwards (the real clock never does). Every RL.*
 * limiter must then treat the jump as no time passing: never admit more than it would have at the
 * latest time it saw, never report a negative or fractional field, never corrupt the sliding log.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FakeKey, paramsArb, T0, type Algo } from './rl-harness.ts';

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
