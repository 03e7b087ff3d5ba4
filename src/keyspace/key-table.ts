/**
 * The keyspace's storage and index: one 64-byte record per slot, in pages of PAGE_SLOTS records, and
 * an open-addressing hash table (linear probing, one Int32Array) from key bytes to slot.
 *
 * A slot's record holds everything a command touches, in one cache line:
 *
 *   bytes  0..31  four float64 for the keyspace: expiry, state A, B, C (see Keyspace)
 *   bytes 32..35  the key's hash
 *   bytes 36..39  a spare word for the keyspace (type and last access)
 *   bytes 40..43  the key's length
 *   bytes 44..63  the key itself when it has at most 20 bytes; otherwise its ref in a KeyArena
 *
 * Keys are looked up at random, so what a lookup costs at 100k+ keys is cache misses, not
 * instructions: one for the table entry and one for the record (the key compared in place, state
 * read and written in the same line). With the key, the hash and the state in separate arrays it was
 * four, and a pipelined CL.THROTTLE over 100k live keys ran a fifth slower than over 1k.
 *
 * A table entry is `slot + 1` in its low 24 bits and a tag above: the top 7 bits of the key's hash
 * (bit 31 stays 0, 0 is an empty position). A probe reads a record only where the tag matches the
 * key's, so walking past other keys' entries costs no record miss but 1 time in 128, where it had
 * cost one per entry passed: at 1M keys and 10M journal records to replay, those misses were most of
 * the load's time. The tag is free (the slot never needs more than 24 bits: MAX_SLOTS bounds the
 * keyspace) and never stale (a key's hash never changes). It holds no bit of a position's home (the
 * low bits, at most 25 of them: MAX_SLOTS / MAX_LOAD < 2^25), so it filters keys of every home alike;
 * what it cannot do is give an entry's home, which growing and deletion's back-shift still read from
 * the record.
 *
 * Why not `Map<string, slot>`: a command would have to make a string of its key just to look it up,
 * and each key would cost a string (~32 B), a Map entry with its share of buckets (~28–56 B) and a
 * slot → key array entry, all objects the GC traces and the Map rehashes (and shrinks, when a million
 * keys expire together) in one go. Here a short key costs its record (64 B) and 4–8 bytes of table;
 * the request bytes are hashed and compared in place; deletion shifts the following run back (no
 * tombstones) and the table never shrinks while keys come and go.
 *
 * Growing never stops the world. Records live in fixed pages (a new page per PAGE_SLOTS slots,
 * nothing copied), and when the table must double, the new table takes inserts at once while the old
 * one's entries move over a little at every write (and at every active-expiry step), as Redis's
 * incremental rehash does: copying a 64 MB record array and rehashing a million entries in one go had
 * stalled the server for 37–78 ms at 1M keys. Lookups meanwhile probe the new table, then the old.
 * With linear probing an entry is reachable only through the run of full positions ("cluster") from
 * its home to it, so entries move a whole cluster at a time: a cluster left in the old table is intact.
 */
import { KeyArena } from './key-arena.js';
import { hashKey } from './key-hash.js';

/** Grow the table when it would be fuller than this (linear probing stays short below it). */
const MAX_LOAD = 0.7;
/** Slots per page of records (256 KiB). */
export const PAGE_SLOTS = 4096;
const PAGE_BITS = 12;
const PAGE_MASK = PAGE_SLOTS - 1;
/** A table entry's low bits hold slot + 1; the hash's tag is above them. */
const SLOT_BITS = 24;
const SLOT_MASK = (1 << SLOT_BITS) - 1;
/** Where the tag (the hash's top bits) starts in the hash. */
const TAG_SHIFT = 25;
/**
 * The most slots a table has: whole pages whose slot + 1 fits in SLOT_BITS (4095 pages, 16,773,120
 * keys, ~1 GiB of records). A key beyond them is refused (KeyspaceFullError), never mis-filed.
 */
export const MAX_SLOTS = Math.floor(SLOT_MASK / PAGE_SLOTS) * PAGE_SLOTS;

/** Thrown by addPage when the keyspace holds MAX_SLOTS keys: the key being created is refused. */
export class KeyspaceFullError extends Error {
  constructor(readonly maxKeys: number) {
    super(`keyspace full: it holds ${maxKeys} keys, the most one cellgate process can`);
  }
}

/** The table entry of `slot` for a key whose hash is `hash`: its tag, then slot + 1. */
function entryOf(hash: number, slot: number): number {
  return ((hash >>> TAG_SHIFT) << SLOT_BITS) | (slot + 1);
}
/** Old-table positions moved per write while the table grows (whole clusters: a few more). */
const MIGRATE_STEP = 128;
/** Bytes per slot record, and their layout (offsets in bytes; Int32 words are offset / 4). */
const RECORD_BYTES = 64;
const HASH = 32 / 4;
const SPARE = 36 / 4;
const LENGTH = 40 / 4;
const REF = 44 / 4;
const INLINE_AT = 44;
/** Keys up to this long are kept in the record. */
const INLINE_BYTES = RECORD_BYTES - INLINE_AT;
/** Whether a record's Int32Array words hold its bytes in little-endian order (copyKey reads a key by words then). */
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

export class KeyTable {
  /** Entries: the tag and slot + 1 (entryOf), or 0 for empty. Its length is a power of two. */
  private table = new Int32Array(1024);
  private mask = 1023;
  /** While the table grows: the previous table, whose entries are moving to `table` (see above). */
  private old: Int32Array | null = null;
  private oldMask = 0;
  /** Where the move started (just after an empty position of `old`) and how many positions it did. */
  private moveFrom = 0;
  private moved = 0;
  private count = 0;
  private arena = new KeyArena();
  /** Record pages, seen as bytes, as Int32 (16 per slot) and as Float64 (8 per slot). */
  private bytePages: Buffer[] = [];
  private wordPages: Int32Array[] = [];
  private statePages: Float64Array[] = [];

  /** `maxSlots` (a multiple of PAGE_SLOTS, at most MAX_SLOTS) is lower only in tests. */
  constructor(
    private readonly migrateStep = MIGRATE_STEP,
    readonly maxSlots = MAX_SLOTS,
  ) {}

  get size(): number {
    return this.count;
  }

  /**
   * Bytes the keys use, counted exactly: a record per key, the index table (both while it grows) and
   * the arena chunks of long keys. Records of free slots in allocated pages are not counted (as an
   * allocator's free space is not): a slot freed by a delete or an eviction is what the next key
   * takes, so this figure falls by a key's cost with every key removed, which is what lets
   * maxmemory converge (src/server/memory.ts).
   */
  get usedBytes(): number {
    return this.count * RECORD_BYTES + (this.table.length + (this.old === null ? 0 : this.old.length)) * 4 + this.arena.bytes;
  }

  /** Slots with a record: [0, capacity). */
  get capacity(): number {
    return this.bytePages.length * PAGE_SLOTS;
  }

  /** Adds a page of records: PAGE_SLOTS more slots; throws KeyspaceFullError at maxSlots. */
  addPage(): void {
    if (this.capacity + PAGE_SLOTS > this.maxSlots) throw new KeyspaceFullError(this.maxSlots);
    const records = new ArrayBuffer(PAGE_SLOTS * RECORD_BYTES);
    this.bytePages.push(Buffer.from(records));
    this.wordPages.push(new Int32Array(records));
    this.statePages.push(new Float64Array(records));
  }

  /** Field 0..3 of the keyspace's numbers in `slot`'s record (see Keyspace). */
  getState(slot: number, field: number): number {
    return this.statePages[slot >>> PAGE_BITS][((slot & PAGE_MASK) << 3) + field];
  }

  /** Fields 0..3 of `slot` into out[0..3]. */
  readState(slot: number, out: Float64Array): void {
    const page = this.statePages[slot >>> PAGE_BITS];
    const at = (slot & PAGE_MASK) << 3;
    out[0] = page[at];
    out[1] = page[at + 1];
    out[2] = page[at + 2];
    out[3] = page[at + 3];
  }

  setState(slot: number, field: number, value: number): void {
    this.statePages[slot >>> PAGE_BITS][((slot & PAGE_MASK) << 3) + field] = value;
  }

  /** Word `w` of `slot`'s record. */
  private word(slot: number, w: number): number {
    return this.wordPages[slot >>> PAGE_BITS][((slot & PAGE_MASK) << 4) + w];
  }

  private setWord(slot: number, w: number, value: number): void {
    this.wordPages[slot >>> PAGE_BITS][((slot & PAGE_MASK) << 4) + w] = value;
  }

  /** The slot holding key `bytes[start, end)` (whose hashKey is `hash`), or −1. */
  find(bytes: Uint8Array, start: number, end: number, hash: number): number {
    const slot = this.findIn(this.table, this.mask, bytes, start, end, hash);
    if (slot !== -1 || this.old === null) return slot;
    return this.findIn(this.old, this.oldMask, bytes, start, end, hash);
  }

  private findIn(table: Int32Array, mask: number, bytes: Uint8Array, start: number, end: number, hash: number): number {
    const len = end - start;
    const tag = (hash >>> TAG_SHIFT) << SLOT_BITS;
    for (let at = hash & mask; ; at = (at + 1) & mask) {
      const entry = table[at];
      if (entry === 0) return -1;
      // Equal tags leave slot + 1 (both are non-negative, so a different tag leaves more than SLOT_MASK).
      const slotPlus1 = entry ^ tag;
      if (slotPlus1 <= SLOT_MASK && this.holdsKey(slotPlus1 - 1, bytes, start, len, hash)) return slotPlus1 - 1;
    }
  }

  /** Hashes of the keys warmKeys was given last (reused). */
  private warmHashes = new Int32Array(64);

  /**
   * Reads what finding the keys `bytes[starts[i], ends[i])`, i < n, will read first (each one's table
   * position at its home, in both tables while growing, and the record of the first entry there with its tag) and
   * nothing else, so that the finds that follow hit the cache. A find waits for its table miss, then
   * for its record miss, and a load replaying records does nothing else meanwhile; here the reads of a
   * whole batch are independent of each other, so the CPU has many misses in flight at once.
   * Returns a value made of what was read (the caller keeps it, so the reads are not dropped).
   */
  warmKeys(bytes: Uint8Array, starts: Int32Array, ends: Int32Array, n: number): number {
    if (n > this.warmHashes.length) this.warmHashes = new Int32Array(n);
    const hashes = this.warmHashes;
    for (let i = 0; i < n; i++) hashes[i] = hashKey(bytes, starts[i], ends[i]);
    let sum = this.warmTable(this.table, this.mask, hashes, n);
    if (this.old !== null) sum ^= this.warmTable(this.old, this.oldMask, hashes, n);
    return sum;
  }

  private warmTable(table: Int32Array, mask: number, hashes: Int32Array, n: number): number {
    let sum = 0;
    for (let i = 0; i < n; i++) sum ^= table[hashes[i] & mask];
    // The table's lines are in the cache now: walk each run to its first tag match, read that record.
    for (let i = 0; i < n; i++) {
      const hash = hashes[i];
      const tag = (hash >>> TAG_SHIFT) << SLOT_BITS;
      for (let at = hash & mask; ; at = (at + 1) & mask) {
        const entry = table[at];
        if (entry === 0) break;
        const slotPlus1 = entry ^ tag;
        if (slotPlus1 <= SLOT_MASK) {
          // The record's first and last words: a page's ArrayBuffer is only 16-byte aligned (malloc), so
          // a record may span two cache lines, and its state and its key are at its two ends. Reading
          // one word only left the other line to miss (10-14% more CPU in a replay).
          const slot = slotPlus1 - 1;
          const words = this.wordPages[slot >>> PAGE_BITS];
          const w = (slot & PAGE_MASK) << 4;
          sum ^= words[w] ^ words[w + RECORD_BYTES / 4 - 1];
          break;
        }
      }
    }
    return sum;
  }

  /** Whether `slot` holds key `bytes[start, end)` with hash `hash`. */
  holds(slot: number, bytes: Uint8Array, start: number, end: number, hash: number): boolean {
    return this.holdsKey(slot, bytes, start, end - start, hash);
  }

  private holdsKey(slot: number, bytes: Uint8Array, start: number, len: number, hash: number): boolean {
    const words = this.wordPages[slot >>> PAGE_BITS];
    const w = (slot & PAGE_MASK) << 4;
    if (words[w + HASH] !== hash || words[w + LENGTH] !== len) return false;
    if (len > INLINE_BYTES) return this.arena.equals(words[w + REF], len, bytes, start);
    const mine = this.bytePages[slot >>> PAGE_BITS];
    const at = (slot & PAGE_MASK) * RECORD_BYTES + INLINE_AT;
    for (let i = 0; i < len; i++) if (mine[at + i] !== bytes[start + i]) return false;
    return true;
  }

  /** Files key `bytes[start, end)` under `slot`; the key must not be in the table. */
  insert(bytes: Uint8Array, start: number, end: number, hash: number, slot: number): void {
    if (this.old !== null) this.moveSome(this.migrateStep);
    if (this.count + 1 > this.table.length * MAX_LOAD) this.startGrowing();
    const words = this.wordPages[slot >>> PAGE_BITS];
    const w = (slot & PAGE_MASK) << 4;
    const len = end - start;
    words[w + HASH] = hash;
    words[w + LENGTH] = len;
    if (len > INLINE_BYTES) {
      words[w + REF] = this.arena.store(bytes, start, end);
    } else {
      const mine = this.bytePages[slot >>> PAGE_BITS];
      const at = (slot & PAGE_MASK) * RECORD_BYTES + INLINE_AT;
      for (let i = 0; i < len; i++) mine[at + i] = bytes[start + i];
    }
    this.place(this.table, this.mask, hash, entryOf(hash, slot));
    this.count++;
  }

  /** Removes the key of `slot` (which must be in the table) and frees its bytes. */
  remove(slot: number): void {
    if (this.old !== null) this.moveSome(this.migrateStep);
    const hash = this.word(slot, HASH);
    if (!this.removeFrom(this.table, this.mask, slot, hash)) this.removeFrom(this.old!, this.oldMask, slot, hash);
    const len = this.word(slot, LENGTH);
    if (len > INLINE_BYTES) this.arena.release(this.word(slot, REF), len);
    this.count--;
  }

  /** Removes `slot`'s entry from `table` if it is there (backward-shift deletion). */
  private removeFrom(table: Int32Array, mask: number, slot: number, hash: number): boolean {
    const entry = entryOf(hash, slot);
    let hole = hash & mask;
    while (table[hole] !== entry) {
      if (table[hole] === 0) return false;
      hole = (hole + 1) & mask;
    }
    // Move later entries of the run into the hole when their home position is not between the hole
    // and themselves, so every key stays reachable from its home (no tombstones). The home is in the
    // hash's low bits, which the tag does not hold: read from the record.
    for (let at = (hole + 1) & mask; table[at] !== 0; at = (at + 1) & mask) {
      const home = this.word((table[at] & SLOT_MASK) - 1, HASH) & mask;
      const stays = hole <= at ? hole < home && home <= at : hole < home || home <= at;
      if (!stays) {
        table[hole] = table[at];
        hole = at;
      }
    }
    table[hole] = 0;
    return true;
  }

  /** Moves on with growing the table, if it is growing (the active expiry cycle calls this too). */
  moveSome(positions: number): void {
    const old = this.old;
    if (old === null) return;
    const mask = this.oldMask;
    let left = positions;
    // Whole clusters only: past the budget, keep going to the next empty position.
    while (this.moved < old.length && (left > 0 || old[(this.moveFrom + this.moved) & mask] !== 0)) {
      const at = (this.moveFrom + this.moved) & mask;
      const entry = old[at];
      if (entry !== 0) {
        this.place(this.table, this.mask, this.word((entry & SLOT_MASK) - 1, HASH), entry);
        old[at] = 0;
      }
      this.moved++;
      left--;
    }
    if (this.moved >= old.length) this.old = null;
  }

  /** Doubles the table: a new empty one takes inserts, the old one's entries move over bit by bit. */
  private startGrowing(): void {
    // A table growing again before it is done moving (it cannot at MAX_LOAD 0.7 and MIGRATE_STEP 128,
    // but a small step in a test could): finish that first.
    if (this.old !== null) this.moveSome(this.old.length);
    const old = this.table;
    let empty = 0;
    while (old[empty] !== 0) empty++;
    this.old = old;
    this.oldMask = this.mask;
    this.moveFrom = (empty + 1) & this.oldMask;
    this.moved = 0;
    this.table = new Int32Array(old.length * 2);
    this.mask = old.length * 2 - 1;
  }

  hashOf(slot: number): number {
    return this.word(slot, HASH);
  }

  /** The key of `slot` as a binary string (one char per byte). */
  keyOf(slot: number): string {
    const len = this.word(slot, LENGTH);
    if (len > INLINE_BYTES) return this.arena.toString(this.word(slot, REF), len);
    const at = (slot & PAGE_MASK) * RECORD_BYTES + INLINE_AT;
    return this.bytePages[slot >>> PAGE_BITS].toString('latin1', at, at + len);
  }

  keyLength(slot: number): number {
    return this.word(slot, LENGTH);
  }

  /** What `slot` adds to usedBytes: its record, and its key's arena chunk when the key is long. */
  slotBytes(slot: number): number {
    const len = this.word(slot, LENGTH);
    return RECORD_BYTES + (len > INLINE_BYTES ? KeyArena.costOf(len) : 0);
  }

  /** Copies the key of `slot` into `target` (seen as `view`, a DataView of exactly `target`) at `offset`; returns its length. */
  copyKey(slot: number, target: Buffer, view: DataView, offset: number): number {
    const len = this.word(slot, LENGTH);
    if (len > INLINE_BYTES) return this.arena.copy(this.word(slot, REF), len, target, offset);
    // By hand: Buffer#copy's argument checks and native call cost more than a short key's bytes (the
    // journal copies a key per changed key per turn). Four bytes per read and per store where the
    // words hold them in order (the key starts at a word, INLINE_AT), the rest byte by byte. The
    // caller has made room: a store past the end of `target` throws.
    const end = offset + len;
    let o = offset;
    if (LITTLE_ENDIAN) {
      const words = this.wordPages[slot >>> PAGE_BITS];
      let w = ((slot & PAGE_MASK) << 4) + INLINE_AT / 4;
      for (const whole = offset + (len & ~3); o < whole; o += 4) view.setInt32(o, words[w++], true);
    }
    const page = this.bytePages[slot >>> PAGE_BITS];
    const at = (slot & PAGE_MASK) * RECORD_BYTES + INLINE_AT - offset;
    for (; o < end; o++) target[o] = page[at + o];
    return len;
  }

  /** The spare word of `slot`'s record (the keyspace keeps type and access time there; 0 initially). */
  spare(slot: number): number {
    return this.word(slot, SPARE);
  }

  setSpare(slot: number, value: number): void {
    this.setWord(slot, SPARE, value);
  }

  /** Forgets every key and every page. */
  clear(): void {
    this.table = new Int32Array(1024);
    this.mask = 1023;
    this.old = null;
    this.count = 0;
    this.arena = new KeyArena();
    this.bytePages = [];
    this.wordPages = [];
    this.statePages = [];
  }

  /** Puts `entry` (entryOf(hash, its slot)) at the first empty position from its home on. */
  private place(table: Int32Array, mask: number, hash: number, entry: number): void {
    let at = hash & mask;
    while (table[at] !== 0) at = (at + 1) & mask;
    table[at] = entry;
  }
}
