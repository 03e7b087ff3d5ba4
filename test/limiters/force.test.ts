/**
 * Forced charges (`COST n FORCE`) in the pure limiters, on random timelines of forced and ordinary
 * calls (costs from 0 to 2^53 − 1, steps from 0 to beyond a period):
 * - every state a forced charge stores passes the algorithm's own stored-state check (what a snapshot
 *   or journal load accepts), however large the charge;
 * - the sliding log, which keeps only the newest `limit` units of a log driven past its limit, decides
 *   every call (limited, remaining, retry_after) exactly as an unbounded log of every charge would;
 * - the token bucket's debt is exact: it matches an unbounded deficit (BigInt) while below the cap.
 */
import { describe, expect, it } from 'vitest';
import type { Algorithm, LimitParams } from '../../src/limiters/algorithm.ts';
import { newDecision } from '../../src/limiters/decision.ts';
import { newGcraMsParams } from '../../src/limiters/gcra-ms.ts';
import { MAX_SCALED } from '../../src/limiters/rate-decision.ts';
import { ALGORITHMS } from '../../src/limiters/registry.ts';
import { mulberry32 } from '../helpers/random.ts';

type Rand = () => number;
const int = (r: Rand, min: number, max: number) => min + Math.floor(r() * (max - min + 1));

/** One key over an algorithm entry, with the keyspace's expiry rule (gone once now > expireAtMs). */
class Key {
  has = false;
  a = 0;
  b = 0;
  c = 0;
  blob: Float64Array | undefined;
  exp = 0;
  readonly d = newDecision();
  constructor(readonly algo: Algorithm, readonly p: LimitParams) {}

  call(cost: number, force: boolean, nowMs: number): void {
    if (this.has && nowMs > this.exp) {
      this.has = false;
      this.blob = undefined;
    }
    this.p.force = force;
    const { algo, p, d } = this;
    algo.decide(p, cost, this.has, this.a, this.b, this.c, this.blob, nowMs, nowMs * 1000, d);
    if (!d.write) return;
    if (algo.hasBlob) {
      algo.commit(p, cost, this.has, this.a, this.b, this.c, this.blob, nowMs, nowMs * 1000, d);
      this.blob = d.blob;
    }
    this.has = true;
    this.a = d.a;
    this.b = d.b;
    this.c = d.c;
    this.exp = d.expireAtMs;
  }
}

function params(algo: Algorithm, limit: number, periodMs: number): LimitParams {
  const p: LimitParams = { limit, periodMs, burst: limit, gcra: newGcraMsParams(), force: false };
  if (algo.checkParams(limit, periodMs, limit, p.gcra) !== 0) throw new Error('bad parameters');
  return p;
}

function costOf(r: Rand, limit: number): number {
  const u = r();
  if (u < 0.1) return 0;
  if (u < 0.5) return int(r, 1, 3);
  if (u < 0.8) return int(r, 1, 2 * limit);
  if (u < 0.9) return 10_000 * limit;
  return Number.MAX_SAFE_INTEGER;
}

describe('forced charges in the pure limiters', () => {
  for (const algo of ALGORITHMS) {
    it(`${algo.name}: every stored state passes the stored-state check`, () => {
      const r = mulberry32(17 + algo.type);
      for (let run = 0; run < 300; run++) {
        const limit = int(r, 1, 50);
        const periodMs = int(r, 1, 5000);
        const key = new Key(algo, params(algo, limit, periodMs));
        let now = 1_800_000_000_000 + int(r, 0, 10_000);
        for (let step = 0; step < 40; step++) {
          now += r() < 0.3 ? 0 : int(r, 0, 2 * periodMs);
          key.call(costOf(r, limit), r() < 0.5, now);
          if (key.has) expect(algo.stateProblem(key.exp, key.a, key.b, key.c, key.blob), `${algo.name} run ${run} step ${step}`).toBeNull();
        }
      }
    });
  }

  it('SLIDINGLOG: a log past its limit decides as the unbounded log of every charge', () => {
    const algo = ALGORITHMS.find((a) => a.name === 'SLIDINGLOG')!;
    const r = mulberry32(99);
    for (let run = 0; run < 400; run++) {
      const limit = int(r, 1, 12);
      const periodMs = int(r, 1, 200);
      const key = new Key(algo, params(algo, limit, periodMs));
      // The reference: every accepted or forced charge, never trimmed.
      const log: { ms: number; units: number }[] = [];
      let now = 1_800_000_000_000;
      for (let step = 0; step < 60; step++) {
        now += r() < 0.3 ? 0 : int(r, 0, periodMs);
        const cost = r() < 0.1 ? 0 : r() < 0.7 ? int(r, 1, limit) : int(r, 1, 3 * limit);
        const force = r() < 0.4;
        const atMs = Math.max(now, ...log.map((e) => e.ms));
        const liveAt = (t: number) => log.filter((e) => e.ms > t - periodMs).reduce((s, e) => s + e.units, 0);
        /** The first instant ≥ atMs at which `c` units fit, given the log (entries slide out at ms + period). */
        const fitsAt = (c: number): number => {
          for (const t of [atMs, ...log.map((e) => e.ms + periodMs).filter((t) => t > atMs).sort((x, y) => x - y)]) if (liveAt(t) + c <= limit) return t;
          return Infinity;
        };
        const live = liveAt(atMs);
        key.call(cost, force, now);
        const d = key.d;
        const where = `run ${run} step ${step}: limit ${limit} period ${periodMs} cost ${cost}${force ? ' FORCE' : ''} at +${now - 1_800_000_000_000}`;
        if (cost === 0) {
          expect([d.limited, d.remaining], where).toEqual([false, Math.max(0, limit - live)]);
          continue;
        }
        const fits = live + cost <= limit;
        expect(d.limited, where).toBe(!fits);
        if (fits || force) log.push({ ms: atMs, units: cost });
        if (fits) expect(d.remaining, where).toBe(limit - live - cost);
        else if (force) expect(d.retryAfter, where).toBe(fitsAt(1) - now);
        else expect(d.retryAfter, where).toBe(cost > limit ? -1 : fitsAt(cost) - now);
      }
    }
  });

  it('TOKENBUCKET: the debt is the exact deficit below the cap', () => {
    const algo = ALGORITHMS.find((a) => a.name === 'TOKENBUCKET')!;
    const r = mulberry32(7);
    for (let run = 0; run < 300; run++) {
      const limit = int(r, 1, 1000);
      const periodMs = int(r, 1, 60_000);
      const key = new Key(algo, params(algo, limit, periodMs));
      const capacity = BigInt(limit * periodMs);
      let deficit = 0n;
      let last = 1_800_000_000_000;
      let now = last;
      for (let step = 0; step < 30; step++) {
        now += r() < 0.3 ? 0 : int(r, 0, 2 * periodMs);
        deficit -= BigInt(now - last) * BigInt(limit);
        if (deficit < 0n) deficit = 0n;
        last = now;
        const cost = int(r, 1, 3 * limit);
        const force = r() < 0.5;
        key.call(cost, force, now);
        const needed = deficit + BigInt(cost) * BigInt(periodMs);
        if (needed <= capacity || force) deficit = needed < BigInt(MAX_SCALED) ? needed : BigInt(MAX_SCALED);
        expect(key.d.limited, `run ${run} step ${step}`).toBe(needed > capacity);
        if (needed > capacity && force) {
          // One unit fits again when the deficit has drained to capacity − one unit.
          const wait = (deficit + BigInt(periodMs) - capacity + BigInt(limit) - 1n) / BigInt(limit);
          expect(BigInt(key.d.retryAfter), `run ${run} step ${step}`).toBe(wait);
        }
        if (key.d.write) expect(BigInt(key.b), `run ${run} step ${step}`).toBe(deficit);
      }
    }
  });
});
