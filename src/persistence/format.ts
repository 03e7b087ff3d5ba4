/**
 * The snapshot file format, version 1 (docs/snapshot-format.md is the reference; keep them in step).
 *
 *     header   "CGSNAP\r\n" (8) | format version u32 | reserved u32 (0) | created at, ms since epoch f64
 *     entry*   type u8 (1..254) | flags u8 (bit 0: blob follows) | key length u32 | key bytes |
 *              expireAtMs f64 | A f64 | B f64 | C f64 | [blob length u32 | blob f64 × length]
 *     footer   0xFF u8 | key count u64 | CRC-32 u32 of every byte before it
 *
 * Little-endian throughout. Entries are generic: the keyspace's columns (type, expiry, A, B, C and the
 * optional blob) are written as they are, so a new algorithm (a new KeyType using those columns)
 * needs no format change. The key count is in the footer, not the header, because BGSAVE streams
 * the file while the server keeps changing: it knows the count only at the end.
 *
 * The checksum is node:zlib's CRC-32 (native in Node ≥ 20.15, fed chunk by chunk as the file is
 * written), the same polynomial as zlib, gzip and PNG.
 */
import zlib from 'node:zlib';

export const MAGIC = Buffer.from('CGSNAP\r\n', 'latin1');
export const FORMAT_VERSION = 1;
export const HEADER_BYTES = 24;
/** Type byte that ends the entries and begins the footer. */
export const END_MARKER = 0xff;
export const FOOTER_BYTES = 1 + 8 + 4;
/** type, flags, key length. */
export const ENTRY_PREFIX_BYTES = 6;
/** expireAtMs, A, B, C. */
export const ENTRY_NUMBERS_BYTES = 32;
export const FLAG_BLOB = 1;

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

  constructor(private readonly chunkBytes = 1 << 20) {
    this.buf = Buffer.allocUnsafe(chunkBytes);
    this.view = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
  }

  get length(): number {
    return this.pos;
  }

  add(key: string, type: number, expireAtMs: number, a: number, b: number, c: number, blob: Float64Array | undefined): void {
    const need = ENTRY_PREFIX_BYTES + key.length + ENTRY_NUMBERS_BYTES + (blob === undefined ? 0 : 4 + blob.length * 8);
    if (this.pos + need > this.buf.length) this.growFor(need);
    const v = this.view;
    let p = this.pos;
    v.setUint8(p, type);
    v.setUint8(p + 1, blob === undefined ? 0 : FLAG_BLOB);
    v.setUint32(p + 2, key.length, true);
    p += ENTRY_PREFIX_BYTES;
    // Keys are binary strings, one char per byte: latin1 writes them back byte for byte.
    p += this.buf.write(key, p, 'latin1');
    v.setFloat64(p, expireAtMs, true);
    v.setFloat64(p + 8, a, true);
    v.setFloat64(p + 16, b, true);
    v.setFloat64(p + 24, c, true);
    p += ENTRY_NUMBERS_BYTES;
    if (blob !== undefined) {
      v.setUint32(p, blob.length, true);
      p += 4;
      for (let i = 0; i < blob.length; i++, p += 8) v.setFloat64(p, blob[i], true);
    }
    this.pos = p;
  }

  /** Appends the footer for `keyCount` keys, given the CRC of every byte before this encoder's. */
  addFooter(keyCount: number, crcBefore: number): void {
    if (this.pos + FOOTER_BYTES > this.buf.length) this.growFor(FOOTER_BYTES);
    const start = this.pos;
    this.view.setUint8(start, END_MARKER);
    this.view.setBigUint64(start + 1, BigInt(keyCount), true);
    const crc = crc32(this.buf.subarray(0, start + 9), crcBefore);
    this.view.setUint32(start + 9, crc, true);
    this.pos = start + FOOTER_BYTES;
  }

  /** Returns the bytes encoded so far and starts a new chunk. */
  take(): Buffer {
    const out = this.buf.subarray(0, this.pos);
    this.buf = Buffer.allocUnsafe(this.chunkBytes);
    this.view = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
    this.pos = 0;
    return out;
  }

  private growFor(need: number): void {
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + need));
    this.buf.copy(bigger, 0, 0, this.pos);
    this.buf = bigger;
    this.view = new DataView(bigger.buffer, bigger.byteOffset, bigger.byteLength);
  }
}
