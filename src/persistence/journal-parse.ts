/**
 * The journal's reader: records of the format in journal-format.ts (docs/journal-format.md),
 * validated one by one, a torn tail told from corruption.
 */
import { isKeyType } from '../limiters/registry.js';
import { entryProblem } from './format.js';
import {
  crc32View, crc8Range, encodeJournalHeader, FLAG_A_RAW, FLAG_B_RAW, FLAG_BLOB, FLAG_C_RAW, FLAG_EXPIRY_DELTA, FLAG_EXPIRY_RAW,
  JOURNAL_HEADER_BYTES, JOURNAL_MAGIC, JOURNAL_VERSION, JournalError, OLDEST_JOURNAL_VERSION, OP_BITS, OP_DEL, OP_FLUSH, OP_SET, referenceOfA, unzigzag,
} from './journal-format.js';

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
      const header = encodeJournalHeader();
      let whole = buf.equals(header.subarray(0, buf.length));
      // Or of an older version this build reads: its header differs in the version field only.
      header.writeUInt32LE(OLDEST_JOURNAL_VERSION, 8);
      whole ||= buf.equals(header.subarray(0, buf.length));
      if (!whole) this.fail(0, `not a cellgate journal (${buf.length} bytes, not a journal header)`);
      this.result = { records: 0, validBytes: 0, torn: `the file ends inside its ${JOURNAL_HEADER_BYTES}-byte header` };
      return;
    }
    if (!buf.subarray(0, JOURNAL_MAGIC.length).equals(JOURNAL_MAGIC)) this.fail(0, 'not a cellgate journal (the file does not begin with the magic "CGJRNL\\r\\n")');
    const version = this.view.getUint32(8, true);
    if (version < OLDEST_JOURNAL_VERSION || version > JOURNAL_VERSION) {
      this.fail(8, `unsupported journal version ${version} (this build reads versions ${OLDEST_JOURNAL_VERSION} to ${JOURNAL_VERSION})`);
    }
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
      const actual = crc32View(this.view, buf, start, crcAt);
      if (stored !== actual) this.fail(start, `corrupt record ${this.count}: checksum mismatch (stored CRC-32 0x${hex(stored)}, computed 0x${hex(actual)})`);
      this.decode(bodyAt, crcAt, start);
      visit(this.rec, buf);
      this.count++;
      this.p = crcAt + 4;
    }
    return null;
  }

  /**
   * Where the keys of the next records are, read ahead without checking them: a hint, so that the
   * keyspace can warm its cache for them (Keyspace.warmKeys) before next() reads them for real. Up to
   * `max` keys of the SET and DEL records from the cursor on, [starts[i], ends[i]); stops at a FLUSH
   * and at anything that is not plainly a whole record. Returns how many.
   */
  peekKeys(max: number, starts: Int32Array, ends: Int32Array): number {
    const { buf, size } = this;
    let p = this.p;
    let n = 0;
    while (n < max) {
      let bodyLength = 0;
      let mul = 1;
      for (let i = 0; ; i++) {
        if (p >= size || i === 5) return n;
        const byte = buf[p++];
        bodyLength += (byte & 127) * mul;
        mul *= 128;
        if (byte < 128) break;
      }
      let k = p + 1;
      const bodyEnd = k + bodyLength;
      if (bodyLength === 0 || bodyEnd + 4 > size) return n;
      const op = buf[k++] & ((1 << OP_BITS) - 1);
      if (op === OP_SET) k++;
      else if (op !== OP_DEL) return n;
      let keyLength = 0;
      mul = 1;
      for (let i = 0; ; i++) {
        if (k >= bodyEnd || i === 5) return n;
        const byte = buf[k++];
        keyLength += (byte & 127) * mul;
        mul *= 128;
        if (byte < 128) break;
      }
      if (keyLength > bodyEnd - k) return n;
      starts[n] = k;
      ends[n] = k + keyLength;
      n++;
      p = bodyEnd + 4;
    }
    return n;
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
    if (allZero(buf, end, size) && this.view.getUint32(p + bodyLength, true) !== crc32View(this.view, buf, start, p + bodyLength)) {
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
      if (!isKeyType(rec.type)) this.bad(`unknown key type ${rec.type}`);
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
