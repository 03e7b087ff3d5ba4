/**
 * The journal's record format, version 2 (docs/journal-format.md is the reference; keep them in step).
 * Version 2 added the concurrency key type's records (type 8, leases in the blob): this build reads
 * versions 1 and 2 and starts new files at 2, so a build that knows no leases refuses those. The
 * last incremental file loaded is appended to whatever its version, so a version 1 file may end
 * with records of type 8 after an upgrade: an older build refuses them as an unknown type.
 *
 *     file     "CGJRNL\r\n" (8) | format version u32 | reserved u32 (0) | record*
 *     record   body length varint | CRC-8 u8 of the length's bytes | body | CRC-32 u32 of all before it
 *     body     SET   op 1 | flags << 2, type u8, key length varint, key, expiry, A, B, C, [blob]
 *              DEL   op 2, key length varint, key
 *              FLUSH op 3
 *
 * A record holds the state a key has after the change (not the command that made it), so replaying
 * it needs no clock and gives exactly the same remaining and expiry. Numbers are varints where they
 * are integers (nearly always): the expiry as is, or (flag) as its difference from the expiry of
 * the SET record just before it, written in the same turn; A as its difference from the expiry (in
 * µs for a GCRA TAT), B and C zigzag; a number that is not a safe integer is stored as a raw f64 (its flag
 * bit set). Little-endian throughout. A record is whole or it is not: a torn tail (a crash in the
 * middle of a write) shows as a record that runs past the end of the file or fails its checksum.
 * The length has its own check byte, so a corrupt length in the middle of a file is found as
 * corruption instead of passing for a record that runs past the end (a torn tail, which is cut).
 */
import type { Keyspace } from '../keyspace/keyspace.js';
import { GCRA_KEY } from '../limiters/registry.js';

export const JOURNAL_MAGIC = Buffer.from('CGJRNL\r\n', 'latin1');
export const JOURNAL_VERSION = 2;
/** The oldest version this build reads. */
export const OLDEST_JOURNAL_VERSION = 1;
export const JOURNAL_HEADER_BYTES = 16;

/** The low 2 bits of a record's first byte: its kind; the 6 above: its flags. */
export const OP_BITS = 2;
export const OP_SET = 1;
export const OP_DEL = 2;
export const OP_FLUSH = 3;

export const FLAG_EXPIRY_RAW = 1;
export const FLAG_A_RAW = 2;
export const FLAG_B_RAW = 4;
export const FLAG_C_RAW = 8;
export const FLAG_BLOB = 16;
/** The expiry is a zigzag difference from the previous SET record's (only after one in the same write). */
export const FLAG_EXPIRY_DELTA = 32;

/** Largest key a record carries (Redis's proto-max-bulk-len ceiling is 512 MiB; a key is never longer). */
export const MAX_KEY_BYTES = 512 * 1024 * 1024;
/** 2^51: integers below it in magnitude are varint-encoded, tag bit included, exactly. */
export const VARINT_LIMIT = 2 ** 51;

/**
 * CRC-32 tables for slicing by 8 (Intel's method, as zlib's braided code): table k (k = 0..7, 256
 * entries each) gives the CRC of a byte followed by k zero bytes, so eight bytes are folded in with
 * eight independent lookups instead of eight dependent ones. Table 0 is the classic byte table.
 */
const CRC_TABLES = (() => {
  const t = new Int32Array(256 * 8);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c;
  }
  for (let n = 0; n < 256; n++) {
    let c = t[n];
    for (let k = 1; k < 8; k++) {
      c = t[c & 0xff] ^ (c >>> 8);
      t[k * 256 + n] = c;
    }
  }
  return t;
})();

export const CRC8_TABLE = (() => {
  const t = new Uint8Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 0x80 ? ((c << 1) ^ 0x07) & 0xff : (c << 1) & 0xff;
    t[n] = c;
  }
  return t;
})();

/** CRC-8 (polynomial 0x07) of bytes[start, end): the length's check byte (every error of up to 8 bits is caught). */
export function crc8Range(bytes: Uint8Array, start: number, end: number): number {
  let c = 0;
  for (let i = start; i < end; i++) c = CRC8_TABLE[c ^ bytes[i]];
  return c;
}

/**
 * CRC-32 of bytes[start, end), `view` a DataView of exactly `bytes` (the encoder and the parser keep
 * one): zlib's polynomial (so `zlib.crc32` of the same bytes agrees). In JavaScript: a record is a few
 * dozen bytes, and `zlib.crc32` on a subarray per record measured 2-4× slower than this (the view and
 * the native call cost more than the bytes). Eight bytes per step (slicing by 8), then four, then byte
 * by byte; words loaded four bytes at a time through the view (a byte at a time cost ~10% more).
 */
export function crc32View(view: DataView, bytes: Uint8Array, start: number, end: number): number {
  const t = CRC_TABLES;
  let c = -1;
  let i = start;
  for (const last8 = end - 8; i <= last8; i += 8) {
    const lo = c ^ view.getInt32(i, true);
    const hi = view.getInt32(i + 4, true);
    c =
      t[1792 + (lo & 0xff)] ^
      t[1536 + ((lo >>> 8) & 0xff)] ^
      t[1280 + ((lo >>> 16) & 0xff)] ^
      t[1024 + (lo >>> 24)] ^
      t[768 + (hi & 0xff)] ^
      t[512 + ((hi >>> 8) & 0xff)] ^
      t[256 + ((hi >>> 16) & 0xff)] ^
      t[hi >>> 24];
  }
  // Four more with tables 3..0 (a record's tail is 0-7 bytes: four dependent lookups become one step).
  if (i <= end - 4) {
    const w = c ^ view.getInt32(i, true);
    c = t[768 + (w & 0xff)] ^ t[512 + ((w >>> 8) & 0xff)] ^ t[256 + ((w >>> 16) & 0xff)] ^ t[w >>> 24];
    i += 4;
  }
  for (; i < end; i++) c = t[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}

export function encodeJournalHeader(): Buffer {
  const b = Buffer.alloc(JOURNAL_HEADER_BYTES);
  JOURNAL_MAGIC.copy(b, 0);
  b.writeUInt32LE(JOURNAL_VERSION, 8);
  return b;
}

/** The reference A is encoded against: the expiry, in the unit of A (a GCRA TAT is in µs). */
export function referenceOfA(type: number, expireAtMs: number): number {
  if (type !== GCRA_KEY.type) return expireAtMs;
  const us = expireAtMs * 1000;
  return Number.isSafeInteger(us) ? us : 0;
}

export function isVarintable(x: number): boolean {
  return Number.isInteger(x) && x < VARINT_LIMIT && x > -VARINT_LIMIT;
}

/** What the keyspace tells its journal (Keyspace.journal). */
export interface JournalSink {
  /** The state of `slot` changed (a limiter's write): recorded as it is at the end of the turn. */
  touched(slot: number): void;
  /** The key of `slot` is about to be deleted (DEL, UNLINK, eviction): recorded now, in order. */
  deleting(ks: Keyspace, slot: number): void;
  /** The key of `slot` expired and is about to be removed (lazily, by SCAN or by the active cycle). */
  expiring(ks: Keyspace, slot: number): void;
  /** Every key is about to go (FLUSHDB, FLUSHALL). */
  flushing(): void;
}

export function zigzag(v: number): number {
  return v >= 0 ? v * 2 : -v * 2 - 1;
}

export function unzigzag(z: number): number {
  return z % 2 === 0 ? z / 2 : -(z + 1) / 2;
}

export class JournalError extends Error {
  constructor(
    readonly file: string,
    readonly offset: number,
    readonly problem: string,
  ) {
    super(`journal ${file}: ${problem} at byte offset ${offset}`);
  }
}

/**
 * What a failed open or read of the incremental file `path` is reported as: a missing file is the
 * manifest's problem (JournalError, as any other inconsistency of the set); anything else as it came.
 */
export function incrementalReadError(path: string, e: unknown): unknown {
  if ((e as NodeJS.ErrnoException).code === 'ENOENT') return new JournalError(path, 0, 'an incremental file the manifest names does not exist');
  return e;
}
