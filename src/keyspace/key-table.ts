/**
 * The keyspace's storage and index: one 64-byte record per slot, and an open-addressing hash table
 * (linear probing, one Int32Array) from key bytes to slot.
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
 * Why not `Map<string, slot>`: a command would have to make a string of its key just to look it up,
 * and each key would cost a string (~32 B), a Map entry with its share of buckets (~28–56 B) and a
 * slot → key array entry, all objects the GC traces and the Map rehashes (and shrinks, when a million
 * keys expire together) in one go. Here a short key costs its record (64 B) and 4–8 bytes of table;
 * the request bytes are hashed and compared in place; deletion shifts the following run back (no
 * tombstones) and the table never shrinks while keys come and go.
 */
import { KeyArena } from './key-arena.js';

/** Grow the table when it would be fuller than this (linear probing stays short below it). */
const MAX_LOAD = 0.7;
/** Bytes per slot record, and their layout (offsets in bytes; Int32 words are offset / 4). */
const RECORD_BYTES = 64;
const HASH = 32 / 4;
const SPARE = 36 / 4;
const LENGTH = 40 / 4;
const REF = 44 / 4;
const INLINE_AT = 44;
/** Keys up to this long are kept in the record. */
const INLINE_BYTES = RECORD_BYTES - INLINE_AT;

export class KeyTable {
  /** Entries: slot + 1, or 0 for empty. Its length is a power of two. */
  private table = new Int32Array(1024);
  private mask = 1023;
  private count = 0;
  private arena = new KeyArena();
  /** The records, seen as bytes, as Int32 (16 per slot) and as Float64 (8 per slot). */
  private bytes: Buffer;
  private words: Int32Array;
  /**
   * The keyspace's four numbers per slot at `state[slot * 8 + 0..3]`. Re-read it after a slot is
   * added: growing replaces it.
   */
  state: Float64Array;

  constructor(slotCapacity: number) {
    const records = new ArrayBuffer(slotCapacity * RECORD_BYTES);
    this.bytes = Buffer.from(records);
    this.words = new Int32Array(records);
    this.state = new Float64Array(records);
  }

  get size(): number {
    return this.count;
  }

  /** Makes room for slots [0, capacity). */
  growSlots(capacity: number): void {
    if (this.bytes.length >= capacity * RECORD_BYTES) return;
    const records = new ArrayBuffer(capacity * RECORD_BYTES);
    const bytes = Buffer.from(records);
    this.bytes.copy(bytes);
    this.bytes = bytes;
    this.words = new Int32Array(records);
    this.state = new Float64Array(records);
  }

  /** The slot holding key `bytes[start, end)` (whose hashKey is `hash`), or −1. */
  find(bytes: Uint8Array, start: number, end: number, hash: number): number {
    const table = this.table;
    const mask = this.mask;
    const words = this.words;
    const len = end - start;
    for (let at = hash & mask; ; at = (at + 1) & mask) {
      const entry = table[at];
      if (entry === 0) return -1;
      const w = (entry - 1) << 4;
      if (words[w + HASH] === hash && words[w + LENGTH] === len && this.keyEquals(entry - 1, len, bytes, start)) return entry - 1;
    }
  }

  /** Whether `slot` holds key `bytes[start, end)` with hash `hash`. */
  holds(slot: number, bytes: Uint8Array, start: number, end: number, hash: number): boolean {
    const len = end - start;
    const w = slot << 4;
    return this.words[w + HASH] === hash && this.words[w + LENGTH] === len && this.keyEquals(slot, len, bytes, start);
  }

  private keyEquals(slot: number, len: number, bytes: Uint8Array, start: number): boolean {
    if (len > INLINE_BYTES) return this.arena.equals(this.words[(slot << 4) + REF], len, bytes, start);
    const mine = this.bytes;
    const at = slot * RECORD_BYTES + INLINE_AT;
    for (let i = 0; i < len; i++) if (mine[at + i] !== bytes[start + i]) return false;
    return true;
  }

  /** Files key `bytes[start, end)` under `slot`; the key must not be in the table. */
  insert(bytes: Uint8Array, start: number, end: number, hash: number, slot: number): void {
    if (this.count + 1 > this.table.length * MAX_LOAD) this.rehash(this.table.length * 2);
    const w = slot << 4;
    const len = end - start;
    this.words[w + HASH] = hash;
    this.words[w + LENGTH] = len;
    if (len > INLINE_BYTES) {
      this.words[w + REF] = this.arena.store(bytes, start, end);
    } else {
      const mine = this.bytes;
      const at = slot * RECORD_BYTES + INLINE_AT;
      for (let i = 0; i < len; i++) mine[at + i] = bytes[start + i];
    }
    this.place(slot);
    this.count++;
  }

  /** Removes the key of `slot` (which must be in the table) and frees its bytes. */
  remove(slot: number): void {
    const table = this.table;
    const mask = this.mask;
    const words = this.words;
    let hole = words[(slot << 4) + HASH] & mask;
    while (table[hole] !== slot + 1) hole = (hole + 1) & mask;
    // Backward-shift deletion: move later entries of the run into the hole when their home position
    // is not between the hole and themselves, so every key stays reachable from its home.
    for (let at = (hole + 1) & mask; table[at] !== 0; at = (at + 1) & mask) {
      const home = words[((table[at] - 1) << 4) + HASH] & mask;
      const stays = hole <= at ? hole < home && home <= at : hole < home || home <= at;
      if (!stays) {
        table[hole] = table[at];
        hole = at;
      }
    }
    table[hole] = 0;
    const len = words[(slot << 4) + LENGTH];
    if (len > INLINE_BYTES) this.arena.release(words[(slot << 4) + REF], len);
    this.count--;
  }

  hashOf(slot: number): number {
    return this.words[(slot << 4) + HASH];
  }

  /** The key of `slot` as a binary string (one char per byte). */
  keyOf(slot: number): string {
    const len = this.words[(slot << 4) + LENGTH];
    if (len > INLINE_BYTES) return this.arena.toString(this.words[(slot << 4) + REF], len);
    const at = slot * RECORD_BYTES + INLINE_AT;
    return this.bytes.toString('latin1', at, at + len);
  }

  keyLength(slot: number): number {
    return this.words[(slot << 4) + LENGTH];
  }

  /** Copies the key of `slot` into `target` at `offset`; returns its length. */
  copyKey(slot: number, target: Buffer, offset: number): number {
    const len = this.words[(slot << 4) + LENGTH];
    if (len > INLINE_BYTES) return this.arena.copy(this.words[(slot << 4) + REF], len, target, offset);
    const at = slot * RECORD_BYTES + INLINE_AT;
    return this.bytes.copy(target, offset, at, at + len);
  }

  /** The spare word of `slot`'s record (the keyspace keeps type and access time there; 0 initially). */
  spare(slot: number): number {
    return this.words[(slot << 4) + SPARE];
  }

  setSpare(slot: number, value: number): void {
    this.words[(slot << 4) + SPARE] = value;
  }

  /** Forgets every key. */
  clear(slotCapacity: number): void {
    this.table = new Int32Array(1024);
    this.mask = 1023;
    this.count = 0;
    this.arena = new KeyArena();
    const records = new ArrayBuffer(slotCapacity * RECORD_BYTES);
    this.bytes = Buffer.from(records);
    this.words = new Int32Array(records);
    this.state = new Float64Array(records);
  }

  private place(slot: number): void {
    const table = this.table;
    const mask = this.mask;
    let at = this.words[(slot << 4) + HASH] & mask;
    while (table[at] !== 0) at = (at + 1) & mask;
    table[at] = slot + 1;
  }

  private rehash(size: number): void {
    const old = this.table;
    this.table = new Int32Array(size);
    this.mask = size - 1;
    for (let i = 0; i < old.length; i++) if (old[i] !== 0) this.place(old[i] - 1);
  }
}
