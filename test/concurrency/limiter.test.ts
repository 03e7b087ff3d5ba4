/**
 * The lease decisions (src/limiters/concurrency.ts) against a plain model (a map of id → end) over
 * long random runs of ACQUIRE, RELEASE and RENEW with ids of every length and random times: the same
 * grants, the same reply fields, the same live leases, a stored state the loaders accept after every
 * step, and a blob that never holds more than a few times its leases.
 */
import { describe, expect, it } from 'vitest';
import { findLease, leaseAcquire, leaseRelease, leaseStateProblem, newLeaseDecision, MAX_BLOB_WORDS } from '../../src/limiters/concurrency.js';
import { mulberry32, seedOf } from '../helpers/random.js';

describe('lease decisions against a model', () => {
  it('agree over random runs, and every stored state is valid', () => {
    const rand = mulberry32(seedOf('concurrency-model'));
    const ids = Array.from({ length: 40 }, (_, i) => Buffer.from(`${i}-`.padEnd(1 + Math.floor(rand() * 64), String.fromCharCode(97 + (i % 26))).slice(0, 64)));
    for (let run = 0; run < 30; run++) {
      const model = new Map<number, number>();
      const d = newLeaseDecision();
      let has = false;
      let count = 0;
      let used = 0;
      let blob: Float64Array | undefined;
      let expireAtMs = 0;
      let now = 1000;
      for (let step = 0; step < 400; step++) {
        now += Math.floor(rand() * 30);
        // The key expires after its last lease's end (the keyspace keeps it through that instant).
        if (has && now > expireAtMs) has = false;
        for (const [k, end] of model) if (end <= now) model.delete(k);
        const who = Math.floor(rand() * ids.length);
        const id = ids[who];
        const op = rand();
        const limit = 1 + Math.floor(rand() * 6);
        const lease = 1 + Math.floor(rand() * 100);
        if (op < 0.5) {
          leaseAcquire(limit, lease, has, count, used, blob, id, 0, id.length, now, d);
          const renews = model.has(who);
          const grant = renews || model.size < limit;
          expect(d.limited).toBe(!grant);
          if (grant) {
            model.set(who, now + lease);
            expect(d.remaining).toBe(Math.max(0, limit - model.size));
            expect(d.retryAfterMs).toBe(-1);
          } else {
            expect(d.retryAfterMs).toBe(Math.min(...model.values()) - now);
          }
          expect(d.resetAfterMs).toBe(Math.max(...model.values()) - now);
        } else {
          const renew = op < 0.75 ? lease : -1;
          leaseRelease(renew, has, count, used, blob, id, 0, id.length, now, d);
          expect(d.found).toBe(model.has(who));
          if (model.has(who)) {
            if (renew >= 0) model.set(who, now + renew);
            else model.delete(who);
          }
        }
        if (d.write) {
          count = d.count;
          used = d.used;
          blob = d.blob;
          has = count > 0;
          if (has) expireAtMs = d.expireAtMs;
        }
        if (has) {
          expect(leaseStateProblem(expireAtMs, count, used, 0, blob)).toBe(null);
          // Leases stored = live ones plus ended ones a call has not dropped yet.
          let live = 0;
          for (const [k] of model) if (findLease(blob!, used, ids[k], 0, ids[k].length) !== -1) live++;
          expect(live).toBe(model.size);
          expect(blob!.length).toBeLessThanOrEqual(Math.max(16, 4 * used + 64));
        } else {
          expect(model.size).toBe(0);
        }
      }
    }
    expect(MAX_BLOB_WORDS).toBe(140_000);
  });
});
