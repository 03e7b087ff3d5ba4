/**
 * RL.SLIDINGLOG, pure: the textbook log (every admitted unit's timestamp kept forever, counted in
 * (t − period, t]) replayed against the ring-buffer implementation; plus the invariant that no
 * interval of period_ms ever admits more than `limit`, and that the ring never exceeds `limit`
 * entries.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { slidingLogDecide, slidingLogStateError } from '../../src/limiters/sliding-log.ts';
import { caseArb, FakeKey, refundCaseArb, replay, T0, type Model, type Params } from './rl-harness.ts';
import { newDecision } from '../../src/limiters/decision.ts';

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
  /** The newest `units` units still in the window are dropped. */
  refund(units: number, t: number): void {
    for (let i = this.stamps.length - 1; i >= 0 && units > 0; i--) {
      if (this.stamps[i] > t - this.p.periodMs && this.stamps[i] <= t) {
        this.stamps.splice(i, 1);
        units--;
      }
    }
  }
}

describe('RL.SLIDINGLOG (pure)', () => {
  it('REFUND agrees with the textbook log (the newest n units dropped), short and long timelines', () => {
    fc.assert(fc.property(refundCaseArb(false), ({ p, startMs, steps }) => {
      expect(replay('slidinglog', p, new Log(p), startMs, steps)).toBeNull();
    }), { numRuns: 300 });
    const arb = fc.record({ limit: fc.integer({ min: 2, max: 24 }), periodMs: fc.integer({ min: 5, max: 60 }) }).chain((q) => fc.record({
      p: fc.constant({ ...q, burst: q.limit }),
      steps: fc.array(fc.record({
        gapMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 4 }), fc.integer({ min: 0, max: 2 * q.periodMs })),
        cost: fc.oneof(fc.constant(1), fc.integer({ min: 0, max: q.limit + 1 })),
        refund: fc.integer({ min: 0, max: 4 }).map((n) => n === 0),
      }), { minLength: 50, maxLength: 200 }),
    }));
    fc.assert(fc.property(arb, ({ p, steps }) => {
      expect(replay('slidinglog', p, new Log(p), T0, steps)).toBeNull();
    }), { numRuns: 60 });
  });

  it('REFUND keeps a valid stored state (ring or inline) and expires with its newest kept entry', () => {
    const p = { limit: 10, periodMs: 100, burst: 10 };
    const k = new FakeKey('slidinglog', p);
    k.call(2, T0);
    k.call(3, T0 + 10);
    k.call(1, T0 + 20);
    // Drops the unit at +20 and 2 of the 3 at +10: left 2 at +0 and 1 at +10.
    expect(k.refund(3, T0 + 30)).toEqual({ limited: 0, limit: 10, remaining: 7, retryAfterMs: -1, resetAfterMs: 80, delayMs: 0, effect: 1 });
    expect(slidingLogStateError(k.a, k.b, k.c, k.blob)).toBeNull();
    expect(k.pttl(T0 + 30)).toBe(80);
    expect(k.refund(1, T0 + 30)).toMatchObject({ remaining: 8, resetAfterMs: 70, effect: 1 });
    expect(k.blob).toBeUndefined(); // one entry left: inline
    expect(slidingLogStateError(k.a, k.b, k.c, k.blob)).toBeNull();
    expect(k.refund(2, T0 + 30)).toMatchObject({ remaining: 10, resetAfterMs: 0, effect: 2 });
  });

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

/**
 * The textbook log again, with the waits derived directly (so long timelines with large limits stay
 * fast): every admitted unit's timestamp, oldest first.
 */
function textbookReply(stamps: number[], p: Params, cost: number, t: number) {
  const live = stamps.filter((s) => s > t - p.periodMs && s <= t);
  const spendable = Math.max(0, p.limit - live.length);
  const limited = cost > 0 && cost > spendable;
  // Refused: wait until the (live + cost − limit)-th oldest live unit has slid out.
  const retryAfterMs = limited && cost <= p.limit ? live[live.length + cost - p.limit - 1] + p.periodMs - t : -1;
  if (!limited && cost > 0) for (let i = 0; i < cost; i++) stamps.push(t);
  const after = !limited && cost > 0 ? live.length + cost : live.length;
  const newest = !limited && cost > 0 ? t : live[live.length - 1];
  return {
    limited: limited ? 1 : 0, limit: p.limit, remaining: Math.max(0, p.limit - after), retryAfterMs,
    resetAfterMs: after > 0 ? newest + p.periodMs - t : 0, delayMs: 0,
  };
}

describe('RL.SLIDINGLOG: the binary searches over running totals', () => {
  it('agree with the textbook log on long timelines, large limits and costs, peeks and refusals', () => {
    const arb = fc.record({ limit: fc.integer({ min: 1, max: 300 }), periodMs: fc.integer({ min: 2, max: 400 }) }).chain((q) => fc.record({
      p: fc.constant({ ...q, burst: q.limit }),
      steps: fc.array(fc.record({
        gapMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3 }), fc.integer({ min: 0, max: q.periodMs }), fc.integer({ min: 0, max: 3 * q.periodMs })),
        cost: fc.oneof(fc.constant(1), fc.constant(0), fc.integer({ min: 0, max: q.limit + 1 }), fc.integer({ min: 1, max: 4 })),
      }), { minLength: 50, maxLength: 400 }),
    }));
    fc.assert(fc.property(arb, ({ p, steps }) => {
      const key = new FakeKey('slidinglog', p);
      const stamps: number[] = [];
      let t = T0;
      for (let i = 0; i < steps.length; i++) {
        t += steps[i].gapMs;
        expect(key.call(steps[i].cost, t), `step ${i} cost ${steps[i].cost} at +${t - T0}`).toEqual(textbookReply(stamps, p, steps[i].cost, t));
      }
    }), { numRuns: 150 });
  });

  /** A ring whose reads are counted (the limiter reads its blob by index only). */
  function counted(blob: Float64Array): { ring: Float64Array; reads: () => number } {
    let reads = 0;
    const ring = new Proxy(blob, {
      get(target, prop) {
        if (typeof prop === 'string' && /^\d+$/.test(prop)) reads++;
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === 'function' ? (v as (...args: unknown[]) => unknown).bind(target) : v;
      },
    });
    return { ring, reads: () => reads };
  }

  it('a refusal or a peek reads O(log n) entries of a 2^18-entry log, however many slid out', () => {
    const n = 2 ** 18;
    const p = { limit: n, periodMs: n, burst: n };
    const key = new FakeKey('slidinglog', p);
    for (let i = 0; i < n; i++) expect(key.call(1, T0 + i).limited).toBe(0);
    expect(key.b).toBe(n);
    const { ring, reads } = counted(key.blob!);
    const d = newDecision();
    const bound = 4 * Math.log2(n) + 8; // two binary searches, two reads per step, plus the ends
    const cases: [string, number, number][] = [
      ['full log, refused COST 1', 1, T0 + n - 1],
      ['full log, refused COST n', n, T0 + n - 1],
      ['half slid out, peek', 0, T0 + n - 1 + n / 2],
      ['half slid out, refused COST 3n/4', (3 * n) / 4, T0 + n - 1 + n / 2],
      ['all but one slid out, peek', 0, T0 + 2 * n - 2],
    ];
    for (const [what, cost, t] of cases) {
      const before = reads();
      slidingLogDecide(p.limit, p.periodMs, cost, true, key.a, key.b, key.c, ring, t, d);
      expect(reads() - before, what).toBeLessThanOrEqual(bound);
      expect(d.write, what).toBe(false);
    }
    // And the answers are the textbook ones.
    slidingLogDecide(p.limit, p.periodMs, (3 * n) / 4, true, key.a, key.b, key.c, ring, T0 + n - 1 + n / 2, d);
    expect([d.limited, d.remaining, d.retryAfter]).toEqual([true, n / 2, n / 4]);
  });

  it('reads a ring written by an older build (units per entry) and rewrites it as running totals', () => {
    const p = { limit: 10, periodMs: 100, burst: 10 };
    const key = new FakeKey('slidinglog', p);
    // Four entries, 1 + 2 + 3 + 1 units, oldest at ring index 2 of a ring of 4 (wrapped).
    key.exists = true;
    key.blob = Float64Array.from([T0 + 20, 3, T0 + 30, 1, T0, 1, T0 + 10, 2]);
    [key.a, key.b, key.c, key.expireAtMs] = [2, 4, 7, T0 + 130];
    expect(key.call(0, T0 + 105)).toEqual({ limited: 0, limit: 10, remaining: 4, retryAfterMs: -1, resetAfterMs: 25, delayMs: 0 });
    expect(Array.from(key.blob)).toEqual([T0 + 20, 6, T0 + 30, 7, T0, 1, T0 + 10, 3]);
    expect(key.call(5, T0 + 105)).toMatchObject({ limited: 1, remaining: 4, retryAfterMs: 5 });
    expect(key.call(4, T0 + 105)).toMatchObject({ limited: 0, remaining: 0 });
  });

  it('restarts the running totals before they pass 2^52 (they stay exact)', () => {
    const p = { limit: 10, periodMs: 100, burst: 10 };
    const key = new FakeKey('slidinglog', p);
    const big = 2 ** 52 - 3;
    key.exists = true;
    key.blob = Float64Array.from([T0, big - 2, T0 + 10, big]);
    [key.a, key.b, key.c, key.expireAtMs] = [0, 2, 5, T0 + 110];
    expect(key.call(4, T0 + 20)).toMatchObject({ limited: 0, remaining: 1 });
    // Ring too small for three entries: copied into a new one, totals counted from 0.
    expect(Array.from(key.blob!.subarray(0, 6))).toEqual([T0, 3, T0 + 10, 5, T0 + 20, 9]);
    key.blob = Float64Array.from([T0, big - 2, T0 + 10, big, 0, 0]);
    [key.a, key.b, key.c] = [0, 2, 5];
    expect(key.call(4, T0 + 20)).toMatchObject({ limited: 0, remaining: 1 });
    // In place: restarted from the oldest entry.
    expect(Array.from(key.blob!)).toEqual([T0, 3, T0 + 10, 5, T0 + 20, 9]);
    expect(key.call(1, T0 + 101)).toMatchObject({ limited: 0, remaining: 3 });
    expect(key.c).toBe(7);
  });
});

describe('slidingLogStateError (for loaders of stored state)', () => {
  it('accepts every state the limiter writes on random timelines', () => {
    fc.assert(fc.property(caseArb(false), ({ p, startMs, steps }) => {
      const key = new FakeKey('slidinglog', p);
      let t = startMs;
      for (const { gapMs, cost } of steps) {
        t += gapMs;
        key.call(cost, t);
        if (key.exists) expect(slidingLogStateError(key.a, key.b, key.c, key.blob)).toBeNull();
      }
    }), { numRuns: 200 });
  });

  it("accepts an older build's units-per-entry ring; refuses what the limiter cannot have written", () => {
    const ring = (...v: number[]) => Float64Array.from(v);
    expect(slidingLogStateError(2, 4, 7, ring(T0 + 20, 3, T0 + 30, 1, T0, 1, T0 + 10, 2))).toBeNull();
    expect(slidingLogStateError(0, 2, 5, ring(T0, 3, T0 + 10, 5))).toBeNull();
    expect(slidingLogStateError(T0, 1, 5, undefined)).toBeNull();
    const bad: [number, number, number, Float64Array | undefined][] = [
      [T0, 2, 5, undefined], // two entries need a ring
      [T0, 1, 0, undefined], // an entry holds at least one unit
      [T0 + 0.5, 1, 5, undefined],
      [T0, 1, NaN, undefined],
      [T0, 1, 2_000_000, undefined],
      [0, 1e15, 5, ring(T0, 3, T0 + 10, 5)], // more entries than the ring holds
      [2, 2, 5, ring(T0, 3, T0 + 10, 5)], // head outside the ring
      [0, 2, 5, ring(T0 + 10, 3, T0, 5)], // timestamps out of order
      [0, 2, 5, ring(T0, 3, T0, 5)], // two entries in one ms
      [0, 2, 5, ring(T0, 5, T0 + 10, 5)], // an entry of 0 units
      [0, 2, 5, ring(T0, 1, T0 + 10, 6)], // totals from offset 6 − 5 = 1: the oldest entry holds 0 units
      [0, 2, 5, ring(T0, 3, T0 + 10, 1)], // per entry, 4 units, not 5
      [0, 2, 5, ring(T0, 3, T0 + 10, NaN)],
      [0, 3, 5, ring(T0, 3, T0 + 10, 5, T0 + 20)], // odd length
    ];
    for (const [a, b, c, blob] of bad) expect(slidingLogStateError(a, b, c, blob), JSON.stringify([a, b, c, blob && Array.from(blob)])).not.toBeNull();
  });
});
