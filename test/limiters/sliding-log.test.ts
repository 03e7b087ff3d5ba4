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

  it('agrees with the textbook log on long timelines that grow, wrap and shrink the ring', () => {
    const arb = fc.record({ limit: fc.integer({ min: 2, max: 24 }), periodMs: fc.integer({ min: 5, max: 60 }) }).chain((q) => fc.record({
      p: fc.constant({ ...q, burst: q.limit }),
      steps: fc.array(fc.record({
        gapMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 4 }), fc.integer({ min: 0, max: 2 * q.periodMs })),
        cost: fc.oneof(fc.constant(1), fc.integer({ min: 0, max: q.limit + 1 })),
      }), { minLength: 50, maxLength: 200 }),
    }));
    fc.assert(fc.property(arb, ({ p, steps }) => {
      expect(replay('slidinglog', p, new Log(p), T0, steps)).toBeNull();
    }), { numRuns: 60 });
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
      expect((k.blob?.length ?? 0) / 2).toBeLessThanOrEqual(p.limit);
      expect(k.b).toBeLessThanOrEqual(p.limit);
      // One live entry is kept inline (no blob), two or more in the ring.
      expect(k.blob === undefined).toBe(k.b === 1);
    }
    const one = new FakeKey('slidinglog', { limit: 100, periodMs: 1000, burst: 100 });
    one.call(1, T0);
    expect(one.blob).toBeUndefined(); // one entry: inline in the state columns
    one.call(60, T0); // same ms: still one entry
    expect([one.a, one.b, one.c, one.blob]).toEqual([T0, 1, 61, undefined]);
    expect(one.call(39, T0 + 1)).toMatchObject({ limited: 0, remaining: 0, resetAfterMs: 1000 });
    expect(one.blob!.length).toBe(4); // a second timestamp: a ring of 2 entries
    expect(one.call(1, T0 + 2)).toMatchObject({ limited: 1, retryAfterMs: 998 });
    // The 61 units of T0 slide out at T0 + 1000; the ring is reused in place.
    const ring = one.blob;
    expect(one.call(1, T0 + 1000)).toMatchObject({ limited: 0, remaining: 60 });
    expect(one.call(1, T0 + 1001)).toMatchObject({ limited: 0, remaining: 98 });
    expect(one.blob).toBe(ring);
    // When a write leaves a single live entry the key goes back inline and drops the ring.
    expect(one.call(1, T0 + 2001)).toMatchObject({ limited: 0, remaining: 99 });
    expect([one.a, one.b, one.c, one.blob]).toEqual([T0 + 2001, 1, 1, undefined]);
  });
});
