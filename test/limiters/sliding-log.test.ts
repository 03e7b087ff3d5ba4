/**
 * RL.SLIDINGLOG, pure: the textbook log (every admitted unit's timestamp kept forever, counted in
 * (t − period, t]) replayed against the ring-buffer implementation; plus the invariant that no
 * interval of period_ms ever admits more than `limit`, and that the ring never exceeds `limit`
 * entries.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { caseArb, FakeKey, replay, T0, type Model, type Params } from './rl-harness.ts';

class Log implements Model {
  readonly stamps: number[] = [];
  constructor(private readonly p: Params) {}
  private live(t: number): number {
    return this.stamps.filter((s) => s > t - this.p.periodMs && s <= t).length;
  }
  allows(cost: number, t: number): boolean {
    return this.live(t) + cost <= this.p.limit;
  }
  record(cost: number, t: number): void {
    for (let i = 0; i < cost; i++) this.stamps.push(t);
  }
  isFresh(t: number): boolean {
    return this.live(t) === 0;
  }
}

describe('RL.SLIDINGLOG (pure)', () => {
  it('agrees with the textbook log; never more than limit in any period_ms interval', () => {
    fc.assert(fc.property(caseArb(false), ({ p, startMs, steps }) => {
      const admitted: number[] = [];
      expect(replay('slidinglog', p, new Log(p), startMs, steps, (t, cost) => {
        for (let i = 0; i < cost; i++) admitted.push(t);
      })).toBeNull();
      // Every interval (s − period, s] ending at an admission holds at most limit.
      for (const s of admitted) expect(admitted.filter((x) => x > s - p.periodMs && x <= s).length).toBeLessThanOrEqual(p.limit);
    }), { numRuns: 300 });
  });

  it('the ring stays within limit entries, wraps, and grows only as needed', () => {
    const p = { limit: 5, periodMs: 10, burst: 5 };
    const k = new FakeKey('slidinglog', p);
    const m = new Log(p);
    for (let i = 0; i < 2000; i++) {
      const t = T0 + i * 3;
      const r = k.call(1, t);
      expect(r.limited).toBe(m.allows(1, t) ? 0 : 1);
      if (r.limited === 0) m.record(1, t);
      expect(k.blob!.length / 2).toBeLessThanOrEqual(p.limit);
      expect(k.b).toBeLessThanOrEqual(p.limit);
    }
    const one = new FakeKey('slidinglog', { limit: 100, periodMs: 1000, burst: 100 });
    one.call(1, T0);
    expect(one.blob!.length).toBe(4); // 2 entries to start with
    one.call(60, T0); // same ms: one entry
    expect(one.b).toBe(1);
    expect(one.call(39, T0 + 1)).toMatchObject({ limited: 0, remaining: 0, resetAfterMs: 1000 });
    expect(one.call(1, T0 + 2)).toMatchObject({ limited: 1, retryAfterMs: 998 });
  });
});
