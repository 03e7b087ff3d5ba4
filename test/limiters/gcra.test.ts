/**
 * RL.GCRA, pure: a textbook GCRA in BigInt nanoseconds (T = ⌊period_ms·10^6 / limit⌋,
 * τ = T·burst, allowed iff max(TAT, now) + T·cost − τ ≤ now) replayed against cell-throttle behind
 * the millisecond adapter; plus the equivalence with CL.THROTTLE k b−1 L P/1000.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cellParams, cellThrottle } from '../../src/limiters/cell-throttle.ts';
import { gcraMsParams, newGcraMsParams } from '../../src/limiters/gcra-ms.ts';
import { caseArb, FakeKey, refundCaseArb, replay, T0, type Model, type Params } from './rl-harness.ts';
import { newDecision } from '../../src/limiters/decision.ts';

class TextbookGcra implements Model {
  private tat: bigint | null = null;
  private readonly interval: bigint;
  private readonly tolerance: bigint;
  constructor(p: Params) {
    this.interval = (BigInt(p.periodMs) * 1_000_000n) / BigInt(p.limit);
    this.tolerance = this.interval * BigInt(p.burst);
  }
  private base(now: bigint): bigint {
    return this.tat !== null && this.tat > now ? this.tat : now;
  }
  allows(cost: number, t: number): boolean {
    const now = BigInt(t) * 1_000_000n;
    return this.base(now) + this.interval * BigInt(cost) - this.tolerance <= now;
  }
  record(cost: number, t: number): void {
    const now = BigInt(t) * 1_000_000n;
    this.tat = this.base(now) + this.interval * BigInt(cost);
  }
  isFresh(t: number): boolean {
    return this.tat === null || this.tat <= BigInt(t) * 1_000_000n;
  }
  /** The TAT moves back by units·T, not before now. */
  refund(units: number, t: number): void {
    if (this.tat === null) return;
    const now = BigInt(t) * 1_000_000n;
    const back = this.tat - this.interval * BigInt(units);
    this.tat = back > now ? back : now;
  }
}

describe('RL.GCRA (pure)', () => {
  it('REFUND agrees with a textbook GCRA (TAT back by n·T, not before now) on random timelines', () => {
    fc.assert(fc.property(refundCaseArb(true), ({ p, startMs, steps }) => {
      expect(replay('gcra', p, new TextbookGcra(p), startMs, steps)).toBeNull();
    }), { numRuns: 300 });
  });

  it('REFUND of a huge n on a key far ahead deletes it without forming n·T', () => {
    const k = new FakeKey('gcra', { limit: 1, periodMs: 1e9, burst: 100 });
    k.call(50, T0);
    expect(k.refund(Number.MAX_SAFE_INTEGER, T0)).toMatchObject({ remaining: 100, resetAfterMs: 0, effect: 2 });
    k.call(50, T0);
    expect(k.refund(49, T0)).toMatchObject({ remaining: 99, resetAfterMs: 1e9, effect: 1 });
  });

  it('agrees with a textbook GCRA in nanoseconds on random timelines', () => {
    fc.assert(fc.property(caseArb(true), ({ p, startMs, steps }) => {
      expect(replay('gcra', p, new TextbookGcra(p), startMs, steps)).toBeNull();
    }), { numRuns: 300 });
  });

  it('uses exactly the parameters of CL.THROTTLE k b-1 L P/1000 for whole seconds', () => {
    for (const [limit, periodMs, burst] of [[10, 60_000, 6], [3, 1000, 3], [7, 5000, 1], [1000, 86_400_000, 50]]) {
      const mine = newGcraMsParams();
      expect(gcraMsParams(limit, periodMs, burst, mine)).toBeNull();
      expect(mine).toEqual(cellParams(burst - 1, limit, periodMs / 1000));
      // Same decisions and TATs over a timeline, at microsecond times.
      const cell = newDecision();
      const k = new FakeKey('gcra', { limit, periodMs, burst });
      let has = false;
      let tatUs = 0;
      let tatNs = 0;
      for (let i = 0; i < 200; i++) {
        const nowUs = T0 * 1000 + i * 137_777;
        cellThrottle(mine, 1, has, tatUs, tatNs, nowUs, cell);
        const r = k.call(1, Math.floor(nowUs / 1000), nowUs);
        expect(r.limited).toBe(cell.limited ? 1 : 0);
        if (r.limited === 0) expect(r.remaining).toBe(cell.remaining);
        if (cell.write) {
          has = true;
          tatUs = cell.a;
          tatNs = cell.b;
        }
      }
    }
  });

  it('reports milliseconds rounded up from the exact nanosecond durations', () => {
    // 3 per 1000 ms: T = 333333333 ns.
    const k = new FakeKey('gcra', { limit: 3, periodMs: 1000, burst: 1 });
    expect(k.call(1, T0)).toEqual({ limited: 0, limit: 1, remaining: 0, retryAfterMs: -1, resetAfterMs: 334, delayMs: 0 });
    expect(k.call(1, T0 + 1)).toEqual({ limited: 1, limit: 1, remaining: 0, retryAfterMs: 333, resetAfterMs: 333, delayMs: 0 });
    expect(k.call(1, T0 + 333).limited).toBe(1);
    expect(k.call(1, T0 + 334).limited).toBe(0);
    expect(k.call(2, T0 + 334).retryAfterMs).toBe(-1);
  });
});
