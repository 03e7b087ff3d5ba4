/**
 * RL.FIXEDWINDOW, pure: the textbook counter (every admitted request kept, counted per aligned
 * window [k·period, (k+1)·period)) replayed against the implementation; plus the invariant that no
 * aligned window ever admits more than `limit`.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { caseArb, FakeKey, refundCaseArb, replay, T0, type Model, type Params } from './rl-harness.ts';

class Counter implements Model {
  readonly admitted: { t: number; cost: number }[] = [];
  constructor(private readonly p: Params) {}
  private inWindow(t: number): number {
    const w = Math.floor(t / this.p.periodMs);
    return this.admitted.filter((a) => Math.floor(a.t / this.p.periodMs) === w).reduce((s, a) => s + a.cost, 0);
  }
  allows(cost: number, t: number): boolean {
    return this.inWindow(t) + cost <= this.p.limit;
  }
  record(cost: number, t: number): void {
    this.admitted.push({ t, cost });
  }
  isFresh(t: number): boolean {
    return this.inWindow(t) === 0;
  }
  /** The current window's newest admissions are taken back, `units` of them at most. */
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

describe('RL.FIXEDWINDOW (pure)', () => {
  it('REFUND agrees with the textbook counter (the current window minus n, floor 0)', () => {
    fc.assert(fc.property(refundCaseArb(false), ({ p, startMs, steps }) => {
      expect(replay('fixedwindow', p, new Counter(p), startMs, steps)).toBeNull();
    }), { numRuns: 300 });
  });

  it('REFUND lowers the current window only, keeps its expiry, deletes an emptied key', () => {
    const k = new FakeKey('fixedwindow', { limit: 5, periodMs: 1000, burst: 5 });
    k.call(4, T0 + 100);
    expect(k.refund(1, T0 + 200)).toEqual({ limited: 0, limit: 5, remaining: 2, retryAfterMs: -1, resetAfterMs: 800, delayMs: 0, effect: 1 });
    expect(k.pttl(T0 + 200)).toBe(800);
    expect(k.refund(9, T0 + 300)).toMatchObject({ remaining: 5, resetAfterMs: 0, effect: 2 });
    expect(k.pttl(T0 + 300)).toBe(-2);
  });

  it('agrees with the textbook counter; at most limit per aligned window', () => {
    fc.assert(fc.property(caseArb(false), ({ p, startMs, steps }) => {
      const perWindow = new Map<number, number>();
      expect(replay('fixedwindow', p, new Counter(p), startMs, steps, (t, cost) => {
        const w = Math.floor(t / p.periodMs);
        perWindow.set(w, (perWindow.get(w) ?? 0) + cost);
      })).toBeNull();
      for (const n of perWindow.values()) expect(n).toBeLessThanOrEqual(p.limit);
    }), { numRuns: 300 });
  });

  it('windows are aligned to the epoch; the key expires at the end of its window', () => {
    const k = new FakeKey('fixedwindow', { limit: 2, periodMs: 1000, burst: 2 });
    const t = T0 + 700; // T0 is a multiple of 1000
    expect(k.call(2, t)).toEqual({ limited: 0, limit: 2, remaining: 0, retryAfterMs: -1, resetAfterMs: 300, delayMs: 0 });
    expect(k.pttl(t)).toBe(300);
    expect(k.call(1, t + 299)).toEqual({ limited: 1, limit: 2, remaining: 0, retryAfterMs: 1, resetAfterMs: 1, delayMs: 0 });
    expect(k.call(2, t + 300).limited).toBe(0); // the boundary burst fixed windows are known for
    expect(k.call(3, t + 300).retryAfterMs).toBe(-1);
  });
});
