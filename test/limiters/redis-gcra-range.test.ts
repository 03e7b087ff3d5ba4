/**
 * Redis GCRA over Redis's whole signed 64-bit µs range: the limiter (double fast path, BigInt
 * beyond) against a BigInt transcription of src/gcra.c with its three overflow checks.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { gcraDecide, gcraParams } from '../../src/limiters/redis-gcra.ts';
import { GcraReferenceKey, LLONG_MAX } from './redis-gcra-reference.ts';
import { newDecision } from '../../src/limiters/decision.ts';

const EPOCH_US = 1_800_000_000_000_000;
type Reply = string[] | string;

/** The shared BigInt transcription of gcra.c, its replies as decimal strings. */
class RefKey extends GcraReferenceKey {
  callText(burst: bigint, perPeriod: bigint, period: number, tokens: bigint, nowUs: bigint): Reply {
    const r = this.call(burst, perPeriod, period, tokens, nowUs);
    if (typeof r === 'string') return r;
    return [String(r.limited), String(r.limit), String(r.remaining), String(r.retryAfterSec), String(r.resetAfterSec)];
  }
}

/** The limiter as src/commands/throttle.ts drives it: TAT as (nearest double, exact remainder). */
class MyKey {
  has = false;
  a = 0;
  c = 0;
  expireAtMs = 0;
  private readonly d = newDecision();

  call(burst: bigint, perPeriod: bigint, period: number, tokens: bigint, nowUs: bigint): Reply {
    const nowMs = Number(nowUs / 1000n);
    if (this.has && nowMs > this.expireAtMs) this.has = false;
    const small = (x: bigint): number | bigint => (x <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(x) : x);
    const p = gcraParams(small(burst), Number(perPeriod), period, small(tokens));
    if (typeof p === 'string') return p;
    const d = this.d;
    gcraDecide(p, this.has, this.a, Number(nowUs), d, this.c);
    if (d.overflow) return 'tokens-overflow';
    if (d.write) {
      this.has = true;
      this.a = d.a;
      this.c = d.c;
      this.expireAtMs = d.expireAtMs;
      expect(Number.isInteger(d.a) && Number.isInteger(d.c) && Math.abs(d.c) <= 1024).toBe(true);
    }
    const limit = d.wide ? String(d.wideLimit) : String(d.limit);
    const remaining = d.wide ? String(d.wideRemaining) : String(d.remaining);
    for (const v of [d.limit, d.remaining, d.retryAfter, d.resetAfter]) expect(Number.isInteger(v)).toBe(true);
    return [d.limited ? '1' : '0', limit, remaining, String(d.retryAfter), String(d.resetAfter)];
  }

  tat(): bigint {
    return BigInt(this.a) + BigInt(this.c);
  }
}

function run(steps: [bigint, bigint, number, bigint, bigint][]): { mine: Reply[]; ref: Reply[] } {
  const m = new MyKey();
  const r = new RefKey();
  const mine: Reply[] = [];
  const ref: Reply[] = [];
  for (const [b, n, p, t, now] of steps) {
    mine.push(m.call(b, n, p, t, now));
    ref.push(r.callText(b, n, p, t, now));
    if (r.tat !== null && m.has) expect(m.tat()).toBe(r.tat);
  }
  return { mine, ref };
}

describe('GCRA (Redis): the full 64-bit µs range', () => {
  const NOW = BigInt(EPOCH_US);

  it('computes combinations past 2^53/4 µs that Redis computes (two found by reply comparison)', () => {
    // One token per 2251799814 s: E = 2.25e15 µs, beyond the old 2^51 cut.
    const a = run([[0n, 1n, 2251799814, 1n, NOW], [0n, 1n, 2251799814, 1n, NOW]]);
    expect(a.mine).toEqual(a.ref);
    expect(a.mine[0]).toEqual(['0', '1', '0', '-1', '2251799814']);
    expect(a.mine[1]).toEqual(['1', '1', '0', '2251799814', '2251799814']);
    // 2 per day with burst 204097: variance 43200 s · 204098 ≈ 8.8e15 µs.
    const b = run([[204097n, 2n, 86400, 1n, NOW]]);
    expect(b.mine).toEqual(b.ref);
    expect(b.mine[0]).toEqual(['0', '204098', '204097', '-1', '43200']);
  });

  it('limit and remaining beyond 2^53 come out exact; a TAT past 2^53 µs round-trips exactly', () => {
    const burst = 2n ** 62n + 12345n;
    const r = run([[burst, 1_000_000n, 1, 1n, NOW], [burst, 1_000_000n, 1, 3n, NOW + 5n]]);
    expect(r.mine).toEqual(r.ref);
    expect((r.mine[0] as string[])[1]).toBe(String(burst + 1n));
    // E = 1e6 µs and 4.6e12 tokens at once: a TAT of ~4.6e18 µs, stored as double + remainder.
    const s = run([[2n ** 62n, 1n, 1, 4_611_686_018_427n, NOW], [2n ** 62n, 1n, 1, 7n, NOW], [0n, 1n, 1, 1n, NOW + 1000n]]);
    expect(s.mine).toEqual(s.ref);
  });

  it('the three overflow checks, including the new TAT above 2^63 − 1', () => {
    expect(run([[9223372036854775806n, 1n, 999999999999, 1n, NOW]]).mine).toEqual(['burst-overflow']);
    expect(run([[0n, 1n, 999999999999, 9223372036854775807n, NOW]]).mine).toEqual(['tokens-overflow']);
    // E = 1 µs, TOKENS 2^63 − 1 − now: allowed once (TAT = 2^63 − 1), then any token overflows.
    const big = LLONG_MAX - NOW;
    const r = run([[2n ** 62n * 2n - 1n, 1_000_000n, 1, big, NOW], [0n, 1_000_000n, 1, 1n, NOW]]);
    expect(r.mine).toEqual(r.ref);
    expect(r.mine[1]).toBe('tokens-overflow');
  });

  it('equals the BigInt model over random timelines across the whole range', () => {
    const mag = (maxBits: number) => fc.integer({ min: 0, max: maxBits }).chain((bits) =>
      fc.bigInt({ min: bits === 0 ? 0n : 2n ** BigInt(bits - 1), max: 2n ** BigInt(bits) }));
    const periodArb = fc.oneof(
      fc.constantFrom(1, 0.5, 60, 86400, 2251799814, 999999999999, 123456.789),
      fc.double({ min: 1e-7, max: 999999999999, noNaN: true }),
    );
    const step = fc.record({
      burst: mag(63).map((b) => (b > LLONG_MAX ? LLONG_MAX : b)),
      perPeriod: fc.oneof(fc.bigInt({ min: 1n, max: 1000n }), mag(63).map((n) => (n < 1n ? 1n : n > LLONG_MAX ? LLONG_MAX : n))),
      period: periodArb,
      tokens: fc.oneof(fc.constant(1n), mag(63).map((n) => (n < 1n ? 1n : n > LLONG_MAX ? LLONG_MAX : n))),
      dtUs: fc.oneof(fc.constant(0n), fc.bigInt({ min: 0n, max: 10_000_000n }), mag(50)),
    });
    fc.assert(fc.property(fc.array(step, { minLength: 1, maxLength: 12 }), fc.boolean(), (steps, reuse) => {
      let now = NOW;
      const first = steps[0];
      const tl: [bigint, bigint, number, bigint, bigint][] = steps.map((s) => {
        now += s.dtUs;
        // Half the timelines keep one limit (as callers do) and vary only TOKENS.
        return reuse ? [first.burst, first.perPeriod, first.period, s.tokens, now] : [s.burst, s.perPeriod, s.period, s.tokens, now];
      });
      const r = run(tl);
      expect(r.mine).toEqual(r.ref);
    }), { numRuns: 3000 });
  });

  it('the fast path (small intervals and TATs) agrees with the model on everyday limits', () => {
    fc.assert(fc.property(
      fc.integer({ min: 0, max: 1000 }), fc.integer({ min: 1, max: 10_000 }), fc.constantFrom(0.5, 1, 60, 3600, 86400),
      fc.array(fc.tuple(fc.integer({ min: 1, max: 20 }), fc.integer({ min: 0, max: 5_000_000 })), { minLength: 1, maxLength: 30 }),
      (burst, per, period, calls) => {
        let now = NOW;
        const r = run(calls.map(([t, dt]) => { now += BigInt(dt); return [BigInt(burst), BigInt(per), period, BigInt(t), now]; }));
        expect(r.mine).toEqual(r.ref);
      }), { numRuns: 500 });
  });
});
