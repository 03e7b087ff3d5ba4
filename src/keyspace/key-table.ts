/**
 * The keyspace's index from key bytes to slot: an open-addressing hash table (linear probing) in one
 * Int32Array, with each slot's key bytes in a KeyArena and a 16-byte record per slot (hash, key
 * length, key ref and a spare word the keyspace uses for type and access time), so a lookup touches
 * one table entry, one record and the key's bytes: three cache lines (keys are looked up at random,
 * and cache misses, not instructions, are what a lookup costs at a million keys).
 *
 * Why not `Map<string, slot>`: a command would have to make a string of its key just to look it up
 * (a tenth of a CL.THROTTLE's CPU with the Map's own hashing), and each key would cost a string
 * (~32 B), a Map entry with its share of buckets (~28–56 B) and a slot → key array entry (8 B), all
 * objects the GC traces and the Map rehashes (and shrinks, when a million keys expire together) in
 * one go. Here a key costs its bytes rounded to 8, 12 bytes of record and 4–8 bytes of table; the
 * request bytes are hashed and compared in place; deletion shifts the following run back (no
 * tombstones) and the table never shrinks while keys come and go.
 */
import { KeyArena } from './key-arena.js';

/** Grow the table when it would be fuller than this (linear probing stays short below it). */
const MAX_LOAD = 0.7;
/** A slot's record: four Int32 words at these offsets from slot * RECORD. */
const RECORD = 4;
const HASH = 0;
const LENGTH = 1;
const REF = 2;
const SPARE = 3;

export class KeyTable {
  /** Entries: slot + 1, or 0 for empty. Its length is a power of two. */
  private table = new Int32Array(1024);
  private mask = 1023;
  private count = 0;
  private arena = new KeyArena();
  /** Per slot, RECORD words from slot * RECORD: hash, key length, key ref, spare. */
  private records: Int32Array;

  constructor(slotCapacity: number) {
    this.records = new Int32Array(slotCapacity * RECORD);
  }

  get size(): number {
    return this.count;
  }

  /** Makes room for slots [0, capacity). */
  growSlots(capacity: number): void {
    if (this.records.length >= capacity * RECORD) return;
    const to = new Int32Array(capacity * RECORD);
    to.set(this.records);
    this.records = to;
  }

  /** The slot holding key `bytes[start, end)` (whose hashKey is `hash`), or −1. */
  find(bytes: Uint8Array, start: number, end: number, hash: number): number {
    const table = this.table;
    const mask = this.mask;
    const records = this.records;
    const len = end - start;
    for (let at = hash & mask; ; at = (at + 1) & mask) {
      const entry = table[at];
      if (entry === 0) return -1;
      const r = (entry - 1) * RECORD;
      if (records[r + HASH] === hash && records[r + LENGTH] === len && this.arena.equals(records[r + REF], len, bytes, start)) return entry - 1;
    }
  }

  /** Whether `slot` holds key `bytes[start, end)` with hash `hash`. */
  holds(slot: number, bytes: Uint8Array, start: number, end: number, hash: number): boolean {
    const len = end - start;
    const r = slot * RECORD;
    return this.records[r + HASH] === hash && this.records[r + LENGTH] === len && this.arena.equals(this.records[r + REF], len, bytes, start);
  }

  /** Files key `bytes[start, end)` under `slot`; the key must not be in the table. */
  insert(bytes: Uint8Array, start: number, end: number, hash: number, slot: number): void {
    if (this.count + 1 > this.table.length * MAX_LOAD) this.rehash(this.table.length * 2);
    const r = slot * RECORD;
    this.records[r + HASH] = hash;
    this.records[r + LENGTH] = end - start;
    this.records[r + REF] = this.arena.store(bytes, start, end);
    this.place(slot);
    this.count++;
  }

  /** Removes the key of `slot` (which must be in the table) and frees its bytes. */
  remove(slot: number): void {
    const table = this.table;
    const mask = this.mask;
    const records = this.records;
    let hole = records[slot * RECORD + HASH] & mask;
    while (table[hole] !== slot + 1) hole = (hole + 1) & mask;
    // Backward-shift deletion: move later entries of the run into the hole when their home position
    // is not between the hole and themselves, so every key stays reachable from its home.
    for (let at = (hole + 1) & mask; table[at] !== 0; at = (at + 1) & mask) {
      const home = records[(table[at] - 1) * RECORD + HASH] & mask;
      const stays = hole <= at ? hole < home && home <= at : hole < home || home <= at;
      if (!stays) {
        table[hole] = table[at];
        hole = at;
      }
    }
    table[hole] = 0;
    this.arena.release(records[slot * RECORD + REF], records[slot * RECORD + LENGTH]);
    this.count--;
  }

  hashOf(slot: number): number {
    return this.records[slot * RECORD + HASH];
  }

  /** The key of `slot` as a binary string (one char per byte). */
  keyOf(slot: number): string {
    return this.arena.toString(this.records[slot * RECORD + REF], this.records[slot * RECORD + LENGTH]);
  }

  keyLength(slot: number): number {
    return this.records[slot * RECORD + LENGTH];
  }

  /** Copies the key of `slot` into `target` at `offset`; returns its length. */
  copyKey(slot: number, target: Buffer, offset: number): number {
    return this.arena.copy(this.records[slot * RECORD + REF], this.records[slot * RECORD + LENGTH], target, offset);
  }

  /** The spare word of `slot`'s record (the keyspace keeps type and access time there; 0 initially). */
  spare(slot: number): number {
    return this.records[slot * RECORD + SPARE];
  }

  setSpare(slot: number, value: number): void {
    this.records[slot * RECORD + SPARE] = value;
  }

  /** Forgets every key. */
  clear(slotCapacity: number): void {
    this.table = new Int32Array(1024);
    this.mask = 1023;
    this.count = 0;
    this.arena = new KeyArena();
    this.records = new Int32Array(slotCapacity * RECORD);
  }

  private place(slot: number): void {
    const table = this.table;
    const mask = this.mask;
    let at = this.records[slot * RECORD + HASH] & mask;
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
