/**
 * Refusals the backend gave, remembered until they can stop being true (docs/backend.md).
 *
 * A refusal says "this key, with these parameters, cannot afford this cost before T". Other sidecars
 * can only spend more, so until T the same call, or one with a larger cost, is refused again: the
 * cache answers it without a backend call. Nothing else is ever answered from here — an allowed call
 * always goes to the backend.
 *
 * What can make a refusal false before T is a reset of the key: DEL/UNLINK/FLUSHDB through any
 * sidecar. Each sidecar drops its own entries at once and publishes an invalidation on the backend;
 * the others drop theirs on receipt. While the invalidations cannot be received (the subscriber is
 * disconnected) nothing is cached, and a call whose reply raced an invalidation (the `epoch` moved
 * while it was in flight) is not cached either.
 */

interface Refusal {
  /** The smallest cost refused. */
  cost: number;
  /** Local clock (µs) until which the refusal certainly holds. */
  untilUs: number;
  /** When it was decided (local clock, µs): the counters of a cached reply count down from here. */
  atUs: number;
  /** The reply as the backend gave it. */
  values: number[];
}

/** Beyond this many entries the cache starts over (a flood of distinct refused keys costs memory, not correctness). */
export const REFUSAL_CACHE_MAX_ENTRIES = 100_000;

export class RefusalCache {
  /** By key (its bytes as latin1, one char per byte), then by the call's parameters. */
  private readonly entries = new Map<string, Map<string, Refusal>>();
  private count = 0;
  /** Moves on every invalidation; a reply decided under an older epoch is not cached. */
  epoch = 0;
  /** False while invalidations cannot be received: nothing is cached then. */
  enabled = false;
  hits = 0;

  get size(): number {
    return this.count;
  }

  /** The cached reply if `key` with `signature` is refused for `cost` at `nowUs`, else null. */
  lookup(key: string, signature: string, cost: number, nowUs: number): { values: number[]; elapsedUs: number; leftUs: number } | null {
    if (!this.enabled || this.count === 0) return null;
    const byParams = this.entries.get(key);
    if (byParams === undefined) return null;
    const r = byParams.get(signature);
    if (r === undefined) return null;
    if (nowUs >= r.untilUs || nowUs < r.atUs) {
      // Past its time, or the clock went back before the decision: ask the backend again.
      byParams.delete(signature);
      this.count--;
      if (byParams.size === 0) this.entries.delete(key);
      return null;
    }
    if (cost < r.cost) return null;
    this.hits++;
    return { values: r.values, elapsedUs: nowUs - r.atUs, leftUs: r.untilUs - nowUs };
  }

  /** Remembers a refusal decided at `atUs` (local clock) that holds for `forUs`, if nothing was invalidated since `epoch`. */
  store(key: string, signature: string, cost: number, atUs: number, forUs: number, values: number[], epoch: number): void {
    if (!this.enabled || epoch !== this.epoch || forUs <= 0) return;
    if (this.count >= REFUSAL_CACHE_MAX_ENTRIES) {
      this.entries.clear();
      this.count = 0;
    }
    let byParams = this.entries.get(key);
    if (byParams === undefined) {
      byParams = new Map();
      this.entries.set(key, byParams);
    }
    const old = byParams.get(signature);
    // A refusal of a smaller cost is the stronger statement: keep it while it lasts as long.
    if (old !== undefined && old.cost < cost && old.untilUs >= atUs + forUs) return;
    if (old === undefined) this.count++;
    byParams.set(signature, { cost, untilUs: atUs + forUs, atUs, values });
  }

  /** Drops every refusal of a key (DEL, UNLINK, an invalidation from another sidecar). */
  invalidateKey(key: string): void {
    this.epoch++;
    const byParams = this.entries.get(key);
    if (byParams === undefined) return;
    this.count -= byParams.size;
    this.entries.delete(key);
  }

  /** Drops everything (FLUSHDB, or invalidations could not be received). */
  clear(): void {
    this.epoch++;
    this.entries.clear();
    this.count = 0;
  }
}
