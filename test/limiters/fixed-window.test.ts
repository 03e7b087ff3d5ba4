/**
 * RL.FIXEDWINDOW, pure: the textbook counter (every admitted request kept, counted per aligned
 * window [k·period, (k+1)·period)) replayed against the implementation; plus the invariant that no
 * aligned window ever admits more than `limit`.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { caseArb, FakeKey, replay, T0, type Model, type Params } from './rl-harness.ts';

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
}

describe('RL.FIXEDWINDOW (pure)', () => {
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
