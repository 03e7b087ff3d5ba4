/**
 * The journal's record encoder: one event-loop turn's changes, as records of the format in
 * journal-format.ts (docs/journal-format.md).
 */
import { FREE_TYPE, type Keyspace } from '../keyspace/keyspace.js';
import { GCRA_KEY } from '../limiters/registry.js';
import {
  CRC8_TABLE, crc32View, crc8Range, FLAG_A_RAW, FLAG_B_RAW, FLAG_BLOB, FLAG_C_RAW, FLAG_EXPIRY_DELTA, FLAG_EXPIRY_RAW,
  isVarintable, OP_BITS, OP_DEL, OP_FLUSH, OP_SET, VARINT_LIMIT, zigzag, type JournalSink,
} from './journal-format.js';

/** GCRA's type tag: its A (the TAT, in µs) is encoded against the expiry in µs (referenceOfA). */
const GCRA_TYPE = GCRA_KEY.type;

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
  /**
   * Slots changed this turn. Those before `settled` are distinct and marked in `marks`; those after
   * are as `touched` was told, repeats included, until `settle` drops the repeats. Checking the mark
   * at every touch had cost a cache miss per command (the marks are read at random, far from the
   * record the command had just written); a settle reads the marks of many slots in one loop, where
   * their misses overlap.
   */
  private pending = new Int32Array(1024);
  private pendingCount = 0;
  private settled = 0;
  private marks = new Uint8Array(1024);
  /** Records encoded since start (INFO, the bench's bytes per record). */
  records = 0;
  /** What encodePending's first pass read, folded together: kept so that the reads are not dropped as unused. */
  warmed = 0;
  /** The state of the slot being encoded: expiry, A, B, C (Keyspace.readState). */
  private readonly state = new Float64Array(4);

  constructor(private readonly ks: Keyspace) {}

  /** True when nothing waits to be encoded or written. */
  get empty(): boolean {
    return this.pos === 0 && this.pendingCount === 0;
  }

  /** True when changed keys wait to be encoded. */
  get hasPending(): boolean {
    return this.pendingCount !== 0;
  }

  touched(slot: number): void {
    const n = this.pendingCount;
    // The same key again (a hot key, a command that writes twice) costs nothing more.
    if (n !== 0 && this.pending[n - 1] === slot) return;
    if (n === this.pending.length) this.makeRoom();
    this.pending[this.pendingCount++] = slot;
  }

  /** pending is full: its repeats dropped, and grown if it is still more than half full (so it stays within twice the distinct slots). */
  private makeRoom(): void {
    this.settle();
    if (this.pendingCount > this.pending.length >>> 1) {
      const bigger = new Int32Array(this.pending.length * 2);
      bigger.set(this.pending.subarray(0, this.pendingCount));
      this.pending = bigger;
    }
  }

  /** Marks the slots touched since the last settle, dropping those already pending (see pending). */
  private settle(): void {
    const pending = this.pending;
    let marks = this.marks;
    let kept = this.settled;
    for (let i = kept; i < this.pendingCount; i++) {
      const slot = pending[i];
      if (slot >= marks.length) {
        const bigger = new Uint8Array(Math.max(marks.length * 2, slot + 1));
        bigger.set(marks);
        this.marks = marks = bigger;
      }
      if (marks[slot] === 1) continue;
      marks[slot] = 1;
      pending[kept++] = slot;
    }
    this.pendingCount = this.settled = kept;
  }

  /** Forgets the pending slots (their marks cleared). */
  private clearPending(): void {
    const marks = this.marks;
    for (let i = 0; i < this.pendingCount; i++) {
      const slot = this.pending[i];
      if (slot < marks.length) marks[slot] = 0;
    }
    this.pendingCount = this.settled = 0;
  }

  deleting(ks: Keyspace, slot: number): void {
    const keyLength = ks.keyLength(slot);
    const start = this.reserve(LENGTH_RESERVE + 1 + 5 + keyLength + 4);
    let p = start + BODY_AT;
    this.buf[p++] = OP_DEL;
    p = putVarint(this.buf, p, keyLength);
    p += ks.copyKey(slot, this.buf, this.view, p);
    this.finish(start, p);
  }

  expiring(ks: Keyspace, slot: number): void {
    // Changed in this turn: its new state will not be encoded (the slot is freed), and the journal's
    // last record of it may live longer than it did: record its removal. Otherwise its last record
    // already expires when it did.
    this.settle();
    if (slot < this.marks.length && this.marks[slot] === 1) this.deleting(ks, slot);
  }

  flushing(): void {
    // Changes before the flush are gone with it: only keys written after it are recorded.
    this.clearPending();
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
    this.settle();
    const n = this.pendingCount;
    this.prevExpireAtMs = NaN;
    // The records were last read before this turn's socket I/O, and many are out of the cache by now:
    // one read of each first, independent of one another, so that their misses overlap instead of
    // stalling encodeSet one record at a time (that first read was the encoder's hottest line).
    let warm = 0;
    for (let i = 0; i < n; i++) warm |= ks.typeOf(this.pending[i]);
    this.warmed = warm;
    for (let i = 0; i < n; i++) {
      const slot = this.pending[i];
      this.marks[slot] = 0;
      const type = ks.typeOf(slot);
      if (type !== FREE_TYPE) this.encodeSet(ks, slot, type);
    }
    this.pendingCount = this.settled = 0;
  }

  /** Forgets everything not yet handed over (the journal was turned off, or is being rebuilt). */
  reset(): void {
    this.clearPending();
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

  /**
   * One SET record. Written out rather than through the small helpers it used to call (referenceOfA,
   * isVarintable, zigzag, a varint method, the keyspace's four getters): V8 inlines callees only up to
   * a budget of bytecode per optimized function, those used it up, and several stayed calls
   * (`--trace-turbo-inlining`); the same code with the budget raised ran ~35% faster. The usual record
   * (no blob, integers, a short key) now makes three calls: readState, copyKey and crc32View.
   */
  private encodeSet(ks: Keyspace, slot: number, type: number): void {
    const keyLength = ks.keyLength(slot);
    const blob = ks.anyBlobs ? ks.getBlob(slot) : undefined;
    const start = this.reserve(LENGTH_RESERVE + 2 + 5 + keyLength + 4 * 9 + 4 + (blob === undefined ? 0 : 5 + blob.length * 9));
    const state = this.state;
    ks.readState(slot, state);
    const expireAtMs = state[0];
    const a = state[1];
    const b = state[2];
    const c = state[3];
    // referenceOfA and isVarintable (journal-format.ts), written out.
    let refA = expireAtMs;
    if (type === GCRA_TYPE) {
      refA = expireAtMs * 1000;
      if (!Number.isSafeInteger(refA)) refA = 0;
    }
    let flags = 0;
    if (!(Number.isSafeInteger(expireAtMs) && expireAtMs >= 0)) flags |= FLAG_EXPIRY_RAW;
    const expiryDelta = expireAtMs - this.prevExpireAtMs;
    if (flags === 0 && Number.isInteger(expiryDelta) && expiryDelta < VARINT_LIMIT && expiryDelta > -VARINT_LIMIT) flags |= FLAG_EXPIRY_DELTA;
    this.prevExpireAtMs = expireAtMs;
    const aDelta = a - refA;
    if (
      !(
        (flags & FLAG_EXPIRY_RAW) === 0 &&
        Number.isInteger(a) && a < VARINT_LIMIT && a > -VARINT_LIMIT &&
        Number.isInteger(aDelta) && aDelta < VARINT_LIMIT && aDelta > -VARINT_LIMIT &&
        refA + aDelta === a
      )
    ) flags |= FLAG_A_RAW;
    if (!(Number.isInteger(b) && b < VARINT_LIMIT && b > -VARINT_LIMIT)) flags |= FLAG_B_RAW;
    if (!(Number.isInteger(c) && c < VARINT_LIMIT && c > -VARINT_LIMIT)) flags |= FLAG_C_RAW;
    if (blob !== undefined) flags |= FLAG_BLOB;
    const buf = this.buf;
    let p = start + BODY_AT;
    buf[p++] = OP_SET | (flags << OP_BITS);
    buf[p++] = type;
    if (keyLength < 128) buf[p++] = keyLength;
    else p = putVarintLong(buf, p, keyLength);
    p += ks.copyKey(slot, buf, this.view, p);
    if ((flags & FLAG_EXPIRY_RAW) !== 0) p = this.f64(p, expireAtMs);
    else p = putVarint(buf, p, (flags & FLAG_EXPIRY_DELTA) !== 0 ? (expiryDelta >= 0 ? expiryDelta * 2 : -expiryDelta * 2 - 1) : expireAtMs);
    p = (flags & FLAG_A_RAW) !== 0 ? this.f64(p, a) : putVarint(buf, p, aDelta >= 0 ? aDelta * 2 : -aDelta * 2 - 1);
    p = (flags & FLAG_B_RAW) !== 0 ? this.f64(p, b) : putVarint(buf, p, b >= 0 ? b * 2 : -b * 2 - 1);
    p = (flags & FLAG_C_RAW) !== 0 ? this.f64(p, c) : putVarint(buf, p, c >= 0 ? c * 2 : -c * 2 - 1);
    if (blob !== undefined) p = this.encodeBlob(p, blob);
    this.finish(start, p);
  }

  /** A blob's numbers, each against the one before it in its column (a log's times, its running totals). */
  private encodeBlob(p: number, blob: Float64Array): number {
    const buf = this.buf;
    p = putVarint(buf, p, blob.length);
    for (let i = 0; i < blob.length; i++) {
      const v = blob[i];
      const prev = i >= 2 ? blob[i - 2] : 0;
      const d = v - prev;
      if (isVarintable(v) && isVarintable(d) && prev + d === v) {
        p = putVarint(buf, p, zigzag(d) * 2);
      } else {
        buf[p++] = 1;
        p = this.f64(p, v);
      }
    }
    return p;
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
    const buf = this.buf;
    const bodyLength = end - start - BODY_AT;
    let crcAt = end;
    if (bodyLength < 128) {
      buf[start] = bodyLength;
      // The CRC-8 of one byte is its table entry.
      buf[start + 1] = CRC8_TABLE[bodyLength];
    } else {
      const lengthBytes = varintSize(bodyLength);
      const bodyAt = start + lengthBytes + 1;
      buf.copyWithin(bodyAt, start + BODY_AT, end);
      putVarintLong(buf, start, bodyLength);
      buf[start + lengthBytes] = crc8Range(buf, start, start + lengthBytes);
      crcAt = bodyAt + bodyLength;
    }
    const crc = crc32View(this.view, buf, start, crcAt);
    buf[crcAt] = crc;
    buf[crcAt + 1] = crc >>> 8;
    buf[crcAt + 2] = crc >>> 16;
    buf[crcAt + 3] = crc >>> 24;
    this.pos = crcAt + 4;
    this.records++;
  }

  private f64(p: number, v: number): number {
    this.view.setFloat64(p, v, true);
    return p + 8;
  }
}

/**
 * A non-negative integer below 2^53 as a varint at `p`; returns where it ends. One byte (a key's
 * length, a count) here, small enough for V8 to inline it at every call whatever its budget; longer
 * ones (an expiry or a TAT against the one before: usually two bytes) in putVarintLong.
 */
function putVarint(buf: Buffer, p: number, v: number): number {
  if (v < 128) {
    buf[p] = v;
    return p + 1;
  }
  return putVarintLong(buf, p, v);
}

function putVarintLong(buf: Buffer, p: number, v: number): number {
  if (v < 16384) {
    buf[p] = (v & 127) | 128;
    buf[p + 1] = v >>> 7;
    return p + 2;
  }
  // Above 32 bits (an absolute expiry, a TAT) in floating point; then with integer shifts.
  while (v > 0xffffffff) {
    const high = Math.floor(v / 128);
    buf[p++] = (v - high * 128) | 128;
    v = high;
  }
  while (v >= 128) {
    buf[p++] = (v & 127) | 128;
    v >>>= 7;
  }
  buf[p++] = v;
  return p;
}

function varintSize(v: number): number {
  let n = 1;
  while (v >= 128) {
    v = Math.floor(v / 128);
    n++;
  }
  return n;
}
