/**
 * The keyspace: every limiter key, its algorithm, its state and its absolute expiry.
 *
 * Layout: a `Map<string, slot>` from the key (a binary string, one char per byte) to a slot number,
 * and one typed-array column per field, indexed by slot. Updating a key writes numbers into typed
 * arrays and allocates nothing, so a million keys updated continuously create no garbage for the GC
 * to trace (boxed per-update objects made minor GCs take tens of ms at that size).
 *
 * Expiry follows Redis: a key is visible while `nowMs <= expireAtMs` and gone once `nowMs >
 * expireAtMs` (lazily on access, and by the active cycle, which does bounded work per call). A slot
 * keeps its number for the key's whole life, which makes SCAN cursors stable.
 */

/** The algorithm a key holds. The name is what TYPE answers. */
export enum KeyType {
  Free = 0,
  Gcra = 1,
  TokenBucket = 2,
  LeakyBucket = 3,
  FixedWindow = 4,
  SlidingLog = 5,
  SlidingWindow = 6,
}

export const TYPE_NAMES: Record<number, string> = {
  [KeyType.Gcra]: 'gcra',
  [KeyType.TokenBucket]: 'tokenbucket',
  [KeyType.LeakyBucket]: 'leakybucket',
  [KeyType.FixedWindow]: 'fixedwindow',
  [KeyType.SlidingLog]: 'slidinglog',
  [KeyType.SlidingWindow]: 'slidingwindow',
};

const INITIAL_SLOTS = 1024;
/** Eviction candidates kept between evictions (Redis's EVPOOL_SIZE). */
const EVICTION_POOL_SIZE = 16;

/** How a victim is chosen when `maxmemory` is reached (the policies other than noeviction). */
export type EvictionPolicy = 'volatile-ttl' | 'allkeys-lru' | 'allkeys-random';

export class Keyspace {
  private readonly index = new Map<string, number>();
  /** slot → key, for SCAN, KEYS and the expiry cycle. */
  private keys: (string | null)[] = [];
  private types = new Uint8Array(INITIAL_SLOTS);
  private expireAt = new Float64Array(INITIAL_SLOTS);
  /**
   * Three numeric state fields per slot (A, B, C); each algorithm documents what they hold.
   * Variable-size state (a sliding log's timestamps) goes in `blobs`, which only such keys pay for.
   */
  private stateA = new Float64Array(INITIAL_SLOTS);
  private stateB = new Float64Array(INITIAL_SLOTS);
  private stateC = new Float64Array(INITIAL_SLOTS);
  /**
   * Last access per slot in whole seconds of the server clock (for allkeys-lru): 4 bytes a key. It
   * is not persisted (snapshots carry type, expiry, A/B/C and blobs); loaded keys start at the time
   * of loading.
   */
  private lru = new Uint32Array(INITIAL_SLOTS);
  /** The server clock's second at the latest lookup, which is what create() stamps on a new key. */
  private nowSec = Math.floor(Date.now() / 1000);
  private readonly blobs = new Map<number, Float64Array>();
  /** The best eviction candidates seen so far, lowest score first (see sampleVictim). */
  private pool: { slot: number; key: string; score: number }[] = [];
  private freeSlots: number[] = [];
  /** Slots ever used: [0, highWater). */
  private highWater = 0;
  private sweepCursor = 0;

  /** Live keys per KeyType (INFO limiter). */
  private typeCounts = new Float64Array(16);

  /**
   * Writes since start (Redis's `server.dirty`): bumped by every state write (setState, setBlob), every
   * delete and by FLUSH (one per key removed). The save policy (`save <seconds> <changes>`) and INFO's
   * rdb_changes_since_last_save compare it with its value at the last successful snapshot. Counting
   * here, on the keyspace's write paths, means every command that writes is counted without knowing it.
   */
  dirty = 0;

  /** Keys removed because they expired (INFO expired_keys). */
  expiredCount = 0;
  /** Keys removed by maxmemory eviction (INFO evicted_keys). */
  evictedCount = 0;
  /** Estimated average TTL of live keys in ms (INFO keyspace avg_ttl), from the expiry sweep's samples. */
  avgTtlMs = 0;

  /**
   * An expired key that lookup() found, whose removal waits one step: a limiter looks a key up and,
   * usually, creates it again at once, and create() of that same key then reuses its slot and Map
   * entry instead of a Map delete plus a Map set (on a busy server with keys expiring between calls
   * those two were a tenth of the CPU). The key is already gone for every purpose: its type is Free
   * and its counts are taken off; every other operation settles (really removes) it first.
   */
  private expiredKey: string | null = null;
  private expiredSlot = -1;

  private settle(): void {
    const slot = this.expiredSlot;
    if (slot === -1) return;
    this.expiredSlot = -1;
    this.expiredKey = null;
    this.index.delete(this.keys[slot]!);
    this.keys[slot] = null;
    this.freeSlots.push(slot);
  }

  countOfType(type: KeyType): number {
    return this.typeCounts[type];
  }

  get size(): number {
    return this.index.size - (this.expiredSlot === -1 ? 0 : 1);
  }

  /** The slot of a live key, or -1. An expired key found here is gone from then on (see expiredKey). */
  lookup(key: string, nowMs: number): number {
    // Commands look a key up before creating it: create() stamps the clock seen here.
    this.nowSec = (nowMs / 1000) >>> 0;
    this.settle();
    const slot = this.index.get(key);
    if (slot === undefined) return -1;
    if (nowMs > this.expireAt[slot]) {
      this.expiredCount++;
      this.typeCounts[this.types[slot]]--;
      this.types[slot] = KeyType.Free;
      if (this.blobs.size > 0) this.blobs.delete(slot);
      this.expiredKey = key;
      this.expiredSlot = slot;
      return -1;
    }
    this.lru[slot] = this.nowSec;
    return slot;
  }

  /** Creates a key (it must not exist) and returns its slot; the caller sets state and expiry. */
  create(key: string, type: KeyType): number {
    let slot: number | undefined;
    if (this.expiredSlot !== -1 && this.expiredKey === key) {
      // The key lookup() just found expired: same slot, same Map entry.
      slot = this.expiredSlot;
      this.expiredSlot = -1;
      this.expiredKey = null;
    } else {
      this.settle();
      slot = this.freeSlots.pop();
      if (slot === undefined) {
        if (this.highWater === this.types.length) this.grow();
        slot = this.highWater++;
      }
      this.index.set(key, slot);
      this.keys[slot] = key;
    }
    this.types[slot] = type;
    this.typeCounts[type]++;
    this.expireAt[slot] = 0;
    this.lru[slot] = this.nowSec;
    this.stateA[slot] = 0;
    this.stateB[slot] = 0;
    this.stateC[slot] = 0;
    return slot;
  }

  /** Deletes a key if present (expired or not: DEL counts only live ones, so check first). */
  delete(key: string, nowMs: number): boolean {
    const slot = this.lookup(key, nowMs);
    if (slot === -1) return false;
    this.removeSlot(slot);
    this.dirty++;
    return true;
  }

  clear(): void {
    this.settle();
    this.dirty += this.index.size;
    this.index.clear();
    this.keys = [];
    this.freeSlots = [];
    this.highWater = 0;
    this.sweepCursor = 0;
    this.typeCounts.fill(0);
    this.avgTtlMs = 0;
    this.types = new Uint8Array(INITIAL_SLOTS);
    this.expireAt = new Float64Array(INITIAL_SLOTS);
    this.stateA = new Float64Array(INITIAL_SLOTS);
    this.stateB = new Float64Array(INITIAL_SLOTS);
    this.stateC = new Float64Array(INITIAL_SLOTS);
    this.lru = new Uint32Array(INITIAL_SLOTS);
    this.pool = [];
    this.blobs.clear();
  }

  typeOf(slot: number): KeyType {
    return this.types[slot];
  }
  expireAtMs(slot: number): number {
    return this.expireAt[slot];
  }
  setExpireAtMs(slot: number, ms: number): void {
    this.expireAt[slot] = ms;
  }
  getA(slot: number): number {
    return this.stateA[slot];
  }
  getB(slot: number): number {
    return this.stateB[slot];
  }
  getC(slot: number): number {
    return this.stateC[slot];
  }
  setState(slot: number, a: number, b: number, c = 0): void {
    this.dirty++;
    this.stateA[slot] = a;
    this.stateB[slot] = b;
    this.stateC[slot] = c;
  }
  /** The variable-size state of a slot, or undefined. */
  getBlob(slot: number): Float64Array | undefined {
    return this.blobs.get(slot);
  }
  setBlob(slot: number, blob: Float64Array | undefined): void {
    this.dirty++;
    if (blob === undefined) this.blobs.delete(slot);
    else this.blobs.set(slot, blob);
  }

  /** Calls `visit(key, slot)` for every live key (for snapshots and INFO); skips expired ones. */
  forEachLive(nowMs: number, visit: (key: string, slot: number) => void): void {
    this.settle();
    for (let slot = 0; slot < this.highWater; slot++) {
      const key = this.keys[slot];
      if (key != null && nowMs <= this.expireAt[slot]) visit(key, slot);
    }
  }

  /**
   * Visits live keys from slot `cursor` on, calling `visit(key, slot)` for up to `count` slots.
   * Returns the next cursor (0 when the walk is complete), as SCAN needs.
   */
  scan(cursor: number, count: number, nowMs: number, visit: (key: string, slot: number) => void): number {
    this.settle();
    let slot = cursor;
    let seen = 0;
    while (slot < this.highWater && seen < count) {
      const key = this.keys[slot];
      if (key != null) {
        seen++;
        if (nowMs > this.expireAt[slot]) {
          this.removeSlot(slot);
          this.expiredCount++;
        } else {
          visit(key, slot);
        }
      }
      slot++;
    }
    return slot >= this.highWater ? 0 : slot;
  }

  /**
   * One step of the active expiry cycle: examines slots round-robin and deletes expired keys,
   * stopping after `maxSlots` slots or when `deadline()` says time is up (checked every 256 slots),
   * so a million keys expiring together are reclaimed over many short steps. Returns the number of
   * keys deleted.
   */
  expireStep(nowMs: number, maxSlots: number, timeUp: () => boolean): number {
    this.settle();
    let removed = 0;
    let ttlSum = 0;
    let ttlCount = 0;
    const limit = Math.min(maxSlots, this.highWater);
    for (let i = 0; i < limit; i++) {
      if (this.sweepCursor >= this.highWater) this.sweepCursor = 0;
      const slot = this.sweepCursor++;
      if (this.keys[slot] != null) {
        if (nowMs > this.expireAt[slot]) {
          this.removeSlot(slot);
          removed++;
        } else {
          ttlSum += this.expireAt[slot] - nowMs;
          ttlCount++;
        }
      }
      if ((i & 255) === 255 && timeUp()) break;
    }
    this.expiredCount += removed;
    if (this.index.size === 0) {
      this.avgTtlMs = 0;
    } else if (ttlCount > 0) {
      // Blend each step's sample into the running estimate, as Redis does with its expiry samples.
      const sample = ttlSum / ttlCount;
      this.avgTtlMs = this.avgTtlMs === 0 ? sample : (this.avgTtlMs * 49 + sample) / 50;
    }
    return removed;
  }

  /** The last access of a slot, in seconds of the server clock (allkeys-lru; OBJECT IDLETIME-like). */
  lastAccessSec(slot: number): number {
    return this.lru[slot];
  }

  /**
   * Picks an eviction victim as Redis does (evict.c): samples `samples` live keys at random slots,
   * merges them into a small pool of the best candidates seen so far (kept across calls), and
   * returns the best one still valid: for volatile-ttl the soonest expiry (the key closest to being
   * back to its fresh state: evicting it forgets the least), for allkeys-lru the oldest access; for
   * allkeys-random the first key sampled. Returns -1 if the keyspace is empty. O(samples + pool):
   * at most 4 × samples random probes (freed slots are reused first, so the slot range stays dense).
   * `random()` returns a number in [0, 1).
   */
  sampleVictim(policy: EvictionPolicy, samples: number, random: () => number): number {
    this.settle();
    if (this.index.size === 0) return -1;
    let found = 0;
    for (let probe = 0; probe < samples * 4 && found < samples; probe++) {
      const slot = Math.floor(random() * this.highWater);
      const key = this.keys[slot];
      if (key == null) continue;
      found++;
      if (policy === 'allkeys-random') return slot;
      this.poolOffer(slot, key, this.evictionScore(policy, slot));
    }
    // The best pooled candidate that still holds the same key with the same score (it may have
    // been deleted, replaced or touched since it was pooled).
    while (this.pool.length > 0) {
      const c = this.pool.shift()!;
      if (this.keys[c.slot] === c.key && this.evictionScore(policy, c.slot) === c.score) return c.slot;
    }
    // A sparse slot range (after mass deletes): the first live key from a random slot.
    const start = Math.floor(random() * this.highWater);
    for (let i = 0; i < this.highWater; i++) {
      const slot = (start + i) % this.highWater;
      if (this.keys[slot] != null) return slot;
    }
    return -1;
  }

  /** Lower is evicted first. */
  private evictionScore(policy: EvictionPolicy, slot: number): number {
    return policy === 'volatile-ttl' ? this.expireAt[slot] : this.lru[slot];
  }

  /** Keeps the EVICTION_POOL_SIZE lowest-scored candidates, sorted, each slot once. */
  private poolOffer(slot: number, key: string, score: number): void {
    const pool = this.pool;
    if (pool.length === EVICTION_POOL_SIZE && score >= pool[pool.length - 1].score) return;
    for (let i = 0; i < pool.length; i++) if (pool[i].slot === slot) return;
    let at = pool.length;
    while (at > 0 && pool[at - 1].score > score) at--;
    pool.splice(at, 0, { slot, key, score });
    if (pool.length > EVICTION_POOL_SIZE) pool.pop();
  }

  /** Removes a key for maxmemory (counted in evictedCount and as a write, as Redis's dirty++). */
  evictSlot(slot: number): void {
    this.settle();
    if (this.keys[slot] == null) return;
    this.removeSlot(slot);
    this.evictedCount++;
    this.dirty++;
  }

  private removeSlot(slot: number): void {
    const key = this.keys[slot]!;
    this.index.delete(key);
    this.keys[slot] = null;
    this.typeCounts[this.types[slot]]--;
    this.types[slot] = KeyType.Free;
    if (this.blobs.size > 0) this.blobs.delete(slot);
    this.freeSlots.push(slot);
  }

  private grow(): void {
    const size = this.types.length * 2;
    this.types = growTyped(this.types, new Uint8Array(size));
    this.expireAt = growTyped(this.expireAt, new Float64Array(size));
    this.stateA = growTyped(this.stateA, new Float64Array(size));
    this.stateB = growTyped(this.stateB, new Float64Array(size));
    this.stateC = growTyped(this.stateC, new Float64Array(size));
    this.lru = growTyped(this.lru, new Uint32Array(size));
  }
}

function growTyped<T extends Uint8Array | Uint32Array | Float64Array>(from: T, to: T): T {
  to.set(from);
  return to;
}
