/**
 * Choosing the key to evict when `maxmemory` is reached, as Redis does (evict.c): a few keys sampled
 * at random slots, merged into a small pool of the best candidates seen so far (kept across calls).
 */
import type { Keyspace } from './keyspace.js';

/** How a victim is chosen when `maxmemory` is reached (the policies other than noeviction). */
export type EvictionPolicy = 'volatile-ttl' | 'allkeys-lru' | 'allkeys-random';

/** Eviction candidates kept between evictions (Redis's EVPOOL_SIZE). */
const EVICTION_POOL_SIZE = 16;

interface Candidate {
  slot: number;
  hash: number;
  score: number;
}

export class EvictionSampler {
  /** The best eviction candidates seen so far, lowest score first. */
  private pool: Candidate[] = [];

  /**
   * See Keyspace.sampleVictim (which settles the keyspace and returns -1 for an empty one first):
   * for volatile-ttl the soonest expiry (the key closest to being back to its fresh state: evicting
   * it forgets the least), for allkeys-lru the oldest access; for allkeys-random the first key
   * sampled. O(samples + pool): at most 4 × samples random probes (freed slots are reused first, so
   * the slot range stays dense).
   */
  sample(keys: Keyspace, policy: EvictionPolicy, samples: number, random: () => number): number {
    const slots = keys.slotsUsed;
    let found = 0;
    for (let probe = 0; probe < samples * 4 && found < samples; probe++) {
      const slot = Math.floor(random() * slots);
      if (!keys.occupied(slot)) continue;
      found++;
      if (policy === 'allkeys-random') return slot;
      this.offer(slot, keys.hashOf(slot), score(keys, policy, slot));
    }
    // The best pooled candidate that still holds a key with the same hash and score (it may have
    // been deleted, replaced or touched since it was pooled; a different key with the same 32-bit
    // hash and score would do as well as a victim).
    while (this.pool.length > 0) {
      const c = this.pool.shift()!;
      if (keys.occupied(c.slot) && keys.hashOf(c.slot) === c.hash && score(keys, policy, c.slot) === c.score) return c.slot;
    }
    // A sparse slot range (after mass deletes): the first live key from a random slot.
    const start = Math.floor(random() * slots);
    for (let i = 0; i < slots; i++) {
      const slot = (start + i) % slots;
      if (keys.occupied(slot)) return slot;
    }
    return -1;
  }

  /** FLUSH: the pooled slots no longer name the keys they were pooled for. */
  clear(): void {
    this.pool = [];
  }

  /** Keeps the EVICTION_POOL_SIZE lowest-scored candidates, sorted, each slot once. */
  private offer(slot: number, hash: number, score: number): void {
    const pool = this.pool;
    if (pool.length === EVICTION_POOL_SIZE && score >= pool[pool.length - 1].score) return;
    for (let i = 0; i < pool.length; i++) if (pool[i].slot === slot) return;
    let at = pool.length;
    while (at > 0 && pool[at - 1].score > score) at--;
    pool.splice(at, 0, { slot, hash, score });
    if (pool.length > EVICTION_POOL_SIZE) pool.pop();
  }
}

/** Lower is evicted first. */
function score(keys: Keyspace, policy: EvictionPolicy, slot: number): number {
  return policy === 'volatile-ttl' ? keys.expireAtMs(slot) : keys.lastAccessSec(slot);
}
