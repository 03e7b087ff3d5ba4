/**
 * The journal's record format, version 1 (docs/journal-format.md is the reference; keep them in step).
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
import { KeyType, type Keyspace } from '../keyspace/keyspace.js';
import { algorithmOfType, GCRA_KEY } from '../limiters/registry.js';
import { entryProblem } from './format.js';

export const JOURNAL_MAGIC = Buffer.from('CGJRNL\r\n', 'latin1');
export const JOURNAL_VERSION = 1;
export const JOURNAL_HEADER_BYTES = 16;

/** The low 2 bits of a record's first byte: its kind; the 6 above: its flags. */
const OP_BITS = 2;
export const OP_SET = 1;
export const OP_DEL = 2;
export const OP_FLUSH = 3;

const FLAG_EXPIRY_RAW = 1;
const FLAG_A_RAW = 2;
const FLAG_B_RAW = 4;
const FLAG_C_RAW = 8;
const FLAG_BLOB = 16;
/** The expiry is a zigzag difference from the previous SET record's (only after one in the same write). */
const FLAG_EXPIRY_DELTA = 32;

/**
 * Where a body is encoded, after its start: room for a one-byte length and its check byte (a body is
 * nearly always below 128 bytes); a longer one is moved right once (finish). LENGTH_RESERVE bytes are
 * reserved in any case (a 5-byte length, its check byte).
 */
const BODY_AT = 2;
const LENGTH_RESERVE = 6;
/** Largest key a record carries (Redis's proto-max-bulk-len ceiling is 512 MiB; a key is never longer). */
export const MAX_KEY_BYTES = 512 * 1024 * 1024;
/** 2^51: integers below it in magnitude are varint-encoded, tag bit included, exactly. */
const VARINT_LIMIT = 2 ** 51;

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

const CRC8_TABLE = (() => {
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
 * CRC-32 of bytes[start, end): zlib's polynomial (so `zlib.crc32` of the same bytes agrees). In
 * JavaScript: a record is a few dozen bytes, and `zlib.crc32` on a subarray per record measured
 * 2-4× slower than this (the view and the native call cost more than the bytes). Eight bytes per
 * step (slicing by 8), then byte by byte.
 */
export function crc32Range(bytes: Uint8Array, start: number, end: number): number {
  const t = CRC_TABLES;
  let c = -1;
  let i = start;
  for (const last8 = end - 8; i <= last8; i += 8) {
    const lo = c ^ (bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) | (bytes[i + 3] << 24));
    c =
      t[1792 + (lo & 0xff)] ^
      t[1536 + ((lo >>> 8) & 0xff)] ^
      t[1280 + ((lo >>> 16) & 0xff)] ^
      t[1024 + (lo >>> 24)] ^
      t[768 + bytes[i + 4]] ^
      t[512 + bytes[i + 5]] ^
      t[256 + bytes[i + 6]] ^
      t[bytes[i + 7]];
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
function referenceOfA(type: number, expireAtMs: number): number {
  if (type !== GCRA_KEY.type) return expireAtMs;
  const us = expireAtMs * 1000;
  return Number.isSafeInteger(us) ? us : 0;
}

function isVarintable(x: number): boolean {
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

/**
 * Collects one event-loop turn's changes and encodes them into a buffer that grows as needed (and
 * is reused). A changed key is encoded once per turn, with its state at the end of the turn
 * (`encodePending`); deletes and flushes are encoded when they happen, so for every key the order
 * of its records is the order of its changes: its SET, if it exists at the end of the turn, comes
 * after every DEL of the turn.
 */
export class JournalRecorder implements JournalSink {
  buf: Buffer = Buffer.allocUnsafe(1 << 16);
  private view = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
  /** Bytes encoded and not yet handed to the file. */
  pos = 0;
  /** Slots changed this turn, each once (`marks`). */
  private pending = new Int32Array(1024);
  private pendingCount = 0;
  private marks = new Uint8Array(1024);
  /** Records encoded since start (INFO, the bench's bytes per record). */
  records = 0;

  constructor(private readonly ks: Keyspace) {}

  /** True when nothing waits to be encoded or written. */
  get empty(): boolean {
    return this.pos === 0 && this.pendingCount === 0;
  }

  touched(slot: number): void {
    if (slot < this.marks.length) {
      if (this.marks[slot] === 1) return;
    } else {
      const bigger = new Uint8Array(Math.max(this.marks.length * 2, slot + 1));
      bigger.set(this.marks);
      this.marks = bigger;
    }
    this.marks[slot] = 1;
    if (this.pendingCount === this.pending.length) {
      const bigger = new Int32Array(this.pending.length * 2);
      bigger.set(this.pending);
      this.pending = bigger;
    }
    this.pending[this.pendingCount++] = slot;
  }

  deleting(ks: Keyspace, slot: number): void {
    const keyLength = ks.keyLength(slot);
    const start = this.reserve(LENGTH_RESERVE + 1 + 5 + keyLength + 4);
    let p = start + BODY_AT;
    this.buf[p++] = OP_DEL;
    p = this.varint(p, keyLength);
    p += ks.copyKey(slot, this.buf, p);
    this.finish(start, p);
  }

  expiring(ks: Keyspace, slot: number): void {
    // Changed in this turn: its new state will not be encoded (the slot is freed), and the journal's
    // last record of it may live longer than it did: record its removal. Otherwise its last record
    // already expires when it did.
    if (slot < this.marks.length && this.marks[slot] === 1) this.deleting(ks, slot);
  }

  flushing(): void {
    // Changes before the flush are gone with it: only keys written after it are recorded.
    for (let i = 0; i < this.pendingCount; i++) this.marks[this.pending[i]] = 0;
    this.pendingCount = 0;
    const start = this.reserve(LENGTH_RESERVE + 1 + 4);
    this.buf[start + BODY_AT] = OP_FLUSH;
    this.finish(start, start + BODY_AT + 1);
  }

  /**
   * The expiry of the last SET encoded by the current encodePending, or NaN: a SET's expiry is
   * written as a difference from it (a few bytes instead of six), never across two calls, since the
   * records of one call are always written together, to one file.
   */
  private prevExpireAtMs = NaN;

  /** Encodes the turn's changed keys as they are now (a slot freed since is skipped: its DEL is recorded). */
  encodePending(): void {
    const ks = this.ks;
    const n = this.pendingCount;
    this.prevExpireAtMs = NaN;
    for (let i = 0; i < n; i++) {
      const slot = this.pending[i];
      this.marks[slot] = 0;
      if (ks.typeOf(slot) !== KeyType.Free) this.encodeSet(ks, slot);
    }
    this.pendingCount = 0;
  }

  /** Forgets everything not yet handed over (the journal was turned off, or is being rebuilt). */
  reset(): void {
    for (let i = 0; i < this.pendingCount; i++) this.marks[this.pending[i]] = 0;
    this.pendingCount = 0;
    this.pos = 0;
  }

  /** The bytes encoded so far; `consumed(n)` drops the first n once they are written. */
  consumed(n: number): void {
    if (n >= this.pos) {
      this.pos = 0;
      return;
    }
    this.buf.copyWithin(0, n, this.pos);
    this.pos -= n;
  }

  private encodeSet(ks: Keyspace, slot: number): void {
    const type = ks.typeOf(slot);
    const keyLength = ks.keyLength(slot);
    const blob = ks.anyBlobs ? ks.getBlob(slot) : undefined;
    const start = this.reserve(LENGTH_RESERVE + 2 + 5 + keyLength + 4 * 9 + 4 + (blob === undefined ? 0 : 5 + blob.length * 9));
    const expireAtMs = ks.expireAtMs(slot);
    const a = ks.getA(slot);
    const b = ks.getB(slot);
    const c = ks.getC(slot);
    const refA = referenceOfA(type, expireAtMs);
    let flags = 0;
    if (!(Number.isSafeInteger(expireAtMs) && expireAtMs >= 0)) flags |= FLAG_EXPIRY_RAW;
    const prev = this.prevExpireAtMs;
    const expiryDelta = expireAtMs - prev;
    if (flags === 0 && isVarintable(expiryDelta)) flags |= FLAG_EXPIRY_DELTA;
    this.prevExpireAtMs = expireAtMs;
    const aDelta = a - refA;
    if (!((flags & FLAG_EXPIRY_RAW) === 0 && isVarintable(a) && isVarintable(aDelta) && refA + aDelta === a)) flags |= FLAG_A_RAW;
    if (!isVarintable(b)) flags |= FLAG_B_RAW;
    if (!isVarintable(c)) flags |= FLAG_C_RAW;
    if (blob !== undefined) flags |= FLAG_BLOB;
    let p = start + BODY_AT;
    const buf = this.buf;
    buf[p++] = OP_SET | (flags << OP_BITS);
    buf[p++] = type;
    p = this.varint(p, keyLength);
    p += ks.copyKey(slot, buf, p);
    if ((flags & FLAG_EXPIRY_RAW) !== 0) p = this.f64(p, expireAtMs);
    else if ((flags & FLAG_EXPIRY_DELTA) !== 0) p = this.varint(p, zigzag(expiryDelta));
    else p = this.varint(p, expireAtMs);
    p = (flags & FLAG_A_RAW) !== 0 ? this.f64(p, a) : this.varint(p, zigzag(aDelta));
    p = (flags & FLAG_B_RAW) !== 0 ? this.f64(p, b) : this.varint(p, zigzag(b));
    p = (flags & FLAG_C_RAW) !== 0 ? this.f64(p, c) : this.varint(p, zigzag(c));
    if (blob !== undefined) {
      p = this.varint(p, blob.length);
      // Each number against the one before it in its column (a log's times, its running totals).
      for (let i = 0; i < blob.length; i++) {
        const v = blob[i];
        const prev = i >= 2 ? blob[i - 2] : 0;
        const d = v - prev;
        if (isVarintable(v) && isVarintable(d) && prev + d === v) {
          p = this.varint(p, zigzag(d) * 2);
        } else {
          buf[p++] = 1;
          p = this.f64(p, v);
        }
      }
    }
    this.finish(start, p);
  }

  /** Makes room for `need` more bytes; returns where they start. */
  private reserve(need: number): number {
    if (this.pos + need > this.buf.length) {
      const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + need));
      this.buf.copy(bigger, 0, 0, this.pos);
      this.buf = bigger;
      this.view = new DataView(bigger.buffer, bigger.byteOffset, bigger.byteLength);
    }
    return this.pos;
  }

  /** Puts the body [start + BODY_AT, end) right behind its length varint and check byte, and appends the CRC. */
  private finish(start: number, end: number): void {
    const bodyLength = end - start - BODY_AT;
    const lengthBytes = varintSize(bodyLength);
    const bodyAt = start + lengthBytes + 1;
    if (bodyAt !== start + BODY_AT) this.buf.copyWithin(bodyAt, start + BODY_AT, end);
    const buf = this.buf;
    if (lengthBytes === 1) {
      buf[start] = bodyLength;
      // The CRC-8 of one byte is its table entry.
      buf[start + 1] = CRC8_TABLE[bodyLength];
    } else {
      this.varint(start, bodyLength);
      buf[start + lengthBytes] = crc8Range(buf, start, start + lengthBytes);
    }
    const crcAt = bodyAt + bodyLength;
    const crc = crc32Range(buf, start, crcAt);
    buf[crcAt] = crc;
    buf[crcAt + 1] = crc >>> 8;
    buf[crcAt + 2] = crc >>> 16;
    buf[crcAt + 3] = crc >>> 24;
    this.pos = crcAt + 4;
    this.records++;
  }

  private varint(p: number, v: number): number {
    const buf = this.buf;
    if (v < 128) {
      buf[p] = v;
      return p + 1;
    }
    // Above 32 bits (an absolute expiry, a TAT) in floating point; then with integer shifts.
    while (v > 0xffffffff) {
      buf[p++] = (v % 128) | 128;
      v = Math.floor(v / 128);
    }
    while (v >= 128) {
      buf[p++] = (v & 127) | 128;
      v >>>= 7;
    }
    buf[p++] = v;
    return p;
  }

  private f64(p: number, v: number): number {
    this.view.setFloat64(p, v, true);
    return p + 8;
  }
}

function zigzag(v: number): number {
  return v >= 0 ? v * 2 : -v * 2 - 1;
}

function unzigzag(z: number): number {
  return z % 2 === 0 ? z / 2 : -(z + 1) / 2;
}

function varintSize(v: number): number {
  let n = 1;
  while (v >= 128) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
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

/** One decoded record; `key` is bytes[keyStart, keyEnd) of the file (copy what you keep). */
export interface JournalRecord {
  op: number;
  type: number;
  keyStart: number;
  keyEnd: number;
  expireAtMs: number;
  a: number;
  b: number;
  c: number;
  blob: Float64Array | undefined;
}

export interface JournalScan {
  /** Records read whole and valid. */
  records: number;
  /** Where the valid records end: the file's size, or where a torn tail begins. */
  validBytes: number;
  /** Why the tail from validBytes on is torn, or null. */
  torn: string | null;
}

/**
 * Reads a journal file record by record, validating each: its length, its checksum, its body's
 * structure and every SET's numbers with the snapshot's rules (format.ts entryProblem), so a record
 * replay accepts is a state the limiters can hold. A problem in the last record of the file, where
 * the record runs past the end, or fails its checksum with nothing but zero bytes after it, or
 * where only zero bytes follow (a crash in the middle of a write), is a torn tail: `next` stops there and reports it
 * (the caller cuts it or refuses). Any other problem is a JournalError.
 */
export class JournalParser {
  readonly size: number;
  private readonly view: DataView;
  private p = JOURNAL_HEADER_BYTES;
  private count = 0;
  private result: JournalScan | null = null;
  /** The expiry of the last SET read (a relative expiry's reference). */
  private prevExpireAtMs = NaN;
  private readonly rec: JournalRecord = { op: 0, type: 0, keyStart: 0, keyEnd: 0, expireAtMs: 0, a: 0, b: 0, c: 0, blob: undefined };

  constructor(
    private readonly buf: Buffer,
    private readonly file: string,
  ) {
    this.size = buf.length;
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    if (buf.length < JOURNAL_HEADER_BYTES) {
      // A file cut inside its header is a torn tail at offset 0 if what is there is a prefix of a header.
      const prefix = encodeJournalHeader().subarray(0, buf.length);
      if (!buf.equals(prefix)) this.fail(0, `not a cellgate journal (${buf.length} bytes, not a journal header)`);
      this.result = { records: 0, validBytes: 0, torn: `the file ends inside its ${JOURNAL_HEADER_BYTES}-byte header` };
      return;
    }
    if (!buf.subarray(0, JOURNAL_MAGIC.length).equals(JOURNAL_MAGIC)) this.fail(0, 'not a cellgate journal (the file does not begin with the magic "CGJRNL\\r\\n")');
    const version = this.view.getUint32(8, true);
    if (version !== JOURNAL_VERSION) this.fail(8, `unsupported journal version ${version} (this build reads version ${JOURNAL_VERSION})`);
    const reserved = this.view.getUint32(12, true);
    if (reserved !== 0) this.fail(12, `corrupt header: reserved field is ${reserved}, expected 0`);
  }

  get offset(): number {
    return this.p;
  }

  private fail(offset: number, problem: string): never {
    throw new JournalError(this.file, offset, problem);
  }

  /**
   * Reads up to `max` records, calling `visit` for each valid one; returns the scan once the file
   * is read (or a torn tail found), else null.
   */
  next(visit: (rec: JournalRecord, buf: Buffer) => void, max: number): JournalScan | null {
    if (this.result !== null) return this.result;
    const { buf, size } = this;
    for (let n = 0; n < max; n++) {
      const start = this.p;
      if (start === size) return (this.result = { records: this.count, validBytes: size, torn: null });
      const torn = this.tornAt(start);
      if (torn !== null) return (this.result = { records: this.count, validBytes: start, torn });
      let p = start;
      let bodyLength = 0;
      let mul = 1;
      for (;;) {
        const byte = buf[p++];
        bodyLength += (byte & 127) * mul;
        mul *= 128;
        if (byte < 128) break;
      }
      const bodyAt = p + 1;
      const crcAt = bodyAt + bodyLength;
      const stored = this.view.getUint32(crcAt, true);
      const actual = crc32Range(buf, start, crcAt);
      if (stored !== actual) this.fail(start, `corrupt record ${this.count}: checksum mismatch (stored CRC-32 0x${hex(stored)}, computed 0x${hex(actual)})`);
      this.decode(bodyAt, crcAt, start);
      visit(this.rec, buf);
      this.count++;
      this.p = crcAt + 4;
    }
    return null;
  }

  /**
   * Why the record at `start` is a torn tail, or null when it is whole (its checksum still to be
   * checked). Torn: its length runs past the end of the file, or its checksum fails and it is the
   * last thing in the file, or everything from `start` on is zero bytes.
   */
  private tornAt(start: number): string | null {
    const { buf, size } = this;
    let p = start;
    let bodyLength = 0;
    let mul = 1;
    for (let i = 0; ; i++) {
      if (p >= size) return `the file ends inside the length of record ${this.count}`;
      if (i === 5) this.fail(start, `corrupt record ${this.count}: its length is not a varint of at most 5 bytes`);
      const byte = buf[p++];
      bodyLength += (byte & 127) * mul;
      mul *= 128;
      if (byte < 128) break;
    }
    if (allZero(buf, start, size)) return `record ${this.count} is zero bytes to the end of the file`;
    if (p >= size) return `the file ends inside the length of record ${this.count}`;
    if (allZero(buf, p, size)) return `record ${this.count} is zero bytes to the end of the file after its length`;
    if (buf[p] !== crc8Range(buf, start, p)) this.fail(start, `corrupt record ${this.count}: its length ${bodyLength} fails its check byte`);
    p++;
    const end = p + bodyLength + 4;
    if (end > size) return `the file ends inside record ${this.count} (${bodyLength}-byte body at offset ${start}, ${size - start} bytes left)`;
    // A record that fails its checksum with nothing but zero bytes after it: the kernel extended the
    // file before the data reached it (a crash in the middle of the write).
    if (allZero(buf, end, size) && this.view.getUint32(p + bodyLength, true) !== crc32Range(buf, start, p + bodyLength)) {
      return `the last record (${this.count}) fails its checksum`;
    }
    return null;
  }

  /** The decoder's cursor, and where the record being decoded starts and its body ends (no closures per record: loads replay millions). */
  private dp = 0;
  private dStart = 0;
  private dEnd = 0;

  private bad(why: string): never {
    return this.fail(this.dStart, `corrupt record ${this.count}: ${why}`);
  }

  private varint(): number {
    const { buf, dEnd } = this;
    let p = this.dp;
    let v = 0;
    let mul = 1;
    for (let i = 0; ; i++) {
      if (p >= dEnd) this.bad('a number runs past the end of the record');
      if (i === 8) this.bad('a varint longer than 8 bytes');
      const byte = buf[p++];
      v += (byte & 127) * mul;
      mul *= 128;
      if (byte < 128) {
        this.dp = p;
        return v;
      }
    }
  }

  private f64(): number {
    const p = this.dp;
    if (p + 8 > this.dEnd) this.bad('a number runs past the end of the record');
    const v = this.view.getFloat64(p, true);
    this.dp = p + 8;
    if (!Number.isFinite(v)) this.bad('a number is not finite');
    return v;
  }

  private decode(p: number, end: number, start: number): void {
    const buf = this.buf;
    const rec = this.rec;
    this.dStart = start;
    this.dEnd = end;
    if (p >= end) this.bad('empty body');
    const head = buf[p++];
    const op = head & ((1 << OP_BITS) - 1);
    const flags = head >>> OP_BITS;
    rec.op = op;
    rec.blob = undefined;
    if (op === OP_FLUSH) {
      if (flags !== 0 || p !== end) this.bad('a FLUSH record with a body');
      return;
    }
    if (op !== OP_SET && op !== OP_DEL) this.bad(`unknown record kind ${op}`);
    if (op === OP_SET) {
      if (p >= end) this.bad('a SET record without its type');
      rec.type = buf[p++];
      if (algorithmOfType(rec.type) === undefined) this.bad(`unknown key type ${rec.type}`);
    } else if (flags !== 0) {
      this.bad('a DEL record with flags');
    }
    this.dp = p;
    const keyLength = this.varint();
    p = this.dp;
    if (keyLength > end - p) this.bad(`key length ${keyLength} runs past the end of the record`);
    rec.keyStart = p;
    p += keyLength;
    rec.keyEnd = p;
    if (op === OP_DEL) {
      if (p !== end) this.bad('bytes after the key of a DEL record');
      return;
    }
    this.dp = p;
    if ((flags & FLAG_EXPIRY_RAW) !== 0 && (flags & FLAG_EXPIRY_DELTA) !== 0) this.bad('both a raw and a relative expiry');
    if ((flags & FLAG_EXPIRY_DELTA) !== 0 && Number.isNaN(this.prevExpireAtMs)) this.bad('a relative expiry without a SET record before it');
    const expireAtMs = (flags & FLAG_EXPIRY_RAW) !== 0 ? this.f64() : (flags & FLAG_EXPIRY_DELTA) !== 0 ? this.prevExpireAtMs + unzigzag(this.varint()) : this.varint();
    const a = (flags & FLAG_A_RAW) !== 0 ? this.f64() : referenceOfA(rec.type, expireAtMs) + unzigzag(this.varint());
    const b = (flags & FLAG_B_RAW) !== 0 ? this.f64() : unzigzag(this.varint());
    const c = (flags & FLAG_C_RAW) !== 0 ? this.f64() : unzigzag(this.varint());
    let blob: Float64Array | undefined;
    if ((flags & FLAG_BLOB) !== 0) {
      const n = this.varint();
      // Each number takes at least one byte: a count beyond the bytes left is corrupt (and never allocated).
      if (n > end - this.dp) this.bad(`blob of ${n} numbers runs past the end of the record`);
      blob = new Float64Array(n);
      for (let i = 0; i < n; i++) {
        const prev = i >= 2 ? blob[i - 2] : 0;
        const tag = this.varint();
        if (tag === 1) blob[i] = this.f64();
        else if (tag % 2 === 0) blob[i] = prev + unzigzag(tag / 2);
        else this.bad('a blob number with an unknown tag');
      }
    }
    if ((flags & ~(FLAG_EXPIRY_RAW | FLAG_A_RAW | FLAG_B_RAW | FLAG_C_RAW | FLAG_BLOB | FLAG_EXPIRY_DELTA)) !== 0) this.bad(`unknown flags 0x${flags.toString(16)}`);
    if (this.dp !== end) this.bad(`${end - this.dp} bytes after the state`);
    const wrong = entryProblem(rec.type, expireAtMs, a, b, c, blob);
    if (wrong !== null) this.bad(wrong);
    rec.expireAtMs = expireAtMs;
    this.prevExpireAtMs = expireAtMs;
    rec.a = a;
    rec.b = b;
    rec.c = c;
    rec.blob = blob;
  }
}

function allZero(buf: Buffer, start: number, end: number): boolean {
  for (let i = start; i < end; i++) if (buf[i] !== 0) return false;
  return true;
}

function hex(n: number): string {
  return n.toString(16).padStart(8, '0');
}

/**
 * Applies records to a keyspace: a SET makes the key hold exactly the recorded state (created, or
 * replaced when it held another type), unless that state has expired by `nowMs` (then the key is
 * gone, as it would be by now); a DEL removes it; a FLUSH empties the keyspace. The keyspace's own
 * journal must be detached meanwhile.
 */
export class JournalReplay {
  sets = 0;
  dels = 0;
  flushes = 0;
  expired = 0;

  constructor(
    private readonly ks: Keyspace,
    private readonly nowMs: number,
  ) {}

  readonly apply = (rec: JournalRecord, buf: Buffer): void => {
    const ks = this.ks;
    switch (rec.op) {
      case OP_FLUSH:
        ks.clear();
        this.flushes++;
        return;
      case OP_DEL:
        ks.deleteKey(buf, rec.keyStart, rec.keyEnd, this.nowMs);
        this.dels++;
        return;
      default: {
        this.sets++;
        let slot = ks.lookupKey(buf, rec.keyStart, rec.keyEnd, this.nowMs);
        if (this.nowMs > rec.expireAtMs) {
          if (slot !== -1) ks.deleteKey(buf, rec.keyStart, rec.keyEnd, this.nowMs);
          this.expired++;
          return;
        }
        if (slot !== -1 && ks.typeOf(slot) !== rec.type) {
          ks.deleteKey(buf, rec.keyStart, rec.keyEnd, this.nowMs);
          slot = -1;
        }
        if (slot === -1) slot = ks.createKey(buf, rec.keyStart, rec.keyEnd, rec.type);
        // A blob to set, or one to drop (the key held a sliding log): no Map lookup when no key has a blob.
        if (rec.blob !== undefined || (ks.anyBlobs && ks.getBlob(slot) !== undefined)) ks.setBlob(slot, rec.blob);
        ks.setState(slot, rec.a, rec.b, rec.c);
        ks.setExpireAtMs(slot, rec.expireAtMs);
      }
    }
  };
}
