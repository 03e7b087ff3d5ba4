/**
 * RL.SLIDINGWINDOW, pure: Cloudflare's estimate computed from the full history (counts per aligned
 * window recomputed from every admitted request, the rule compared in exact rationals) replayed
 * against the three-column implementation.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { caseArb, FakeKey, refundCaseArb, replay, T0, type Model, type Params } from './rl-harness.ts';

class Estimate implements Model {
  readonly admitted: { t: number; cost: number }[] = [];
  constructor(private readonly p: Params) {}
  private count(w: number): number {
    return this.admitted.filter((a) => Math.floor(a.t / this.p.periodMs) === w).reduce((s, a) => s + a.cost, 0);
  }
  allows(cost: number, t: number): boolean {
    const P = BigInt(this.p.periodMs);
    const w = Math.floor(t / this.p.periodMs);
    const elapsed = BigInt(t) - BigInt(w) * P;
    // prev·(1 − elapsed/P) + current + cost ≤ limit, multiplied by P.
    return BigInt(this.count(w - 1)) * (P - elapsed) + BigInt(this.count(w) + cost) * P <= BigInt(this.p.limit) * P;
  }
  record(cost: number, t: number): void {
    this.admitted.push({ t, cost });
  }
  isFresh(t: number): boolean {
    const w = Math.floor(t / this.p.periodMs);
    return this.count(w) === 0 && this.count(w - 1) === 0;
  }
  /** The current window's count minus `units`, floor 0; the previous window is history. */
  refund(units: number, t: number): void {
    const w = Math.floor(t / this.p.periodMs);
    for (let i = this.admitted.length - 1; i >= 0 && units > 0; i--) {
      const a = this.admitted[i];
      if (Math.floor(a.t / this.p.periodMs) !== w) continue;
      const back = Math.min(units, a.cost);
      a.cost -= back;
      units -= back;
    }
  }
}

describe('RL.SLIDINGWINDOW (pure)', () => {
  it('REFUND agrees with the estimate recomputed from the full history (current window minus n)', () => {
    fc.assert(fc.property(refundCaseArb(false), ({ p, startMs, steps }) => {
      expect(replay('slidingwindow', p, new Estimate(p), startMs, steps)).toBeNull();
    }), { numRuns: 300 });
  });

  it('REFUND of the whole current count keeps the previous window until it slides out', () => {
    const k = new FakeKey('slidingwindow', { limit: 4, periodMs: 1000, burst: 4 });
    k.call(2, T0 + 500);
    expect(k.call(2, T0 + 1200).limited).toBe(0);
    // prev 2 weighted 0.7 = 1.4, current 0: remaining ⌊4 − 1.4⌋ = 2; fresh when the previous slides out.
    expect(k.refund(3, T0 + 1300)).toEqual({ limited: 0, limit: 4, remaining: 2, retryAfterMs: -1, resetAfterMs: 700, delayMs: 0, effect: 1 });
    expect(k.pttl(T0 + 1300)).toBe(700);
  });

  it('agrees with the estimate recomputed from the full history', () => {
    fc.assert(fc.property(caseArb(false), ({ p, startMs, steps }) => {
      expect(replay('slidingwindow', p, new Estimate(p), startMs, steps)).toBeNull();
    }), { numRuns: 300 });
  });

  it("weights the previous window by the part of it still inside the last period (Cloudflare's example)", () => {
    // 42 in the previous minute, 15 s into this one: 42·0.75 = 31.5, so 18 more fit (limit 50).
    const k = new FakeKey('slidingwindow', { limit: 50, periodMs: 60_000, burst: 50 });
    const minute = T0 - (T0 % 60_000);
    expect(k.call(42, minute - 30_000).limited).toBe(0);
    expect(k.call(19, minute + 15_000).limited).toBe(1); // 31.5 + 19 > 50
    expect(k.call(18, minute + 15_000)).toMatchObject({ limited: 0, remaining: 0 });
    // One more fits once 42·(1 − e/60000) ≤ 31: e ≥ 15714.28..., so at 15715 ms, 715 ms from now.
    expect(k.call(1, minute + 15_000)).toMatchObject({ limited: 1, remaining: 0, retryAfterMs: 715, resetAfterMs: 105_000 });
    expect(k.call(1, minute + 15_714).limited).toBe(1);
    expect(k.call(1, minute + 15_715).limited).toBe(0);
    // Written in this window: the key lives to the end of the next one.
    expect(k.pttl(minute + 15_715)).toBe(120_000 - 15_715);
  });
});
