/**
 * The snapshot file format, version 2 (docs/snapshot-format.md is the reference; keep them in step).
 * Version 2 added the concurrency key type (leases, src/limiters/concurrency.ts): this build reads
 * versions 1 and 2 and writes 2, so a build that knows no leases refuses a file that may hold some.
 *
 *     header   "CGSNAP\r\n" (8) | format version u32 | reserved u32 (0) | created at, ms since epoch f64
 *     entry*   type u8 (1..254) | flags u8 (bit 0: blob follows) | key length u32 | key bytes |
 *              expireAtMs f64 | A f64 | B f64 | C f64 | [blob length u32 | blob f64 × length]
 *     footer   0xFF u8 | key count u64 | CRC-32 u32 of every byte before it
 *
 * Little-endian throughout. Entries are generic: the keyspace's fields per key (type, expiry, A, B,
 * C and the optional blob) are written as they are, so a new algorithm (a new type tag using those
 * fields) needs no format change. The key count is in the footer, not the header, because BGSAVE streams
 * the file while the server keeps changing: it knows the count only at the end.
 *
 * The checksum is node:zlib's CRC-32 (native in Node ≥ 20.15, fed chunk by chunk as the file is
 * written), the same polynomial as zlib, gzip and PNG.
 */
import zlib from 'node:zlib';
import type { Keyspace } from '../keyspace/keyspace.js';
import { BLOCK_TYPE, blockStateProblem } from '../limiters/block.js';
import { CONCURRENCY_TYPE, leaseStateProblem } from '../limiters/concurrency.js';
import { algorithmOfType, isKeyType } from '../limiters/registry.js';

export const MAGIC = Buffer.from('CGSNAP\r\n', 'latin1');
export const FORMAT_VERSION = 2;
/** The oldest version this build reads. */
export const OLDEST_FORMAT_VERSION = 1;

/**
 * Whether a snapshot of format `version` may hold keys of type tag `type`: concurrency leases came
 * with version 2. (A journal's incremental file of version 1 may hold them: after an upgrade this
 * build appends to the last one it loaded, see journal-parse.ts.)
 */
export function typeKnownIn(type: number, version: number): boolean {
  if (!isKeyType(type)) return false;
  return type !== CONCURRENCY_TYPE || version >= 2;
}
export const HEADER_BYTES = 24;
/** Type byte that ends the entries and begins the footer. */
export const END_MARKER = 0xff;
export const FOOTER_BYTES = 1 + 8 + 4;
/** type, flags, key length. */
export const ENTRY_PREFIX_BYTES = 6;
/** expireAtMs, A, B, C. */
export const ENTRY_NUMBERS_BYTES = 32;
export const FLAG_BLOB = 1;

/**
 * Names cellgate keeps in `dir` besides the snapshot, all under the `.cellgate-` prefix a dbfilename
 * may not have (config.ts): the temp files of saves (writer.ts tempPath: group 1 is the saving pid,
 * then a random hex part; earlier versions wrote a counter there, or nothing) and the lock file held
 * by the running server.
 */
export const TEMP_FILE_PATTERN = /^\.cellgate-temp-(\d+)(?:-[0-9a-f]+)?\.snap$/;
export const LOCK_FILE_NAME = '.cellgate-lock';

export function crc32(data: Uint8Array, previous = 0): number {
  return zlib.crc32(data, previous);
}

export function encodeHeader(createdAtMs: number): Buffer {
  const b = Buffer.alloc(HEADER_BYTES);
  MAGIC.copy(b, 0);
  b.writeUInt32LE(FORMAT_VERSION, 8);
  b.writeUInt32LE(0, 12);
  b.writeDoubleLE(createdAtMs, 16);
  return b;
}

/**
 * Serializes entries into a chunk buffer that grows as needed. `take()` hands the bytes over (the
 * encoder starts a fresh buffer, so the taken one can be written asynchronously).
 */
export class EntryEncoder {
  private buf: Buffer;
  private view: DataView;
  private pos = 0;
  /** Bytes of the current chunk already folded into `crc`. */
  private crcPos = 0;
  /** CRC-32 of every byte encoded so far up to `crcPos` of the current chunk (across chunks). */
  private crc: number;
  private spare: Buffer | undefined;

  constructor(
    private readonly chunkBytes = 1 << 20,
    crcBefore = 0,
  ) {
    this.crc = crcBefore;
    this.buf = Buffer.allocUnsafe(chunkBytes);
    this.view = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
  }

  get length(): number {
    return this.pos;
  }

  /** Appends the entry of a keyspace slot (its key bytes are copied straight from the keyspace). */
  add(ks: Keyspace, slot: number): void {
    const blob = ks.getBlob(slot);
    const keyLength = ks.keyLength(slot);
    const need = ENTRY_PREFIX_BYTES + keyLength + ENTRY_NUMBERS_BYTES + (blob === undefined ? 0 : 4 + blob.length * 8);
    if (this.pos + need > this.buf.length) this.growFor(need);
    const v = this.view;
    let p = this.pos;
    v.setUint8(p, ks.typeOf(slot));
    v.setUint8(p + 1, blob === undefined ? 0 : FLAG_BLOB);
    v.setUint32(p + 2, keyLength, true);
    p += ENTRY_PREFIX_BYTES;
    p += ks.copyKey(slot, this.buf, v, p);
    v.setFloat64(p, ks.expireAtMs(slot), true);
    v.setFloat64(p + 8, ks.getA(slot), true);
    v.setFloat64(p + 16, ks.getB(slot), true);
    v.setFloat64(p + 24, ks.getC(slot), true);
    p += ENTRY_NUMBERS_BYTES;
    if (blob !== undefined) {
      v.setUint32(p, blob.length, true);
      p += 4;
      for (let i = 0; i < blob.length; i++, p += 8) v.setFloat64(p, blob[i], true);
    }
    this.pos = p;
  }

  /**
   * Folds the bytes encoded since the last call into the running CRC. A background save calls it once
   * per slice, so the checksum's cost is spread like the encoding's.
   */
  updateCrc(): void {
    if (this.pos > this.crcPos) this.crc = crc32(this.buf.subarray(this.crcPos, this.pos), this.crc);
    this.crcPos = this.pos;
  }

  /** Appends the footer for `keyCount` keys: end marker, count, and the CRC-32 of every byte before it. */
  addFooter(keyCount: number): void {
    if (this.pos + FOOTER_BYTES > this.buf.length) this.growFor(FOOTER_BYTES);
    const start = this.pos;
    this.view.setUint8(start, END_MARKER);
    this.view.setBigUint64(start + 1, BigInt(keyCount), true);
    this.pos = start + 9;
    this.updateCrc();
    this.view.setUint32(start + 9, this.crc, true);
    this.pos = start + FOOTER_BYTES;
    this.crcPos = this.pos;
  }

  /**
   * Returns the bytes encoded so far (their CRC folded in) and continues in a recycled buffer or a new
   * one. The caller owns the returned bytes until it hands them back with `recycle`.
   */
  take(): Buffer {
    this.updateCrc();
    const out = this.buf.subarray(0, this.pos);
    this.buf = this.spare ?? Buffer.allocUnsafe(this.chunkBytes);
    this.spare = undefined;
    this.view = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
    this.pos = 0;
    this.crcPos = 0;
    return out;
  }

  /** Hands back a chunk from `take` once written, so two buffers alternate without allocating. */
  recycle(chunk: Buffer): void {
    const whole = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.buffer.byteLength - chunk.byteOffset);
    if (whole.length >= this.chunkBytes) this.spare = whole;
  }

  private growFor(need: number): void {
    this.updateCrc();
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + need));
    this.buf.copy(bigger, 0, 0, this.pos);
    this.buf = bigger;
    this.view = new DataView(bigger.buffer, bigger.byteOffset, bigger.byteLength);
  }
}

/** The latest creation time a header may hold: the last instant a JavaScript Date can represent. */
export const MAX_CREATED_AT_MS = 8.64e15;

function isIntIn(x: number, min: number, max: number): boolean {
  return Number.isInteger(x) && x >= min && x <= max;
}

/**
 * Why an entry's numbers cannot be trusted, or null when they are what this build's limiters can
 * have stored. The loader and `cellgate-server check` both apply it (reader.ts), so a file `check`
 * accepts always loads, and a loaded key never makes a command loop for ages or reply a number RESP
 * cannot carry (NaN, a fraction, 1e+300). Every key: expireAtMs an integer ms in [0, 2^53 − 1] (a key
 * may legitimately expire 2^52 ms ahead: a deficit of 2^52 scaled units refilled at 1 per ms), a blob
 * only on an algorithm that stores one; a block (RL.BLOCK, src/limiters/block.ts) holds A = B = C = 0;
 * concurrency leases (src/limiters/concurrency.ts) are checked record by record.
 * The rest is each algorithm's: its entry's `stateProblem` (src/limiters/registry.ts lists them), from
 * what it writes; docs/snapshot-format.md, "Value ranges", lists them all.
 */
export function entryProblem(type: number, expireAtMs: number, a: number, b: number, c: number, blob: Float64Array | undefined): string | null {
  if (!isIntIn(expireAtMs, 0, Number.MAX_SAFE_INTEGER)) return `expiry ${expireAtMs} is not an integer number of ms in [0, 2^53)`;
  if (type === BLOCK_TYPE) return blob !== undefined ? 'a block key carries a blob' : blockStateProblem(a, b, c);
  if (type === CONCURRENCY_TYPE) return leaseStateProblem(expireAtMs, a, b, c, blob);
  const algo = algorithmOfType(type);
  if (blob !== undefined && algo?.hasBlob !== true) return `a ${algo?.typeName} key carries a blob`;
  if (algo === undefined) return `unknown key type ${type}`;
  // Each algorithm's rules live with it (src/limiters/: its stateProblem).
  return algo.stateProblem(expireAtMs, a, b, c, blob);
}

