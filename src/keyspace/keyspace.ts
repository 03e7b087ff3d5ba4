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
 *
 * Here: the storage and the API of every request, in one class so those calls stay direct; in files of
 * their own: expiry.ts, eviction.ts, watch-marks.ts (WATCH), save-copy.ts (BGSAVE's view), scan.ts.
 */

/**
 * A key's type tag, as snapshots and the journal store it: 0 is a free slot, the others are the
 * algorithms' (src/limiters/registry.ts; the keyspace knows none of them).
 */
export type KeyType = number;
/** The type tag of a free slot. */
export const FREE_TYPE = 0;

import { hashKey } from './key-hash.js';
import { KeyTable, MAX_SLOTS } from './key-table.js';
import { EvictionSampler, type EvictionPolicy } from './eviction.js';
import { ExpiryCycle } from './expiry.js';
import { NO_SAVE, SaveView, type SaveSink } from './save-copy.js';
import { forEachLiveSlot, scanSlots } from './scan.js';
import { WatchMarks, type KeyWatch, type WatchOwner } from './watch-marks.js';
import type { JournalSink } from '../persistence/journal-format.js';

export type { EvictionPolicy } from './eviction.js';
export { KeyspaceFullError, MAX_SLOTS as MAX_KEYS } from './key-table.js';
export type { SaveSink } from './save-copy.js';
export type { KeyWatch, WatchOwner } from './watch-marks.js';

const LRU_MASK = 0xffffff;
/** Index-table positions an active-expiry step moves while the table grows (~0.1 ms). */
const EXPIRE_STEP_TABLE_MOVES = 4096;
/** What a blob costs beyond its numbers: the Float64Array and its ArrayBuffer objects, its Map entry. */
const BLOB_OVERHEAD_BYTES = 160;

export class Keyspace {
  /**
   * The keys and their records. Each slot's record (key-table.ts) holds, for the keyspace, four
   * numbers (index.getState(slot, 0..3)): the absolute expiry in ms, then three state fields A, B, C,
   * whose meaning each algorithm documents; and the slot's type and last access in its spare word
   * (see meta()). Variable-size state (an algorithm's blob, e.g. a log of timestamps) goes in `blobs`, which only such
   * keys pay for. It refuses a key beyond `maxKeys` (KeyspaceFullError from createKey, before any
   * change): slot numbers are bounded (key-table.ts).
   */
  private index: KeyTable;
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
   * blob write calls right after one of them, learns the blob it replaces (for blobBytes)
   * without a second Map lookup.
   */
  private blobMemoSlot = -1;
  private blobMemo: Float64Array | undefined = undefined;
  private freeSlots: number[] = [];
  /** Slots ever used: [0, highWater). */
  private highWater = 0;
  private readonly expiry = new ExpiryCycle();
  private readonly eviction = new EvictionSampler();

  /** Live keys per type tag (INFO limiter). */
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
  /** Estimated average TTL of live keys in ms (INFO keyspace avg_ttl), from the expiry cycle's samples. */
  get avgTtlMs(): number {
    return this.expiry.avgTtlMs;
  }
  /** Keys examined by the last expireStep. */
  get lastStepKeys(): number {
    return this.expiry.lastStepKeys;
  }

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
   * such a slot first hands its pre-image to the save (SaveView.preserve). Every write path compares
   * the slot with saveCursor, NO_SAVE (above every slot) when no save runs: one integer comparison.
   */
  private save: SaveView | null = null;
  private saveCursor = NO_SAVE;

  /**
   * WATCHed keys. Every write path tests `watchedKeys` (the marks' size) first, so with nobody watching
   * a write pays one integer comparison; the key's string is made only when some key is watched.
   */
  private readonly marks = new WatchMarks(this);
  private watchedKeys = 0;

  /**
   * The append-only journal's recorder (`appendonly yes`: src/persistence/journal.ts), or null. A
   * limiter's write pays one test for it in setState (which every state change calls, after setBlob
   * and before setExpireAtMs: the journal encodes the key at the end of the turn, whole). Expiry is
   * not recorded: a replayed state past its expiry is dropped by the loader, as it would be here.
   */
  journal: JournalSink | null = null;

  /** `maxKeys` (a multiple of 4096, at most MAX_KEYS) is lower only in tests. */
  constructor(readonly maxKeys = MAX_SLOTS) {
    this.index = new KeyTable(undefined, maxKeys);
  }

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
      this.index.setSpare(slot, FREE_TYPE);
      if (this.blobs.size > 0) this.dropBlob(slot);
      this.expiredSlot = slot;
      if (this.watchedKeys !== 0) this.touchSlot(slot);
      return -1;
    }
    this.index.setSpare(slot, this.meta(this.typeAt(slot)));
    return slot;
  }

  /** What warmKeys read, folded together: kept so that the reads are not dropped as unused. */
  warmedBits = 0;

  /**
   * Brings into the cache what looking up the keys `bytes[starts[i], ends[i])`, i < n, will read
   * (KeyTable.warmKeys), for a caller that knows a batch of keys ahead (the journal's replay). Changes no key.
   */
  warmKeys(bytes: Uint8Array, starts: Int32Array, ends: Int32Array, n: number): void {
    this.warmedBits ^= this.index.warmKeys(bytes, starts, ends, n);
  }

  /** lookupKey of a binary string key. */
  lookup(key: string, nowMs: number): number {
    const n = this.toScratch(key);
    return this.lookupKey(this.scratch, 0, n, nowMs);
  }

  /**
   * Creates the key `bytes[start, end)` (it must not exist) and returns its slot; the caller sets
   * state and expiry. Throws KeyspaceFullError, having changed nothing, when `maxKeys` keys exist.
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
  copyKey(slot: number, target: Buffer, view: DataView, offset: number): number {
    return this.index.copyKey(slot, target, view, offset);
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
    if (this.watchedKeys !== 0) this.marks.touchAll();
    this.dirty += this.index.size;
    if (this.saveCursor !== NO_SAVE) {
      // A background save has slots left to visit: it keeps reading them from the storage as it is,
      // through a keyspace of its own over it (nothing changes it any more, so no write needs to
      // preserve anything), and this keyspace starts over in new storage. O(1), not a copy.
      const aside = new Keyspace(this.maxKeys);
      aside.index = this.index;
      aside.blobs = this.blobs;
      aside.highWater = this.highWater;
      this.save!.source = aside;
      this.saveCursor = NO_SAVE;
      this.index = new KeyTable(undefined, this.maxKeys);
      this.blobs = new Map();
    } else {
      this.index.clear();
      this.blobs.clear();
    }
    this.freeSlots = [];
    this.highWater = 0;
    this.expiry.reset();
    this.typeCounts.fill(0);
    this.eviction.clear();
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
  /** The expiry, A, B and C of `slot` into out[0..3], with one call (the journal's encoder). */
  readState(slot: number, out: Float64Array): void {
    this.index.readState(slot, out);
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
  /** True when some key holds a blob (the journal's encoder skips getBlob's lookup otherwise). */
  get anyBlobs(): boolean {
    return this.blobs.size !== 0;
  }
  /** A slot's variable-size state, or undefined. A limiter may change it in place (a blob's ring is
   * appended to), so while a background save runs this counts as a write. */
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
    forEachLiveSlot(this, nowMs, visit);
  }

  /**
   * SCAN (scan.ts): `visit(slot)` for the live keys of up to `count` slots from slot `cursor` on,
   * removing expired ones met. Returns the next cursor (0 when the walk is complete).
   */
  scan(cursor: number, count: number, nowMs: number, visit: (slot: number) => void): number {
    this.settle();
    return scanSlots(this, cursor, count, nowMs, visit);
  }

  /** Removes the expired key in `slot` a walk found (SCAN, the expiry cycle): counted, journaled. */
  removeExpired(slot: number): void {
    if (this.journal !== null) this.journal.expiring(this, slot);
    this.removeSlot(slot);
    this.expiredCount++;
  }

  /**
   * One step of the active expiry cycle (expiry.ts): deletes the expired keys of up to `maxSlots`
   * slots, round-robin, stopping early when `timeUp()` (asked every 256 slots) says so. Returns the
   * keys deleted; `lastStepKeys` tells how many keys (live or expired) the step examined.
   */
  expireStep(nowMs: number, maxSlots: number, timeUp: () => boolean): number {
    this.settle();
    // A growing index table moves on here too, so it finishes even when no key is written.
    this.index.moveSome(EXPIRE_STEP_TABLE_MOVES);
    return this.expiry.step(this, nowMs, maxSlots, timeUp);
  }

  /** Slots ever used: every key is in a slot below this. */
  get slotsUsed(): number {
    return this.highWater;
  }

  /** Whether `slot` holds a key (expired or not). */
  occupied(slot: number): boolean {
    return this.typeAt(slot) !== FREE_TYPE;
  }

  /** The 32-bit hash of the key in `slot`. */
  hashOf(slot: number): number {
    return this.index.hashOf(slot);
  }

  /** The last access of a slot in seconds of the server clock: now minus the 24-bit clock's idle time. */
  lastAccessSec(slot: number): number {
    return this.nowSec - ((this.nowSec - (this.index.spare(slot) >>> 8)) & LRU_MASK);
  }

  /** An eviction victim for `policy` from `samples` sampled keys (eviction.ts; -1: none). `random()` ∈ [0, 1). */
  sampleVictim(policy: EvictionPolicy, samples: number, random: () => number): number {
    this.settle();
    if (this.index.size === 0) return -1;
    return this.eviction.sample(this, policy, samples, random);
  }

  /** Removes a key for maxmemory (counted in evictedCount and as a write, as Redis's dirty++). */
  evictSlot(slot: number): void {
    this.settle();
    if (this.typeAt(slot) === FREE_TYPE) return;
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
      this.marks.touch(key);
      return;
    }
    this.unlinkSlot(slot);
  }

  private unlinkSlot(slot: number): void {
    if (slot >= this.saveCursor) this.preserve(slot);
    this.index.remove(slot);
    this.typeCounts[this.typeAt(slot)]--;
    this.index.setSpare(slot, FREE_TYPE);
    if (this.blobs.size > 0) this.dropBlob(slot);
    this.freeSlots.push(slot);
  }

  /**
   * WATCH (watch-marks.ts, as Redis's watchForKey): `owner` is marked dirty by the next change of `key`
   * (a binary string). Watching a key twice for the same owner is one watch (null the second time).
   */
  watch(owner: WatchOwner, key: string, nowMs: number): KeyWatch | null {
    const w = this.marks.watch(owner, key, nowMs);
    this.watchedKeys = this.marks.size;
    return w;
  }

  /** Ends watches (EXEC and DISCARD of a small set; big ones go through unwatchOne in slices). */
  unwatch(watches: readonly KeyWatch[]): void {
    for (const w of watches) this.marks.drop(w);
    this.watchedKeys = this.marks.size;
  }

  /** Ends one watch (Server's slice-by-slice release of a client's watches). */
  unwatchOne(w: KeyWatch): void {
    this.marks.drop(w);
    this.watchedKeys = this.marks.size;
  }

  /** Watch index entries (distinct watched keys, whoever watches them): INFO. */
  get watchedKeyCount(): number {
    return this.marks.size;
  }

  /** Whether a watched key, not expired when watched, has expired since (Redis's isWatchedKeyExpired: EXEC). */
  watchedKeyExpired(watches: readonly KeyWatch[], nowMs: number): boolean {
    return this.marks.anyExpired(watches, nowMs);
  }

  /** The slot holding `key`, expired or not, or -1 (no lookup side effects: no expiry, no LRU stamp). */
  presentSlot(key: string): number {
    const n = this.toScratch(key);
    const slot = this.index.find(this.scratch, 0, n, hashKey(this.scratch, 0, n));
    return slot === -1 || this.typeAt(slot) === FREE_TYPE ? -1 : slot;
  }

  /** A change of the key in `slot` (made already): Redis's touchWatchedKey. */
  private touchSlot(slot: number): void {
    this.marks.touch(this.index.keyOf(slot));
  }

  /**
   * Starts a background save's point-in-time view (save-copy.ts) of the keys live at `startMs`. One at
   * a time: a new one replaces one still running (which then gets nothing more); `sink` names it.
   */
  beginSave(startMs: number, sink: SaveSink): void {
    this.settle();
    this.save = new SaveView(this, this.highWater, startMs, sink);
    this.saveCursor = 0;
  }

  /**
   * Walks on up to `maxSlots` slots, handing each key of the view to the sink; false when the walk is
   * complete. Throws if the view of save `sink` was ended (endSave) or replaced: its file would miss keys.
   */
  saveStep(sink: SaveSink, maxSlots: number): boolean {
    const view = this.save;
    if (view === null || view.sink !== sink) throw new Error('background save ended before its walk was complete');
    const stop = view.stopAfter(maxSlots);
    // Past these slots before reading them: the sink's own reads (getBlob) must not preserve them, and
    // nothing else runs until the step returns.
    if (view.source === this) this.saveCursor = stop;
    if (view.walkTo(stop)) return true;
    this.saveCursor = NO_SAVE;
    return false;
  }

  /** Ends the view of save `sink` (done, failed or aborted): writes stop paying for it. */
  endSave(sink: SaveSink): void {
    if (this.save === null || this.save.sink !== sink) return;
    this.save = null;
    this.saveCursor = NO_SAVE;
  }

  /** The first change of a slot the save has not reached (SaveView.preserve). */
  private preserve(slot: number): void {
    this.save!.preserve(this, slot);
  }
}
