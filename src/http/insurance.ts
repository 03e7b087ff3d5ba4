/**
 * The insurance limiter (`onUnavailable: 'insurance'`): decides in this process while cellgate
 * cannot, with the request's own policies, so an outage neither opens the gate ('allow') nor closes
 * it ('deny'). rate-limiter-flexible's insuranceLimiter is the idea; its memory limiter is not used
 * because it keeps one timer per key and has no bound on keys, and this one must have both a bound
 * and cellgate's reply shape.
 *
 * What it is, and what it is not (docs/middleware.md, "Insurance"):
 * - Every policy is decided as GCRA (cellgate's default algorithm) with the policy's limit, period
 *   and capacity: exact for a `gcra` policy; for the others the same long-run rate and the same
 *   largest burst, spread smoothly (a fixed window's whole quota is not available at a window's
 *   start as it is in cellgate).
 * - Each process enforces the whole limit alone: N replicas let up to N times the limit through
 *   while cellgate is away.
 * - At most `maxKeys` keys (one per key and policy): when full, keys already back to fresh go first,
 *   then the least recently used, which thereby gets a fresh budget. A flood of new keys can therefore
 *   give an evicted client its budget back; it cannot grow the process.
 * - It starts empty at each outage, and forgets everything once cellgate answers again (cellgate
 *   holds the real state; what was spent meanwhile is not sent to it).
 *
 * Times come from a monotonic clock (performance.now()): a wall-clock step never refills or empties it.
 */
import { performance } from 'node:perf_hooks';
import { CellgateArgumentError, type Decision } from '../client/index.js';
import { describe, type ResolvedPolicy } from './policies.js';

/** How many keys an insurance limiter keeps by default (about 100 bytes each). */
export const INSURANCE_MAX_KEYS = 10_000;

/** Entries looked at, from the least recently used, for ones back to fresh before one is evicted. */
const SWEEP = 32;

export class InsuranceLimiter {
  /** Key → theoretical arrival time (ms, monotonic): the key is fresh once it is not after now. */
  private readonly tat = new Map<string, number>();
  private readonly maxKeys: number;
  private readonly now: () => number;

  constructor(maxKeys = INSURANCE_MAX_KEYS, now: () => number = () => performance.now()) {
    this.maxKeys = maxKeys;
    this.now = now;
  }

  /** Keys held now. */
  get size(): number {
    return this.tat.size;
  }

  /**
   * Decides `cost` units on every policy's key (`tagged` + the policy's name) together, as RL.ALL
   * does: spent on all when all allow, on none otherwise. One decision per policy, in order, with
   * cellgate's fields (milliseconds; `limit` is the capacity).
   */
  decide(tagged: string, policies: readonly ResolvedPolicy[], cost: number): { limited: boolean; results: Decision[] } {
    const now = this.now();
    const results: Decision[] = [];
    const next: number[] = [];
    let limited = false;
    for (const p of policies) {
      const intervalMs = p.periodMs / p.limit;
      const toleranceMs = intervalMs * p.capacity;
      const start = Math.max(this.tat.get(tagged + p.name) ?? now, now);
      const after = start + cost * intervalMs;
      // A small epsilon: float intervals (1000 / 3) must not refuse the last unit of a full burst.
      const fits = cost <= p.capacity && after - toleranceMs <= now + 1e-6;
      if (!fits) limited = true;
      next.push(after);
      results.push({
        limited: !fits,
        limit: p.capacity,
        remaining: Math.max(0, Math.floor((now + toleranceMs - (fits ? after : start)) / intervalMs + 1e-9)),
        retryAfterMs: fits || cost > p.capacity ? -1 : Math.ceil(after - toleranceMs - now),
        resetAfterMs: Math.max(0, Math.ceil((fits ? after : start) - now)),
        delayMs: 0,
      });
    }
    if (limited) {
      // Nothing was spent: a policy that would have allowed shows what it holds now.
      for (let i = 0; i < policies.length; i++) {
        if (results[i].limited) continue;
        const p = policies[i];
        const intervalMs = p.periodMs / p.limit;
        const start = Math.max(this.tat.get(tagged + p.name) ?? now, now);
        results[i].remaining = Math.max(0, Math.floor((now + intervalMs * p.capacity - start) / intervalMs + 1e-9));
        results[i].resetAfterMs = Math.max(0, Math.ceil(start - now));
      }
      return { limited, results };
    }
    if (cost > 0) for (let i = 0; i < policies.length; i++) this.store(tagged + policies[i].name, next[i], now);
    return { limited, results };
  }

  /** Gives `units` back on each policy's key (never fresher than fresh), as cellgate's REFUND does. */
  refund(tagged: string, policies: readonly ResolvedPolicy[], units: number): void {
    const now = this.now();
    for (const p of policies) {
      const key = tagged + p.name;
      const tat = this.tat.get(key);
      if (tat === undefined) continue;
      const back = tat - units * (p.periodMs / p.limit);
      if (back <= now) this.tat.delete(key);
      else this.tat.set(key, back);
    }
  }

  /** Forgets every key: cellgate answers again. */
  clear(): void {
    this.tat.clear();
  }

  /** Sets a key's time as its most recent use, making room first when the limiter is full. */
  private store(key: string, tat: number, now: number): void {
    // Deleting first moves the key to the end of the Map's order: the order is least recently used first.
    if (!this.tat.delete(key) && this.tat.size >= this.maxKeys) this.makeRoom(now);
    this.tat.set(key, tat);
  }

  private makeRoom(now: number): void {
    let looked = 0;
    for (const [key, tat] of this.tat) {
      if (looked++ >= SWEEP) break;
      if (tat <= now) this.tat.delete(key);
    }
    if (this.tat.size < this.maxKeys) return;
    // None of the oldest is fresh: the least recently used goes (and gets a fresh budget).
    const oldest = this.tat.keys().next();
    if (oldest.done !== true) this.tat.delete(oldest.value);
  }
}

/** The `insurance` option's `maxKeys`, checked (INSURANCE_MAX_KEYS when absent). */
export function insuranceMaxKeys(options: unknown): number {
  if (options === undefined) return INSURANCE_MAX_KEYS;
  if (options === null || typeof options !== 'object') throw new CellgateArgumentError('insurance', `insurance must be an object ({ maxKeys }), not ${describe(options)}`);
  for (const name of Object.keys(options)) if (name !== 'maxKeys') throw new CellgateArgumentError('insurance', `unknown insurance option '${name}' (the options: maxKeys)`);
  const maxKeys = (options as { maxKeys?: unknown }).maxKeys ?? INSURANCE_MAX_KEYS;
  if (typeof maxKeys !== 'number' || !Number.isSafeInteger(maxKeys) || maxKeys < 1) throw new CellgateArgumentError('insurance', `insurance.maxKeys must be an integer >= 1, not ${describe(maxKeys)}`);
  return maxKeys;
}
