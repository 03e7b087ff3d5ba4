/**
 * The journal's record encoder: one event-loop turn's changes, as records of the format in
 * journal-format.ts (docs/journal-format.md).
 */
import { FREE_TYPE, type Keyspace } from '../keyspace/keyspace.js';
import {
  CRC8_TABLE, crc32Range, crc8Range, FLAG_A_RAW, FLAG_B_RAW, FLAG_BLOB, FLAG_C_RAW, FLAG_EXPIRY_DELTA, FLAG_EXPIRY_RAW,
  isVarintable, OP_BITS, OP_DEL, OP_FLUSH, OP_SET, referenceOfA, zigzag, type JournalSink,
} from './journal-format.js';

/**
 * Where a body is encoded, after its start: room for a one-byte length and its check byte (a body is
 * nearly always below 128 bytes); a longer one is moved right once (finish). LENGTH_RESERVE bytes are
 * reserved in any case (a 5-byte length, its check byte).
 */
const BODY_AT = 2;
const LENGTH_RESERVE = 6;

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
      if (ks.typeOf(slot) !== FREE_TYPE) this.encodeSet(ks, slot);
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

function varintSize(v: number): number {
  let n = 1;
  while (v >= 128) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
}
