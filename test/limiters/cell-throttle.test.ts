/**
 * Pure tests of the two GCRA limiters with a fake clock (no server, no socket).
 *
 * - redis-cell's own unit test timeline (`src/cell/mod.rs`, `it_rate_limits`) as a table;
 * - a reference model that follows redis-cell's `rate_limit` line by line in BigInt nanoseconds,
 *   checked first against the recorded vectors and then against cellgate over a dense parameter
 *   grid with seeded random timelines (replies, stored TAT and key expiry must be identical);
 * - hand-checked cases for Redis 8.8's GCRA;
 * - Dragonfly's ClThrottle test timeline, with redis-cell's values (Dragonfly rounds up one
 *   second too many).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { cellParams, cellThrottle, MAX_BURST, MAX_PERIOD_SEC, MAX_TOLERANCE_US, type CellParams } from '../../src/limiters/cell-throttle.ts';
import { gcraDecide, gcraParams, type GcraParams } from '../../src/limiters/redis-gcra.ts';
import { GcraReferenceKey } from './redis-gcra-reference.ts';
import { newDecision } from '../../src/limiters/decision.ts';

const VECTORS = process.env.CELLGATE_VECTORS ?? fileURLToPath(new URL('../fixtures/vectors/', import.meta.url));
const EPOCH_US = 1_800_000_000_000_000; // 2027-01-15T08:00:00Z, where the recorded timelines start

function readJsonl<T>(name: string): T[] {
  return readFileSync(VECTORS + name, 'utf8').split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as T);
}

// ---------------------------------------------------------------------------------------------
// cellgate's limiter behind a fake keyspace: the same lookup/store steps src/commands/throttle.ts
// performs, with Redis's expiry rule (a key is gone once now_ms > expire_at_ms).
// ---------------------------------------------------------------------------------------------

interface Outcome {
  reply: number[];
  /** PTTL after the call: −2 when there is no key. */
  pttl: number;
  /** The stored TAT in ns, when there is a key. */
  tatNs: bigint | null;
}

class CellKey {
  has = false;
  tatUs = 0;
  tatNs = 0;
  expireAtMs = 0;
  private readonly d = newDecision();

  call(p: CellParams, quantity: number, nowUs: number): Outcome {
    const nowMs = Math.floor(nowUs / 1000);
    if (this.has && nowMs > this.expireAtMs) this.has = false;
    const d = this.d;
    cellThrottle(p, quantity, this.has, this.tatUs, this.tatNs, nowUs, d);
    if (d.write) {
      this.has = true;
      this.tatUs = d.a;
      this.tatNs = d.b;
      this.expireAtMs = d.expireAtMs;
    }
    return {
      reply: [d.limited ? 1 : 0, d.limit, asI64(d.remaining), d.retryAfter, d.resetAfter],
      pttl: this.has ? Math.max(0, this.expireAtMs - nowMs) : -2,
      tatNs: this.has ? BigInt(this.tatUs) * 1000n + BigInt(this.tatNs) : null,
    };
  }
}

/** cellgate reports an f64 → i64 saturation as ±Number.MAX_VALUE; the wire shows i64::MAX. */
function asI64(n: number): number {
  return n >= 2 ** 63 ? Number(I64_MAX) : n;
}

function params(burst: number, count: number, period: number): CellParams {
  const p = cellParams(burst, count, period);
  if (typeof p !== 'object') throw new Error(`cellParams(${burst}, ${count}, ${period}) refused`);
  return p;
}

// ---------------------------------------------------------------------------------------------
// The reference: redis-cell 0.5's RateLimiter::rate_limit and its Redis store, line by line, in
// BigInt nanoseconds (redis-cell's i64 / time::Duration), only for inputs that do not overflow i64.
// ---------------------------------------------------------------------------------------------

const I64_MAX = 9223372036854775807n;
const NS_PER_S = 1_000_000_000n;

interface RefOutcome extends Outcome {
  limited: boolean;
  /** retry_after as a duration in ns (−1 s when it can never succeed); for drawing the next step. */
  retryNs: bigint;
}

/** Duration::whole_microseconds(): truncation toward zero. */
const wholeUs = (ns: bigint): bigint => ns / 1000n;

/** redis-cell's reply seconds: whole_seconds() + 1 if subsec_milliseconds() > 0. */
function refSeconds(ns: bigint): bigint {
  return ns / NS_PER_S + ((ns / 1_000_000n) % 1000n > 0n ? 1n : 0n);
}

/** `x as i64` for an f64: truncation, saturating at the i64 bounds, NaN → 0. */
function f64AsI64(x: number): bigint {
  if (Number.isNaN(x)) return 0n;
  if (x >= 2 ** 63) return I64_MAX;
  if (x <= -(2 ** 63)) return -I64_MAX - 1n;
  return BigInt(Math.trunc(x));
}

class RefKey {
  tat: bigint | null = null;
  expireAtMs = 0n;

  call(burst: bigint, count: bigint, period: bigint, quantity: bigint, nowUs: bigint): RefOutcome {
    const now = nowUs * 1000n;
    const nowMs = nowUs / 1000n;
    // Redis 7 lazy expiry: the key is gone once now_ms > expire_at.
    if (this.tat !== null && nowMs > this.expireAtMs) this.tat = null;

    // Rate::per_period: Duration::nanoseconds(((ns as f64) / (n as f64)) as i64)
    const T = BigInt(Math.trunc(Number(period * NS_PER_S) / Number(count)));
    if (T === 0n) throw new Error('Zero rates are not supported');
    const tau = T * (burst + 1n); // delay_variation_tolerance
    const limit = burst + 1n;
    const increment = T * quantity;

    const tatVal = this.tat;
    const tat = tatVal ?? now;
    const newTat = now > tat ? now + increment : tat + increment;
    const allowAt = newTat - tau;
    const diff = now - allowAt;
    let limited: boolean;
    let ttl: bigint;
    let retry = -NS_PER_S;
    if (diff < 0n) {
      if (increment <= tau) retry = -diff;
      limited = true;
      ttl = tat - now;
    } else {
      ttl = newTat - now;
      // set_if_not_exists_with_ttl / compare_and_swap_with_ttl: write, then set_expire(ttl), which
      // the Redis module API adds (as whole ms, truncated) to the millisecond clock.
      this.tat = newTat;
      this.expireAtMs = nowMs + ttl / 1_000_000n;
      limited = false;
    }
    let remaining = 0n;
    const next = tau - ttl;
    if (next > -T) remaining = f64AsI64(Number(wholeUs(next)) / Number(wholeUs(T)));
    const reply = [limited ? 1n : 0n, limit, remaining, refSeconds(retry), refSeconds(ttl)].map(Number);
    return {
      reply,
      pttl: this.tat === null ? -2 : Number(this.expireAtMs - nowMs),
      tatNs: this.tat,
      limited,
      retryNs: retry,
    };
  }
}

// ---------------------------------------------------------------------------------------------
// A seeded PRNG and the step generator the vectors README describes.
// ---------------------------------------------------------------------------------------------

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Rng {
  float(): number;
  int(lo: number, hi: number): number;
  pick<T>(xs: readonly T[]): T;
}

function rng(seed: number): Rng {
  const next = mulberry32(seed);
  return {
    float: next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: (xs) => xs[Math.floor(next() * xs.length)],
  };
}

/** The next advance in µs, drawn from the previous step as the recorded timelines were. */
function drawAdvanceUs(r: Rng, intervalNs: number, periodS: number, count: number, prev: RefOutcome | null): number {
  const u = r.float();
  if (u < 0.33) return 0; // a burst
  if (u < 0.5) {
    // a multiple of the emission interval, rounded down or up to the µs
    const ns = intervalNs * r.int(1, 3);
    return r.float() < 0.5 ? Math.floor(ns / 1000) : Math.ceil(ns / 1000);
  }
  if (u < 0.62 && prev !== null && prev.pttl >= 0) {
    // around the key's expiry: the previous PTTL ± up to 1.5 ms
    return Math.max(0, prev.pttl * 1000 + r.int(-1500, 1500));
  }
  if (u < 0.74 && prev !== null && prev.retryNs > 0n) {
    // around retry_after: exactly, or 1 ms / 1 µs before or after
    const us = Number((prev.retryNs + 999n) / 1000n);
    return Math.max(0, us + r.pick([0, 0, -1000, 1000, -1, 1]));
  }
  if (u < 0.78) return r.int(0, Math.min(periodS * 3_000_000, 4 * 86400 * 1e6)); // a long idle gap
  // uniform in 0 … 2·period/count, whole ms or with µs
  const maxUs = Math.max(1, Math.floor((2 * periodS * 1e6) / count));
  const us = r.int(0, maxUs);
  return r.float() < 0.5 ? us - (us % 1000) : us;
}

function drawQuantity(r: Rng, burst: number): number {
  const u = r.float();
  if (u < 0.5) return 1;
  if (u < 0.65) return 0;
  return r.float() < 0.5 ? r.int(0, burst + 3) : r.int(0, 30);
}

interface Mismatch { params: number[]; step: number; nowUs: number; quantity: number; expected: unknown; actual: unknown }

/** Runs one random timeline through both implementations; returns the first disagreement. */
function compareTimeline(burst: number, count: number, period: number, steps: number, seed: number): Mismatch | null {
  const r = rng(seed);
  const p = params(burst, count, period);
  const mine = new CellKey();
  const ref = new RefKey();
  const intervalNs = p.intervalUs * 1000 + p.intervalNs;
  let nowUs = EPOCH_US + r.int(0, 3_600_000_000);
  if (r.float() < 0.5) nowUs -= nowUs % 1000;
  let prev: RefOutcome | null = null;
  for (let i = 0; i < steps; i++) {
    if (i > 0) nowUs += drawAdvanceUs(r, intervalNs, period, count, prev);
    const quantity = drawQuantity(r, burst);
    const expected = ref.call(BigInt(burst), BigInt(count), BigInt(period), BigInt(quantity), BigInt(nowUs));
    const actual = mine.call(p, quantity, nowUs);
    const want = { reply: expected.reply, pttl: expected.pttl, tatNs: expected.tatNs };
    if (JSON.stringify(actual, bigintJson) !== JSON.stringify(want, bigintJson)) {
      return { params: [burst, count, period], step: i, nowUs, quantity, expected: want, actual };
    }
    prev = expected;
  }
  return null;
}

function bigintJson(_k: string, v: unknown): unknown {
  return typeof v === 'bigint' ? v.toString() : v;
}

// ---------------------------------------------------------------------------------------------

describe('CL.THROTTLE: redis-cell\'s own unit test (src/cell/mod.rs, it_rate_limits)', () => {
  // limit 5 (max_burst 4), 1 per second. Durations in ms as redis-cell's table states them; the
  // reply shows them in seconds with redis-cell's rounding (+1 only when a whole ms is left over).
  // (case, at ms, volume, remaining, reset_after ms, retry_after ms, limited)
  const cases: [number, number, number, number, number, number, boolean][] = [
    // You can never make a request larger than the maximum.
    [0, 0, 6, 5, 0, -1000, true],
    // Rate limit normal requests appropriately.
    [1, 0, 1, 4, 1000, -1000, false],
    [2, 0, 1, 3, 2000, -1000, false],
    [3, 0, 1, 2, 3000, -1000, false],
    [4, 0, 1, 1, 4000, -1000, false],
    [5, 0, 1, 0, 5000, -1000, false],
    [6, 0, 1, 0, 5000, 1000, true],
    [7, 3000, 1, 2, 3000, -1000, false],
    [8, 3100, 1, 1, 3900, -1000, false],
    [9, 4000, 1, 1, 4000, -1000, false],
    [10, 8000, 1, 4, 1000, -1000, false],
    [11, 9500, 1, 4, 1000, -1000, false],
    // Zero-volume request just peeks at the state.
    [12, 9500, 0, 4, 1000, -1000, false],
    // High-volume request uses up more of the limit.
    [13, 9500, 2, 2, 3000, -1000, false],
    // Large requests cannot exceed limits.
    [14, 9500, 5, 2, 3000, 3000, true],
  ];
  const secs = (ms: number) => Math.trunc(ms / 1000) + (ms % 1000 > 0 ? 1 : 0);

  for (const start of [EPOCH_US, EPOCH_US + 123_456]) {
    it(`matches every case (start ${start % 1_000_000} µs past the second)`, () => {
      const p = params(4, 1, 1);
      const key = new CellKey();
      for (const [n, atMs, volume, remaining, resetMs, retryMs, limited] of cases) {
        const nowUs = start + atMs * 1000;
        const out = key.call(p, volume, nowUs);
        expect(out.reply, `case ${n}`).toEqual([limited ? 1 : 0, 5, remaining, secs(retryMs), secs(resetMs)]);
        // An allowed call stores TAT = now + reset_after exactly.
        if (!limited) expect(out.tatNs, `case ${n} TAT`).toBe(BigInt(nowUs + resetMs * 1000) * 1000n);
      }
    });
  }
});

describe('CL.THROTTLE: Dragonfly\'s ClThrottle test timeline (src/server/string_family_test.cc)', () => {
  // Dragonfly's test expects reset/retry values one second higher whenever the duration is a whole
  // number of seconds (11, 21, … 51 for 10 … 50 s; 40 for 39 s; 1 for 4 µs): its rounding adds a
  // second where redis-cell's (+1 only if at least one whole ms is left over) does not. The expected
  // values here are redis-cell's. (Dragonfly's test clock starts on a whole millisecond.)
  it('limit 5, 1 per 10 s, with Dragonfly\'s time advances', () => {
    const p = params(4, 1, 10);
    const key = new CellKey();
    let nowUs = EPOCH_US;
    // [advance ms, quantity, redis-cell reply, Dragonfly's reply]
    const steps: [number, number, number[], number[]][] = [
      [0, 6, [1, 5, 5, -1, 0], [1, 5, 5, -1, 0]],
      [0, 1, [0, 5, 4, -1, 10], [0, 5, 4, -1, 11]],
      [0, 1, [0, 5, 3, -1, 20], [0, 5, 3, -1, 21]],
      [0, 1, [0, 5, 2, -1, 30], [0, 5, 2, -1, 31]],
      [0, 1, [0, 5, 1, -1, 40], [0, 5, 1, -1, 41]],
      [0, 1, [0, 5, 0, -1, 50], [0, 5, 0, -1, 51]],
      [0, 1, [1, 5, 0, 10, 50], [1, 5, 0, 11, 51]],
      [30000, 1, [0, 5, 2, -1, 30], [0, 5, 2, -1, 31]],
      [1000, 1, [0, 5, 1, -1, 39], [0, 5, 1, -1, 40]],
      [9000, 1, [0, 5, 1, -1, 40], [0, 5, 1, -1, 41]],
      // The key expires exactly now (TTL 40 s set 40 s ago) and is still visible (now == expiry);
      // its TAT equals now, so the bucket is full either way.
      [40000, 1, [0, 5, 4, -1, 10], [0, 5, 4, -1, 11]],
      [15000, 1, [0, 5, 4, -1, 10], [0, 5, 4, -1, 11]],
      // Zero-volume request just peeks at the state.
      [0, 0, [0, 5, 4, -1, 10], [0, 5, 4, -1, 11]],
      // High-volume request uses up more of the limit.
      [0, 2, [0, 5, 2, -1, 30], [0, 5, 2, -1, 31]],
      // Large requests cannot exceed limits.
      [0, 5, [1, 5, 2, 30, 30], [1, 5, 2, 31, 31]],
    ];
    for (const [i, [advanceMs, quantity, redisCell, dragonfly]] of steps.entries()) {
      nowUs += advanceMs * 1000;
      const out = key.call(p, quantity, nowUs);
      expect(out.reply, `step ${i}`).toEqual(redisCell);
      // Where the two differ, it is always by Dragonfly's extra second.
      const delta = dragonfly.map((v, j) => v - redisCell[j]);
      expect(delta.every((d) => d === 0 || d === 1), `step ${i}`).toBe(true);
    }
  });

  it('emission interval 2000 ns, cost 2: reset_after is 0 s (4 µs left, less than a whole ms)', () => {
    // Dragonfly expects [0, 5, 3, -1, 1]; redis-cell's rounding drops a sub-millisecond remainder.
    const p = params(4, 500_000, 1);
    expect([p.intervalUs, p.intervalNs]).toEqual([2, 0]);
    const out = new CellKey().call(p, 2, EPOCH_US);
    expect(out.reply).toEqual([0, 5, 3, -1, 0]);
    expect(out.pttl).toBe(0); // a 4 µs TTL is 0 whole ms: the key lives until the ms ends
  });

  it('zero rates: redis-cell (and Dragonfly) refuse them, including a T that truncates to 0 ns', () => {
    // count or period 0 never reach the limiter (the command refuses them), but it refuses them too.
    expect(cellParams(10, 1, 0)).toBe('out-of-range');
    expect(cellParams(10, 0, 1)).toBe('out-of-range');
    // 2·10⁹ per second: T = trunc(0.5 ns) = 0, which redis-cell answers with "Zero rates are not supported".
    expect(cellParams(0, 2_000_000_000, 1)).toBe('zero-interval');
    expect(cellParams(0, 2_000_000_000, 2)).toMatchObject({ intervalUs: 0, intervalNs: 1 });
  });
});

describe('CL.THROTTLE: parameters cellgate refuses where redis-cell overflows', () => {
  it('max_burst up to 2^53 − 2 (limit exact), period up to 9223372036 s (period in ns fits i64)', () => {
    expect(cellParams(MAX_BURST, 1_000_000_000, 1)).toMatchObject({ limit: Number.MAX_SAFE_INTEGER });
    expect(cellParams(MAX_BURST + 1, 1_000_000_000, 1)).toBe('out-of-range');
    expect(cellParams(0, 10_000_000_000, MAX_PERIOD_SEC)).toMatchObject({ intervalUs: 922_337, intervalNs: 203 });
    expect(cellParams(0, 10_000_000_000, MAX_PERIOD_SEC + 1)).toBe('out-of-range');
  });

  it('τ up to 100 years', () => {
    expect(cellParams(99, 1, 365 * 86400)).toMatchObject({ toleranceUs: MAX_TOLERANCE_US, toleranceNs: 0 });
    expect(cellParams(100, 1, 365 * 86400)).toBe('tolerance-overflow');
    expect(cellParams(9223372036854775807, 1, 1)).toBe('out-of-range');
  });

  it('τ = T·limit is exact when T·limit needs more than 53 bits of nanoseconds', () => {
    // T = 7 ns, limit 2·10^15 + 1: τ = 14000000000000007 ns, an odd number above 2^53.
    expect(cellParams(2_000_000_000_000_000, 142_857_142, 1)).toEqual({
      limit: 2_000_000_000_000_001, intervalUs: 0, intervalNs: 7, toleranceUs: 14_000_000_000_000, toleranceNs: 7,
    });
  });
});

describe('CL.THROTTLE: the reference model', () => {
  interface Step { at_us: number; quantity: number; reply: number[]; pttl: number }
  const timelines = readJsonl<{ params: [number, number, number]; steps: Step[] }>('cl-throttle-redis-cell.jsonl');

  it('reproduces every recorded redis-cell step (so it can judge cellgate where nothing was recorded)', () => {
    const bad: unknown[] = [];
    timelines.forEach((t, ti) => {
      const ref = new RefKey();
      const [b, c, per] = t.params.map(BigInt);
      t.steps.forEach((s, si) => {
        const out = ref.call(b, c, per, BigInt(s.quantity), BigInt(s.at_us));
        if (JSON.stringify([out.reply, out.pttl]) !== JSON.stringify([s.reply, s.pttl])) {
          bad.push({ timeline: ti, step: si, expected: [s.reply, s.pttl], got: [out.reply, out.pttl] });
        }
      });
    });
    expect(bad.slice(0, 5)).toEqual([]);
  });

  it('cellgate\'s pure limiter reproduces every recorded step too', () => {
    const bad: unknown[] = [];
    timelines.forEach((t, ti) => {
      const key = new CellKey();
      const p = params(...t.params);
      t.steps.forEach((s, si) => {
        const out = key.call(p, s.quantity, s.at_us);
        if (JSON.stringify([out.reply, out.pttl]) !== JSON.stringify([s.reply, s.pttl])) {
          bad.push({ timeline: ti, step: si, params: t.params, expected: [s.reply, s.pttl], got: [out.reply, out.pttl] });
        }
      });
    });
    expect(bad.slice(0, 5)).toEqual([]);
  });
});

describe('CL.THROTTLE: cellgate equals the reference over a dense grid', () => {
  // Every burst 0..20 × a spread of counts (1..100) × a spread of periods (1..3600 s), plus one
  // random count and period per burst; each combination runs a seeded random timeline of 20 steps.
  const COUNTS = [1, 2, 3, 7, 10, 13, 33, 60, 99, 100];
  const PERIODS = [1, 2, 3, 7, 10, 59, 60, 333, 1000, 3599, 3600];
  it('burst 0..20 × counts × periods, 20 random steps each', () => {
    const mismatches: Mismatch[] = [];
    let timelines = 0;
    for (let burst = 0; burst <= 20; burst++) {
      const r = rng(1000 + burst);
      const counts = [...COUNTS, r.int(1, 100)];
      const periods = [...PERIODS, r.int(1, 3600)];
      for (const count of counts) {
        for (const period of periods) {
          const m = compareTimeline(burst, count, period, 20, burst * 1_000_003 + count * 7919 + period);
          timelines++;
          if (m !== null) mismatches.push(m);
        }
      }
    }
    expect(timelines).toBe(21 * 11 * 12);
    expect(mismatches.slice(0, 5), `${mismatches.length} timelines disagree`).toEqual([]);
  });

  // CELL_SOAK=N runs N times as many random timelines (e.g. CELL_SOAK=200 for a long soak).
  const soak = Math.max(1, Number(process.env.CELL_SOAK ?? 1));
  it(`random parameters (quantity 0..30), 40 steps each${soak > 1 ? ` (soak ×${soak})` : ''}`, () => {
    const r = rng(42);
    const mismatches: Mismatch[] = [];
    for (let i = 0; i < 600 * soak; i++) {
      const m = compareTimeline(r.int(0, 20), r.int(1, 100), r.int(1, 3600), 40, 7_000_000 + i);
      if (m !== null) mismatches.push(m);
    }
    expect(mismatches.slice(0, 5), `${mismatches.length} timelines disagree`).toEqual([]);
  });

  it('beyond the grid: long periods, large bursts, sub-microsecond and odd-nanosecond intervals', () => {
    const combos: [number, number, number][] = [
      [0, 1, 604_800], [5, 7, 604_800], [30, 200, 86_400], [3, 13, 43_200], [1000, 1, 3600],
      [0, 3, 1], [2, 7, 1], [9, 999_999, 1], [100, 1_000_000, 1], [0, 1_000_001, 1],
      // T below 1 µs: remaining divides by whole_microseconds(T) = 0 (f64 inf/NaN → i64).
      [0, 2_000_000, 1], [5, 3_000_000, 1], [1, 999_999_999, 1], [10, 1_000_000_000, 1],
      // T with an odd ns part and a huge limit: T·limit and T·quantity need more than 53 bits of ns.
      [2_000_000_000_000_000, 142_857_142, 1], [3_000_000_000_000_000, 1_000_000_000, 1], [123_456_789_012, 3_000_001, 7],
      [1_000_000_000_000_001, 142_857_142, 2], [2_999_999_999_999_999, 333_333_333, 1],
    ];
    const mismatches: Mismatch[] = [];
    combos.forEach(([burst, count, period], i) => {
      for (let seed = 0; seed < 10; seed++) {
        const m = compareTimeline(burst, count, period, 30, 9_000_000 + i * 100 + seed);
        if (m !== null) mismatches.push(m);
      }
    });
    expect(mismatches.slice(0, 5), `${mismatches.length} timelines disagree`).toEqual([]);
  });

  it('quantity 0 writes: TAT = now with a 0 ms TTL on a fresh key; re-stores the TAT otherwise', () => {
    const p = params(9, 10, 10);
    const key = new CellKey();
    expect(key.call(p, 0, EPOCH_US + 500)).toEqual({ reply: [0, 10, 10, -1, 0], pttl: 0, tatNs: BigInt(EPOCH_US + 500) * 1000n });
    // Still there for the rest of this millisecond, gone in the next one.
    expect(key.call(p, 0, EPOCH_US + 999).pttl).toBe(0);
    key.call(p, 1, EPOCH_US + 999);
    expect(key.call(p, 0, EPOCH_US + 1999).reply).toEqual([0, 10, 9, -1, 1]);
  });

  it('quantity above the limit: limited, retry −1, nothing written', () => {
    const p = params(2, 1, 1);
    const key = new CellKey();
    expect(key.call(p, 4, EPOCH_US)).toEqual({ reply: [1, 3, 3, -1, 0], pttl: -2, tatNs: null });
    key.call(p, 1, EPOCH_US);
    expect(key.call(p, 4, EPOCH_US)).toEqual({ reply: [1, 3, 2, -1, 1], pttl: 1000, tatNs: BigInt(EPOCH_US + 1_000_000) * 1000n });
  });

  it('a sub-millisecond retry is reported as 0 s while limited', () => {
    // limit 1, 1 per second; 1 µs before the token is back: [1,1,0,0,0].
    const p = params(0, 1, 1);
    const key = new CellKey();
    key.call(p, 1, EPOCH_US);
    expect(key.call(p, 1, EPOCH_US + 999_999).reply).toEqual([1, 1, 0, 0, 0]);
    expect(key.call(p, 1, EPOCH_US + 1_000_000).reply).toEqual([0, 1, 0, -1, 1]);
  });
});

// ---------------------------------------------------------------------------------------------
// Redis 8.8 GCRA (src/gcra.c): µs arithmetic from the millisecond snapshot, true ceilings.
// ---------------------------------------------------------------------------------------------

class GcraKey {
  has = false;
  tatUs = 0;
  expireAtMs = 0;
  private readonly d = newDecision();

  call(p: GcraParams, nowUs: number): { reply: number[]; pttl: number } {
    const nowMs = Math.floor(nowUs / 1000);
    if (this.has && nowMs > this.expireAtMs) this.has = false;
    const d = this.d;
    gcraDecide(p, this.has, this.tatUs, nowUs, d);
    if (d.write) {
      this.has = true;
      this.tatUs = d.a;
      this.expireAtMs = d.expireAtMs;
    }
    return {
      reply: [d.limited ? 1 : 0, d.limit, d.remaining, d.retryAfter, d.resetAfter],
      pttl: this.has ? this.expireAtMs - nowMs : -2,
    };
  }
}

/** The shared BigInt transcription of gcra.c (no overflow in these ranges), as replies and PTTL. */
class RefGcraKey extends GcraReferenceKey {
  callReply(burst: bigint, tokensPerPeriod: bigint, period: number, tokens: bigint, nowUs: bigint): { reply: number[]; pttl: number } {
    const r = this.call(burst, tokensPerPeriod, period, tokens, nowUs);
    if (typeof r === 'string') throw new Error(r);
    return { reply: [r.limited, Number(r.limit), Number(r.remaining), r.retryAfterSec, r.resetAfterSec], pttl: this.pttl(nowUs) };
  }
}

function gparams(burst: number | bigint, tokensPerPeriod: number, period: number, tokens: number | bigint = 1): GcraParams {
  const p = gcraParams(burst, tokensPerPeriod, period, tokens);
  if (typeof p !== 'object') throw new Error(p);
  return p;
}

describe('GCRA (Redis 8.8): hand-checked cases', () => {
  const T0 = EPOCH_US; // a whole second

  it('emission interval: (long long)(period·1e6 / tokens + 0.5), at least 1 µs; variance = E·(burst+1)', () => {
    expect(gparams(1, 2, 3)).toEqual({ limit: 2, emissionUs: 1_500_000, varianceUs: 3_000_000, incrementUs: 1_500_000, wide: null });
    expect(gparams(0, 3, 1).emissionUs).toBe(333_333); // 333333.33 + 0.5 → 333333
    expect(gparams(0, 3, 2).emissionUs).toBe(666_667); // 666666.67 + 0.5 → 666667
    expect(gparams(0, 3_000_000, 1).emissionUs).toBe(1); // 0.33 + 0.5 → 0 → at least 1
    expect(gparams(4, 10, 0.5, 3)).toEqual({ limit: 5, emissionUs: 50_000, varianceUs: 250_000, incrementUs: 150_000, wide: null });
  });

  it('overflow checks name TOKENS or max_burst as Redis does', () => {
    expect(gcraParams(9223372036854775806n, 1, 999999999999, 1)).toBe('burst-overflow');
    expect(gcraParams(0, 1, 999999999999, 9223372036854775807n)).toBe('tokens-overflow');
    // E·n exactly 2^63 − 1 passes (2^63 − 1 = 7²·73·127·337 · 92737·649657): E = 153092023 µs.
    expect(gparams(0, 1, 153.092023, 92737 * 649657).wide).toEqual({ limit: 1n, emissionUs: 153092023n, varianceUs: 153092023n, incrementUs: 2n ** 63n - 1n });
    expect(gcraParams(0, 1, 153.092023, 92737 * 649657 + 1)).toBe('tokens-overflow');
  });

  it('burst 1, 2 per 3 s: two allowed, the third limited until the next 1.5 s', () => {
    const p = gparams(1, 2, 3);
    const key = new GcraKey();
    // E = 1.5 s, variance 3 s. First: TAT now + 1.5 s, remaining (3 − 1.5)/1.5 = 1, reset ⌈1.5⌉ = 2.
    expect(key.call(p, T0)).toEqual({ reply: [0, 2, 1, -1, 2], pttl: 1500 });
    expect(key.call(p, T0)).toEqual({ reply: [0, 2, 0, -1, 3], pttl: 3000 });
    // Limited: allow_at = now + 1.5 s → retry ⌈1.5⌉ = 2; ttl stays 3 s.
    expect(key.call(p, T0)).toEqual({ reply: [1, 2, 0, 2, 3], pttl: 3000 });
    // 1.499 s later, 1 ms too early: limited; retry = ⌈0.001 s⌉ = 1 (a true ceiling, where redis-cell
    // would also say 1 since a whole ms is left), reset = ⌈1.501 s⌉ = 2.
    expect(key.call(p, T0 + 1_499_000)).toEqual({ reply: [1, 2, 0, 1, 2], pttl: 1501 });
    // Exactly 1.5 s later: diff = 0 → allowed.
    expect(key.call(p, T0 + 1_500_000)).toEqual({ reply: [0, 2, 0, -1, 3], pttl: 3000 });
  });

  it('uses the millisecond snapshot: the sub-millisecond part of now is ignored', () => {
    const p = gparams(0, 1, 1);
    const a = new GcraKey();
    const b = new GcraKey();
    expect(a.call(p, T0 + 7_000)).toEqual(b.call(p, T0 + 7_999));
    expect(a.call(p, T0 + 1_007_000)).toEqual({ reply: [0, 1, 0, -1, 1], pttl: 1000 });
    expect(b.call(p, T0 + 1_006_999)).toEqual({ reply: [1, 1, 0, 1, 1], pttl: 1 });
  });

  it('TOKENS above the limit on a fresh key: limited, retry −1, remaining = limit, nothing written', () => {
    const key = new GcraKey();
    expect(key.call(gparams(9, 10, 10, 11), T0)).toEqual({ reply: [1, 10, 10, -1, 0], pttl: -2 });
  });

  it('TOKENS n: the increment is E·n; a later single token sees the debt', () => {
    const key = new GcraKey();
    // burst 1, 2 per 3 s, TOKENS 2: new TAT now + 3 s, remaining 0, reset 3 (recorded: tokens_lowercase).
    expect(key.call(gparams(1, 2, 3, 2), T0)).toEqual({ reply: [0, 2, 0, -1, 3], pttl: 3000 });
    expect(key.call(gparams(1, 2, 3, 1), T0 + 1_000_000)).toEqual({ reply: [1, 2, 0, 1, 2], pttl: 2000 });
  });

  it('expiry: the key expires at floor(TAT/1000) and stays visible while now_ms ≤ expiry', () => {
    // E = 333333 µs; TAT = now + 333333 µs → expiry at now_ms + 333.
    const p = gparams(0, 3, 1);
    const key = new GcraKey();
    expect(key.call(p, T0).pttl).toBe(333);
    // At now_ms = expiry the key is still there (PTTL 0); its TAT (0.333 ms ahead) makes this call wait.
    expect(key.call(p, T0 + 333_000)).toEqual({ reply: [1, 1, 0, 1, 1], pttl: 0 });
    // One ms later it is gone: a fresh bucket.
    expect(key.call(p, T0 + 334_000)).toEqual({ reply: [0, 1, 0, -1, 1], pttl: 333 });
  });

  it('period with decimals (5e-1 s): E = 250 ms with burst 1 and 2 per period', () => {
    const key = new GcraKey();
    expect(key.call(gparams(1, 2, 0.5), T0)).toEqual({ reply: [0, 2, 1, -1, 1], pttl: 250 });
  });

  it('equals a BigInt transcription of gcra.c over random timelines (burst 0..20, 1..100 per period, TOKENS 1..30)', () => {
    const PERIODS = [1, 2, 3, 0.5, 0.001, 2.25, 12.345, 60, 3600, 86400];
    const r = rng(8_800);
    const mismatches: unknown[] = [];
    for (let t = 0; t < 1500; t++) {
      const burst = r.int(0, 20);
      const perPeriod = r.pick([1, 2, 3, 7, 10, 13, 100, r.int(1, 100)]);
      const period = r.pick(PERIODS);
      const mine = new GcraKey();
      const ref = new RefGcraKey();
      let nowUs = EPOCH_US + r.int(0, 3_600_000_000);
      const emissionUs = Math.max(1, Math.trunc((period * 1e6) / perPeriod + 0.5));
      let prevPttl = -2;
      for (let i = 0; i < 25; i++) {
        const u = r.float();
        if (i > 0 && u > 0.33) {
          nowUs += u < 0.5 ? emissionUs * r.int(1, 3) + r.int(-1, 1)
            : u < 0.65 && prevPttl >= 0 ? Math.max(0, prevPttl * 1000 + r.int(-1500, 1500))
            : u < 0.7 ? r.int(0, Math.ceil(period * 3e6))
            : r.int(0, 2 * emissionUs);
        }
        const tokens = r.float() < 0.5 ? 1 : r.int(1, r.float() < 0.5 ? burst + 3 : 30);
        const actual = mine.call(gparams(burst, perPeriod, period, tokens), nowUs);
        const expected = ref.callReply(BigInt(burst), BigInt(perPeriod), period, BigInt(tokens), BigInt(nowUs));
        if (JSON.stringify(actual) !== JSON.stringify(expected)) {
          mismatches.push({ params: [burst, perPeriod, period], step: i, tokens, nowUs, expected, actual });
          break;
        }
        prevPttl = expected.pttl;
      }
    }
    expect(mismatches.slice(0, 5), `${mismatches.length} timelines disagree`).toEqual([]);
  });

  it('replays every recorded GCRA step', () => {
    interface Step { at_us: number; tokens: number | null; reply: number[]; pttl: number }
    const timelines = readJsonl<{ params: [number, number, string]; steps: Step[] }>('gcra-redis.jsonl');
    const bad: unknown[] = [];
    timelines.forEach((t, ti) => {
      const key = new GcraKey();
      t.steps.forEach((s, si) => {
        const out = key.call(gparams(t.params[0], t.params[1], Number(t.params[2]), s.tokens ?? 1), s.at_us);
        if (JSON.stringify(out) !== JSON.stringify({ reply: s.reply, pttl: s.pttl })) bad.push({ timeline: ti, step: si, expected: s, got: out });
      });
    });
    expect(bad.slice(0, 5)).toEqual([]);
  });
});
