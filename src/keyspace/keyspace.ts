/**
 * The keyspace: every limiter key, its algorithm, its state and its absolute expiry.
 *
 * Layout: a KeyTable (key-table.ts) maps the key's bytes to a slot number and holds each slot's
 * 64-byte record: the key, its type and last access, its expiry and three numbers of state. Looking a
 * key up hashes and compares the request's bytes in place; updating a key writes numbers into the
 * record; neither allocates, and the keys themselves are not JavaScript objects, so a million keys
 * updated continuously give the GC nothing to trace (boxed per-update objects made minor GCs take
 * tens of ms at that size).
 *
 * Keys are named two ways: by bytes (`lookupKey(bytes, start, end)`, the commands' path, straight
 * from the request) and by binary strings, one char per byte (`lookup(key)`, for everything else).
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

import { hashKey } from './key-hash.js';
import { KeyTable } from './key-table.js';
import type { JournalSink } from '../persistence/journal-format.js';

const LRU_MASK = 0xffffff;
/** Index-table positions an active-expiry step moves while the table grows (~0.1 ms). */
const EXPIRE_STEP_TABLE_MOVES = 4096;
/** Eviction candidates kept between evictions (Redis's EVPOOL_SIZE). */
const EVICTION_POOL_SIZE = 16;
/** What a blob costs beyond its numbers: the Float64Array and its ArrayBuffer objects, its Map entry. */
const BLOB_OVERHEAD_BYTES = 160;

/** How a victim is chosen when `maxmemory` is reached (the policies other than noeviction). */
export type EvictionPolicy = 'volatile-ttl' | 'allkeys-lru' | 'allkeys-random';

/**
 * One client's WATCH of one key (see Keyspace.watch). `owner.dirty` is set when the key is touched
 * (any change: a write, a delete, expiry, eviction, FLUSH), as Redis's CLIENT_DIRTY_CAS. `expired`
 * is Redis's `wk->expired`: the key was present but already expired when it was watched; its
 * removal is then no logical change (the flag is cleared instead), anything else still is.
 */
export interface KeyWatch {
  readonly key: string;
  expired: boolean;
  readonly owner: WatchOwner;
}

/** What a watch marks when its key is touched: one per client (its WATCHed keys together). */
export interface WatchOwner {
  dirty: boolean;
}

/** Receives a key of a background save: `source` holds it (the keyspace, or its storage before a FLUSH). */
export type SaveSink = (source: Keyspace, slot: number) => void;

/** saveCursor when no background save runs: above every slot, so the copy-on-write check fails. */
const NO_SAVE = 0x7fffffff;

/**
 * The state of a background save's point-in-time view (see beginSave). Slots [pos, end) are still to
 * be visited; `done` marks those already written (their pre-image, copied on their first change) or
 * not to be written (a key created during the save in a slot that was free at its start).
 */
interface SaveView {
  /** Where the slots are read: this keyspace, or the storage a FLUSH during the save set aside. */
  source: Keyspace;
  pos: number;
  readonly end: number;
  readonly startMs: number;
  readonly done: Uint8Array;
  readonly sink: SaveSink;
}

export class Keyspace {
  /**
   * The keys and their records. Each slot's record (key-table.ts) holds, for the keyspace, four
   * numbers (index.getState(slot, 0..3)): the absolute expiry in ms, then three state fields A, B, C,
   * whose meaning each algorithm documents; and the slot's type and last access in its spare word
   * (see meta()). Variable-size state (a sliding log's timestamps) goes in `blobs`, which only such
   * keys pay for.
   */
  private index = new KeyTable();
  /** Holds a string key's bytes for the string-named methods. */
  private scratch = Buffer.alloc(256);
  /** The server clock's second at the latest lookup, which is what create() stamps on a new key. */
  private nowSec = Math.floor(Date.now() / 1000);

  /**
   * A slot's type and last access, packed in its index record's spare word: the type in the low 8
   * bits (0 = free slot) and the last access in the 24 above, in whole seconds of the server clock
   * modulo 2^24 (Redis's LRU clock has the same width: idle times are exact up to 194 days). The
   * access time is for allkeys-lru; it is not persisted, so loaded keys start at the time of loading.
   */
  private meta(type: KeyType): number {
    return type | ((this.nowSec & LRU_MASK) << 8);
  }
  private typeAt(slot: number): KeyType {
    return this.index.spare(slot) & 0xff;
  }
  private blobs = new Map<number, Float64Array>();
  /** Bytes of the blobs, with their overhead (datasetBytes). */
  private blobBytes = 0;
  /**
   * The slot and blob of the latest getBlob or createKey (a new key has no blob): setBlob, which a
   * sliding-log write calls right after one of them, learns the blob it replaces (for blobBytes)
   * without a second Map lookup.
   */
  private blobMemoSlot = -1;
  private blobMemo: Float64Array | undefined = undefined;
  /** The best eviction candidates seen so far, lowest score first (see sampleVictim). */
  private pool: { slot: number; hash: number; score: number }[] = [];
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
  /**
   * Estimated average TTL of live keys in ms (INFO keyspace avg_ttl), from the expiry sweep's samples.
   * Starts as −0 (equal to 0 in every comparison and printed as 0) so V8 holds the field as a double
   * from the start: a field that starts as a small integer and gets its first fraction from the first
   * expiry step changes every Keyspace's hidden class then, and the optimized lookups (warmed up
   * before the port opened, src/server/warmup.ts) are thrown away under the first load.
   */
  avgTtlMs = -0;
  /** Keys examined by the last expireStep. */
  lastStepKeys = 0;

  /**
   * An expired key that lookup() found, whose removal waits one step: a limiter looks a key up and,
   * usually, creates it again at once, and create() of that same key then reuses its slot and table
   * entry instead of a removal plus an insertion. The key is already gone for every purpose: its type
   * is Free and its counts are taken off; every other operation settles (really removes) it first.
   */
  private expiredSlot = -1;

  /**
   * The key bytes of the latest lookupKey and their hash: a command creates the key it just looked up,
   * and hashing it again was 1–2% of a CL.THROTTLE. Request bytes are never overwritten, so the same
   * buffer and positions mean the same key; the scratch buffer, which is, forgets it (toScratch).
   */
  private lastBytes: Uint8Array | null = null;
  private lastStart = 0;
  private lastEnd = 0;
  private lastHash = 0;

  /**
   * A background save's view (beginSave), or null. While a save runs, slots at or above `saveCursor`
   * (its scan position) still hold the keyspace as it was when the save started: the first change of
   * such a slot first hands its pre-image to the save (preserve). Every write path compares the slot
   * with saveCursor, which is NO_SAVE (above every slot) when no save runs: one integer comparison.
   */
  private save: SaveView | null = null;
  private saveCursor = NO_SAVE;

  /**
   * WATCHed keys (binary strings) and their watches. Every write path tests `watchedKeys` (the map's
   * size) before anything else, so with nobody watching a write pays one integer comparison; the
   * key's string is made only when some key is watched.
   */
  private watches = new Map<string, KeyWatch | KeyWatch[]>();
  private watchedKeys = 0;

  /**
   * The append-only journal's recorder (`appendonly yes`: src/persistence/journal.ts), or null. A
   * limiter's write pays one test for it in setState (which every state change calls, after setBlob
   * and before setExpireAtMs: the journal encodes the key at the end of the turn, whole). Expiry is
   * not recorded: a replayed state past its expiry is dropped by the loader, as it would be here.
   */
  journal: JournalSink | null = null;

  private settle(): void {
    const slot = this.expiredSlot;
    if (slot === -1) return;
    this.expiredSlot = -1;
    this.index.remove(slot);
    this.freeSlots.push(slot);
  }

  countOfType(type: KeyType): number {
    return this.typeCounts[type];
  }

  get size(): number {
    return this.index.size - (this.expiredSlot === -1 ? 0 : 1);
  }

  /**
   * Bytes the keys use, counted rather than measured (INFO used_memory_dataset, what maxmemory
   * limits): their records, index table and arena bytes (KeyTable.usedBytes) and their blobs. O(1).
   */
  get datasetBytes(): number {
    return this.index.usedBytes + this.blobBytes;
  }

  /**
   * Bytes one key counts in datasetBytes (MEMORY USAGE): its record, its long key's arena chunk and
   * its blob with the blob's overhead. The index table's share (4 B a position) is left out.
   */
  keyBytes(slot: number): number {
    const blob = this.blobs.size > 0 ? this.blobs.get(slot) : undefined;
    return this.index.slotBytes(slot) + (blob === undefined ? 0 : blob.byteLength + BLOB_OVERHEAD_BYTES);
  }

  /**
   * The slot of the live key `bytes[start, end)`, or -1. An expired key found here is gone from then
   * on (see expiredSlot).
   */
  lookupKey(bytes: Uint8Array, start: number, end: number, nowMs: number): number {
    // Commands look a key up before creating it: create() stamps the clock seen here.
    this.nowSec = (nowMs / 1000) >>> 0;
    this.settle();
    const hash = hashKey(bytes, start, end);
    this.lastBytes = bytes;
    this.lastStart = start;
    this.lastEnd = end;
    this.lastHash = hash;
    const slot = this.index.find(bytes, start, end, hash);
    if (slot === -1) return -1;
    if (nowMs > this.index.getState(slot, 0)) {
      if (this.journal !== null) this.journal.expiring(this, slot);
      if (slot >= this.saveCursor) this.preserve(slot);
      this.expiredCount++;
      this.typeCounts[this.typeAt(slot)]--;
      this.index.setSpare(slot, KeyType.Free);
      if (this.blobs.size > 0) this.dropBlob(slot);
      this.expiredSlot = slot;
      if (this.watchedKeys !== 0) this.touchSlot(slot);
      return -1;
    }
    this.index.setSpare(slot, this.meta(this.typeAt(slot)));
    return slot;
  }

  /** lookupKey of a binary string key. */
  lookup(key: string, nowMs: number): number {
    const n = this.toScratch(key);
    return this.lookupKey(this.scratch, 0, n, nowMs);
  }

  /**
   * Creates the key `bytes[start, end)` (it must not exist) and returns its slot; the caller sets
   * state and expiry.
   */
  createKey(bytes: Uint8Array, start: number, end: number, type: KeyType): number {
    let slot: number | undefined;
    const hash = bytes === this.lastBytes && start === this.lastStart && end === this.lastEnd ? this.lastHash : hashKey(bytes, start, end);
    this.lastBytes = null; // good for one create, and the request buffer need not stay referenced
    if (this.expiredSlot !== -1 && this.index.holds(this.expiredSlot, bytes, start, end, hash)) {
      // The key lookup() just found expired: same slot, same table entry.
      slot = this.expiredSlot;
      this.expiredSlot = -1;
    } else {
      this.settle();
      slot = this.freeSlots.pop();
      if (slot === undefined) {
        if (this.highWater === this.index.capacity) this.index.addPage();
        slot = this.highWater++;
      }
      // A slot free at the save's start (or freed since, its key preserved): keep the new key out.
      if (slot >= this.saveCursor) this.preserve(slot);
      this.index.insert(bytes, start, end, hash, slot);
    }
    this.index.setSpare(slot, this.meta(type));
    this.typeCounts[type]++;
    const index = this.index;
    index.setState(slot, 0, 0);
    index.setState(slot, 1, 0);
    index.setState(slot, 2, 0);
    index.setState(slot, 3, 0);
    this.blobMemoSlot = slot;
    this.blobMemo = undefined;
    return slot;
  }

  /** createKey of a binary string key. */
  create(key: string, type: KeyType): number {
    const n = this.toScratch(key);
    return this.createKey(this.scratch, 0, n, type);
  }

  /** The key of a slot, as a binary string (one char per byte). */
  keyOf(slot: number): string {
    return this.index.keyOf(slot);
  }

  keyLength(slot: number): number {
    return this.index.keyLength(slot);
  }

  /** Copies the key of a slot into `target` at `offset` (for snapshots); returns its length. */
  copyKey(slot: number, target: Buffer, offset: number): number {
    return this.index.copyKey(slot, target, offset);
  }

  /** Writes a binary string key into the scratch buffer; returns its length. */
  private toScratch(key: string): number {
    if (this.lastBytes === this.scratch) this.lastBytes = null;
    if (key.length > this.scratch.length) this.scratch = Buffer.alloc(key.length * 2);
    return this.scratch.write(key, 0, 'latin1');
  }

  /** delete() of the key bytes[start, end), straight from a request (DEL: a key may be 512 MiB, too long for a string). */
  deleteKey(bytes: Uint8Array, start: number, end: number, nowMs: number): boolean {
    const slot = this.lookupKey(bytes, start, end, nowMs);
    if (slot === -1) return false;
    if (this.journal !== null) this.journal.deleting(this, slot);
    this.removeSlot(slot);
    this.dirty++;
    return true;
  }

  /** Deletes a key if present (expired or not: DEL counts only live ones, so check first). */
  delete(key: string, nowMs: number): boolean {
    const slot = this.lookup(key, nowMs);
    if (slot === -1) return false;
    if (this.journal !== null) this.journal.deleting(this, slot);
    this.removeSlot(slot);
    this.dirty++;
    return true;
  }

  clear(): void {
    if (this.journal !== null) this.journal.flushing();
    this.settle();
    if (this.watchedKeys !== 0) this.touchAllWatched();
    this.dirty += this.index.size;
    if (this.saveCursor !== NO_SAVE) {
      // A background save has slots left to visit: it keeps reading them from the storage as it is
      // (nothing changes it any more), and the keyspace starts over in new storage. O(1), not a copy.
      this.setAsideForSave();
      this.index = new KeyTable();
      this.blobs = new Map();
    } else {
      this.index.clear();
      this.blobs.clear();
    }
    this.freeSlots = [];
    this.highWater = 0;
    this.sweepCursor = 0;
    this.typeCounts.fill(0);
    this.avgTtlMs = 0;
    this.pool = [];
    this.blobBytes = 0;
    this.blobMemoSlot = -1;
    this.blobMemo = undefined;
  }

  typeOf(slot: number): KeyType {
    return this.typeAt(slot);
  }
  expireAtMs(slot: number): number {
    return this.index.getState(slot, 0);
  }
  setExpireAtMs(slot: number, ms: number): void {
    if (slot >= this.saveCursor) this.preserve(slot);
    this.index.setState(slot, 0, ms);
  }
  getA(slot: number): number {
    return this.index.getState(slot, 1);
  }
  getB(slot: number): number {
    return this.index.getState(slot, 2);
  }
  getC(slot: number): number {
    return this.index.getState(slot, 3);
  }
  setState(slot: number, a: number, b: number, c = 0): void {
    if (slot >= this.saveCursor) this.preserve(slot);
    if (this.watchedKeys !== 0) this.touchSlot(slot);
    if (this.journal !== null) this.journal.touched(slot);
    this.dirty++;
    const index = this.index;
    index.setState(slot, 1, a);
    index.setState(slot, 2, b);
    index.setState(slot, 3, c);
  }
  /**
   * The variable-size state of a slot, or undefined. A limiter may change the returned array in place
   * (a sliding log appends to its ring), so while a background save runs this counts as a write.
   */
  /** True when some key holds a blob (the journal's encoder skips getBlob's lookup otherwise). */
  get anyBlobs(): boolean {
    return this.blobs.size !== 0;
  }
  getBlob(slot: number): Float64Array | undefined {
    if (slot >= this.saveCursor) this.preserve(slot);
    const blob = this.blobs.get(slot);
    this.blobMemoSlot = slot;
    this.blobMemo = blob;
    return blob;
  }
  setBlob(slot: number, blob: Float64Array | undefined): void {
    if (slot >= this.saveCursor) this.preserve(slot);
    if (this.watchedKeys !== 0) this.touchSlot(slot);
    this.dirty++;
    const had = slot === this.blobMemoSlot ? this.blobMemo : this.blobs.get(slot);
    this.blobMemoSlot = slot;
    this.blobMemo = blob;
    if (had === blob) return; // updated in place
    if (had !== undefined) this.blobBytes -= had.byteLength + BLOB_OVERHEAD_BYTES;
    if (blob === undefined) {
      this.blobs.delete(slot);
    } else {
      this.blobs.set(slot, blob);
      this.blobBytes += blob.byteLength + BLOB_OVERHEAD_BYTES;
    }
  }

  private dropBlob(slot: number): void {
    if (slot === this.blobMemoSlot) this.blobMemo = undefined;
    const had = this.blobs.get(slot);
    if (had === undefined) return;
    this.blobBytes -= had.byteLength + BLOB_OVERHEAD_BYTES;
    this.blobs.delete(slot);
  }

  /** Calls `visit(slot)` for every live key (for snapshots); skips expired ones. */
  forEachLive(nowMs: number, visit: (slot: number) => void): void {
    this.settle();
    for (let slot = 0; slot < this.highWater; slot++) {
      if (this.typeAt(slot) !== KeyType.Free && nowMs <= this.index.getState(slot, 0)) visit(slot);
    }
  }

  /**
   * Visits live keys from slot `cursor` on, calling `visit(slot)` for up to `count` slots (keyOf
   * names the key). Returns the next cursor (0 when the walk is complete), as SCAN needs.
   */
  scan(cursor: number, count: number, nowMs: number, visit: (slot: number) => void): number {
    this.settle();
    let slot = cursor;
    let seen = 0;
    while (slot < this.highWater && seen < count) {
      if (this.typeAt(slot) !== KeyType.Free) {
        seen++;
        if (nowMs > this.index.getState(slot, 0)) {
          if (this.journal !== null) this.journal.expiring(this, slot);
          this.removeSlot(slot);
          this.expiredCount++;
        } else {
          visit(slot);
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
   * keys deleted; `lastStepKeys` tells how many keys (live or expired) the step examined.
   */
  expireStep(nowMs: number, maxSlots: number, timeUp: () => boolean): number {
    this.settle();
    // A growing index table moves on here too, so it finishes even when no key is written.
    this.index.moveSome(EXPIRE_STEP_TABLE_MOVES);
    let removed = 0;
    let ttlSum = 0;
    let ttlCount = 0;
    const limit = Math.min(maxSlots, this.highWater);
    for (let i = 0; i < limit; i++) {
      if (this.sweepCursor >= this.highWater) this.sweepCursor = 0;
      const slot = this.sweepCursor++;
      if (this.typeAt(slot) !== KeyType.Free) {
        if (nowMs > this.index.getState(slot, 0)) {
          if (this.journal !== null) this.journal.expiring(this, slot);
          this.removeSlot(slot);
          removed++;
        } else {
          ttlSum += this.index.getState(slot, 0) - nowMs;
          ttlCount++;
        }
      }
      if ((i & 255) === 255 && timeUp()) break;
    }
    this.expiredCount += removed;
    this.lastStepKeys = removed + ttlCount;
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
    return this.lruScore(slot);
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
      if (this.typeAt(slot) === KeyType.Free) continue;
      found++;
      if (policy === 'allkeys-random') return slot;
      this.poolOffer(slot, this.index.hashOf(slot), this.evictionScore(policy, slot));
    }
    // The best pooled candidate that still holds a key with the same hash and score (it may have
    // been deleted, replaced or touched since it was pooled; a different key with the same 32-bit
    // hash and score would do as well as a victim).
    while (this.pool.length > 0) {
      const c = this.pool.shift()!;
      if (this.typeAt(c.slot) !== KeyType.Free && this.index.hashOf(c.slot) === c.hash && this.evictionScore(policy, c.slot) === c.score) return c.slot;
    }
    // A sparse slot range (after mass deletes): the first live key from a random slot.
    const start = Math.floor(random() * this.highWater);
    for (let i = 0; i < this.highWater; i++) {
      const slot = (start + i) % this.highWater;
      if (this.typeAt(slot) !== KeyType.Free) return slot;
    }
    return -1;
  }

  /** Lower is evicted first. */
  private evictionScore(policy: EvictionPolicy, slot: number): number {
    return policy === 'volatile-ttl' ? this.index.getState(slot, 0) : this.lruScore(slot);
  }

  /** The last access in seconds, unwrapped: now minus the idle time the 24-bit clock gives. */
  private lruScore(slot: number): number {
    return this.nowSec - ((this.nowSec - (this.index.spare(slot) >>> 8)) & LRU_MASK);
  }

  /** Keeps the EVICTION_POOL_SIZE lowest-scored candidates, sorted, each slot once. */
  private poolOffer(slot: number, hash: number, score: number): void {
    const pool = this.pool;
    if (pool.length === EVICTION_POOL_SIZE && score >= pool[pool.length - 1].score) return;
    for (let i = 0; i < pool.length; i++) if (pool[i].slot === slot) return;
    let at = pool.length;
    while (at > 0 && pool[at - 1].score > score) at--;
    pool.splice(at, 0, { slot, hash, score });
    if (pool.length > EVICTION_POOL_SIZE) pool.pop();
  }

  /** Removes a key for maxmemory (counted in evictedCount and as a write, as Redis's dirty++). */
  evictSlot(slot: number): void {
    this.settle();
    if (this.typeAt(slot) === KeyType.Free) return;
    if (this.journal !== null) this.journal.deleting(this, slot);
    this.removeSlot(slot);
    this.evictedCount++;
    this.dirty++;
  }

  private removeSlot(slot: number): void {
    if (this.watchedKeys !== 0) {
      // The key's bytes go with the slot: name it first, touch its watches once it is gone.
      const key = this.index.keyOf(slot);
      this.unlinkSlot(slot);
      this.touchKey(key);
      return;
    }
    this.unlinkSlot(slot);
  }

  private unlinkSlot(slot: number): void {
    if (slot >= this.saveCursor) this.preserve(slot);
    this.index.remove(slot);
    this.typeCounts[this.typeAt(slot)]--;
    this.index.setSpare(slot, KeyType.Free);
    if (this.blobs.size > 0) this.dropBlob(slot);
    this.freeSlots.push(slot);
  }

  /**
   * WATCH: `owner` is marked dirty by the next change of `key` (a binary string). A key present but
   * already expired now is watched as expired (see KeyWatch), as Redis's watchForKey. Watching a key
   * twice for the same owner is one watch (null the second time).
   */
  watch(owner: WatchOwner, key: string, nowMs: number): KeyWatch | null {
    const entry = this.watches.get(key);
    if (entry !== undefined) {
      if (Array.isArray(entry)) {
        for (const w of entry) if (w.owner === owner) return null;
      } else if (entry.owner === owner) {
        return null;
      }
    }
    const slot = this.presentSlot(key);
    const w: KeyWatch = { key, expired: slot !== -1 && nowMs > this.index.getState(slot, 0), owner };
    // One watcher (the usual case) is kept as it is: a list per key would cost ~180 bytes more.
    if (entry === undefined) this.watches.set(key, w);
    else if (Array.isArray(entry)) entry.push(w);
    else this.watches.set(key, [entry, w]);
    this.watchedKeys = this.watches.size;
    return w;
  }

  /** Ends watches (EXEC and DISCARD of a small set; big ones go through unwatchOne in slices). */
  unwatch(watches: readonly KeyWatch[]): void {
    for (const w of watches) this.dropWatch(w);
    this.watchedKeys = this.watches.size;
  }

  /** Ends one watch (Server's slice-by-slice release of a client's watches). */
  unwatchOne(w: KeyWatch): void {
    this.dropWatch(w);
    this.watchedKeys = this.watches.size;
  }

  /** Watch index entries (distinct watched keys, whoever watches them): INFO. */
  get watchedKeyCount(): number {
    return this.watches.size;
  }

  private dropWatch(w: KeyWatch): void {
    const entry = this.watches.get(w.key);
    if (entry === undefined) return;
    if (!Array.isArray(entry)) {
      if (entry === w) this.watches.delete(w.key);
      return;
    }
    const i = entry.indexOf(w);
    if (i !== -1) entry.splice(i, 1);
    if (entry.length === 1) this.watches.set(w.key, entry[0]);
    else if (entry.length === 0) this.watches.delete(w.key);
  }

  /**
   * Whether a watched key that was not expired when watched has expired by now without being removed
   * yet (Redis's isWatchedKeyExpired, checked by EXEC: such a key counts as touched).
   */
  watchedKeyExpired(watches: readonly KeyWatch[], nowMs: number): boolean {
    for (const w of watches) {
      if (w.expired) continue;
      const slot = this.presentSlot(w.key);
      if (slot !== -1 && nowMs > this.index.getState(slot, 0)) return true;
    }
    return false;
  }

  /** The slot holding `key`, expired or not, or -1 (no lookup side effects: no expiry, no LRU stamp). */
  private presentSlot(key: string): number {
    const n = this.toScratch(key);
    const slot = this.index.find(this.scratch, 0, n, hashKey(this.scratch, 0, n));
    return slot === -1 || this.typeAt(slot) === KeyType.Free ? -1 : slot;
  }

  /** A change of the key in `slot` (made already): Redis's touchWatchedKey. */
  private touchSlot(slot: number): void {
    this.touchKey(this.index.keyOf(slot));
  }

  private touchKey(key: string): void {
    const entry = this.watches.get(key);
    if (entry === undefined) return;
    if (!Array.isArray(entry)) {
      this.touchWatch(entry, undefined);
      return;
    }
    let gone: boolean | undefined;
    for (const w of entry) gone = this.touchWatch(w, gone);
  }

  /** Marks one watch of a changed key; `gone` caches whether the key is absent now (it is looked up once). */
  private touchWatch(w: KeyWatch, gone: boolean | undefined): boolean | undefined {
    if (w.expired) {
      // Removing a key that had already expired when watched is no logical change.
      gone ??= this.presentSlot(w.key) === -1;
      if (gone) {
        w.expired = false;
        return gone;
      }
    }
    w.owner.dirty = true;
    return gone;
  }

  /** FLUSHDB/FLUSHALL, before the keys go: Redis's touchAllWatchedKeysInDb (only keys present count). */
  private touchAllWatched(): void {
    for (const [key, entry] of this.watches) {
      if (this.presentSlot(key) === -1) continue;
      for (const w of Array.isArray(entry) ? entry : [entry]) {
        if (w.expired) w.expired = false;
        else w.owner.dirty = true;
      }
    }
  }

  /**
   * Starts a background save's point-in-time view: the keys live at `startMs` (nowMs <= expireAtMs),
   * each handed to `sink` exactly once, as they are now, whatever happens to them before the save
   * reaches them. saveStep walks the slots in order; a slot it has not reached yet whose record is
   * about to change (state, expiry, blob, delete, eviction, expiry, reuse by a new key) goes to the sink
   * first and is then skipped by the walk; a FLUSH sets the storage aside for the walk (clear). Keys
   * created during the save are not in it: new slots lie beyond the walk's end, and a reused slot is
   * marked done when the new key takes it. Records never move (the index table's growth moves only its
   * entries), so a slot number names the same record for the whole save. One save at a time: a new
   * one replaces the view of one still running (which then gets nothing more); `sink` names the save
   * in saveStep and endSave.
   */
  beginSave(startMs: number, sink: SaveSink): void {
    this.settle();
    this.save = { source: this, pos: 0, end: this.highWater, startMs, done: new Uint8Array(this.highWater), sink };
    this.saveCursor = 0;
  }

  /**
   * Walks on: examines up to `maxSlots` slots and hands each key of the save's view to the sink.
   * Returns false when the walk is complete (the sink then gets nothing more). Throws if the view of
   * save `sink` was ended (endSave) or replaced: its file would miss keys.
   */
  saveStep(sink: SaveSink, maxSlots: number): boolean {
    const view = this.save;
    if (view === null || view.sink !== sink) throw new Error('background save ended before its walk was complete');
    const { source, end, done, startMs } = view;
    const stop = Math.min(end, view.pos + maxSlots);
    // Past these slots before reading them: the sink's own reads (getBlob) must not preserve them, and
    // nothing else runs until the step returns.
    if (source === this) this.saveCursor = stop;
    let slot = view.pos;
    for (; slot < stop; slot++) {
      if (done[slot] === 1) continue;
      if (source.typeAt(slot) !== KeyType.Free && startMs <= source.index.getState(slot, 0)) sink(source, slot);
    }
    view.pos = slot;
    if (slot < end) return true;
    this.saveCursor = NO_SAVE;
    return false;
  }

  /** Ends the view of save `sink` (done, failed or aborted): writes stop paying for it. */
  endSave(sink: SaveSink): void {
    if (this.save === null || this.save.sink !== sink) return;
    this.save = null;
    this.saveCursor = NO_SAVE;
  }

  /**
   * The first change of a slot the save has not reached: hands its key to the sink if it was live at
   * the save's start (the record is still as it was then), and marks it so the walk skips it.
   */
  private preserve(slot: number): void {
    const view = this.save!;
    if (slot >= view.end || view.done[slot] === 1) return;
    view.done[slot] = 1;
    if (this.typeAt(slot) !== KeyType.Free && view.startMs <= this.index.getState(slot, 0)) view.sink(this, slot);
  }

  /**
   * FLUSH during a save: the save goes on reading the current storage, which only it holds from now on
   * (the keyspace takes new storage), so no write needs to preserve anything any more.
   */
  private setAsideForSave(): void {
    const view = this.save!;
    const aside = new Keyspace();
    aside.index = this.index;
    aside.blobs = this.blobs;
    aside.highWater = this.highWater;
    view.source = aside;
    this.saveCursor = NO_SAVE;
  }
}
