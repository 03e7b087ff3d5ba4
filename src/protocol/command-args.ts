/**
 * The arguments of one command, as positions in the bytes received: no Buffer and no string is made
 * for an argument unless a command asks for one. Making a Buffer view per argument cost ~60 ns each
 * (a third of the parse time of a CL.THROTTLE); limiter commands read their numbers straight from
 * the bytes and make one string, the key.
 *
 * One instance is reused for every command a connection parses: a command must copy what it keeps
 * (`str()` returns a fresh string; `buffer()` a view of bytes that are never overwritten).
 *
 * Text from an argument: `text(i, max)` is the one way to quote an argument in a reply, a log line
 * or the slow log: it cuts to `max` bytes before converting, so a 512 MiB argument costs 128 bytes
 * there, not a 512 MiB string (or V8's ERR_STRING_TOO_LONG: its strings stop just under 512 MiB,
 * and proto-max-bulk-len allows 512 MiB). Keys are looked up by their bytes (source/start/end) and
 * never need a string. `str(i)` is for the few values that must be whole (a SCAN pattern, a client
 * name); an argument too long for a string makes it throw ArgumentTooLongError, which the dispatcher
 * answers as an error.
 */
import { constants } from 'node:buffer';
import { parseRedisDoubleText, parseRedisIntegerAt, parseRustI64At } from './numbers.js';

/** How much of an argument a message quotes (Redis's `%.128s`). */
export const ARG_TEXT_BYTES = 128;

/** str() of an argument longer than the longest string V8 can make. */
export class ArgumentTooLongError extends Error {
  constructor(readonly bytes: number) {
    super(`argument of ${bytes} bytes is too long`);
  }
}

const NO_BYTES = Buffer.alloc(0);
/** lower() converts at most this much: longer than any keyword, command, option or config name. */
const KEYWORD_MAX_BYTES = 64 * 1024;

export class CommandArgs {
  /** The buffer holding each argument (usually the same one for all of them). */
  private bufs: Buffer[] = [];
  private starts = new Int32Array(16);
  private ends = new Int32Array(16);
  length = 0;
  /**
   * The arguments come from an inline line: the bytes between them are separators and quotes, not
   * RESP headers, so restBytes/restEquals do not compare them (see there).
   */
  private inline = false;

  /**
   * Bytes the argument arrays take beyond their first 16 entries (after a many-argument command,
   * until reset() shrinks them): two int32 and one reference per entry (a client's memory account).
   */
  get extraCapacityBytes(): number {
    const n = Math.max(this.starts.length, this.bufs.length);
    return n > 16 ? (n - 16) * 16 : 0;
  }

  /** Forgets the previous command's arguments (and, after a huge command, the room it took). */
  reset(): void {
    if (this.starts.length > 1024) {
      this.bufs = [];
      this.starts = new Int32Array(16);
      this.ends = new Int32Array(16);
    }
    this.length = 0;
    this.inline = false;
  }

  /** reset() for the arguments of an inline line (splitInline). */
  resetInline(): void {
    this.reset();
    this.inline = true;
  }

  /** Drops the references to the bytes of past commands (the parser calls this once they have all run). */
  release(): void {
    const bufs = this.bufs;
    for (let i = 0; i < bufs.length; i++) bufs[i] = NO_BYTES;
    this.length = 0;
  }

  /** Appends the argument buf[start, end). */
  push(buf: Buffer, start: number, end: number): void {
    const i = this.length;
    if (i === this.starts.length) {
      const starts = new Int32Array(i * 2);
      const ends = new Int32Array(i * 2);
      starts.set(this.starts);
      ends.set(this.ends);
      this.starts = starts;
      this.ends = ends;
    }
    this.bufs[i] = buf;
    this.starts[i] = start;
    this.ends[i] = end;
    this.length = i + 1;
  }

  /** Replaces the arguments with whole buffers (argsOf: tests and internal callers). */
  setBuffers(list: Buffer[]): void {
    this.reset();
    for (const b of list) this.push(b, 0, b.length);
  }

  /** The argument's bytes (a view, allocated on request). */
  buffer(i: number): Buffer {
    return this.bufs[i].subarray(this.starts[i], this.ends[i]);
  }

  /** The whole argument as a binary string (one char per byte); see the class comment for when. */
  str(i: number): string {
    const start = this.starts[i];
    const end = this.ends[i];
    if (end - start > constants.MAX_STRING_LENGTH) throw new ArgumentTooLongError(end - start);
    return this.bufs[i].toString('latin1', start, end);
  }

  /**
   * At most the first `maxBytes` bytes of the argument as a binary string, cut before converting:
   * for quoting an argument (error replies, logs, the slow log). Whether it was cut: byteLength(i).
   */
  text(i: number, maxBytes = ARG_TEXT_BYTES): string {
    const start = this.starts[i];
    return this.bufs[i].toString('latin1', start, Math.min(this.ends[i], start + maxBytes));
  }

  /**
   * The argument lowercased (ASCII), for keyword comparison. Keywords are short: past 64 KiB an
   * argument is no keyword, and only its start is converted (a 512 MiB command name is then simply
   * unknown).
   */
  lower(i: number): string {
    return this.text(i, KEYWORD_MAX_BYTES).toLowerCase();
  }

  /** Lowercased arguments from `from` on (section names, command names). */
  lowerFrom(from: number): string[] {
    const out: string[] = [];
    for (let i = from; i < this.length; i++) out.push(this.lower(i));
    return out;
  }

  /**
   * Where argument `i` lies: bytes [start(i), end(i)) of source(i), the buffer received (for the
   * keyspace, which hashes and compares keys in place).
   */
  source(i: number): Buffer {
    return this.bufs[i];
  }
  start(i: number): number {
    return this.starts[i];
  }
  end(i: number): number {
    return this.ends[i];
  }

  /**
   * A copy of the bytes from argument `from` to the last one, as received (their RESP headers
   * included), or null when they are not in one buffer, come from an inline line (whose
   * separators and quotes could spell the same bytes for other arguments) or there are none. Equal
   * copies mean equal arguments: see restEquals.
   */
  restBytes(from: number): Buffer | null {
    const last = this.length - 1;
    if (from > last || this.inline || this.bufs[from] !== this.bufs[last]) return null;
    return Buffer.from(this.bufs[from].subarray(this.starts[from], this.ends[last]));
  }

  /** Whether the arguments from `from` on are, byte for byte, the ones `restBytes(from)` copied. */
  restEquals(from: number, copy: Buffer): boolean {
    const last = this.length - 1;
    if (from > last || this.inline || this.bufs[from] !== this.bufs[last]) return false;
    const start = this.starts[from];
    const n = this.ends[last] - start;
    if (n !== copy.length) return false;
    const buf = this.bufs[from];
    for (let j = 0; j < n; j++) if (buf[start + j] !== copy[j]) return false;
    return true;
  }

  /** Whether arguments `i` and `j` have the same bytes. */
  argsEqual(i: number, j: number): boolean {
    const n = this.ends[i] - this.starts[i];
    if (n !== this.ends[j] - this.starts[j]) return false;
    const a = this.bufs[i];
    const b = this.bufs[j];
    const ai = this.starts[i];
    const bj = this.starts[j];
    for (let k = 0; k < n; k++) if (a[ai + k] !== b[bj + k]) return false;
    return true;
  }

  byteLength(i: number): number {
    return this.ends[i] - this.starts[i];
  }

  /** Whether argument `i` has exactly the bytes of `other` (an earlier command's name, say). */
  bytesEqual(i: number, other: Buffer): boolean {
    const start = this.starts[i];
    const n = this.ends[i] - start;
    if (n !== other.length) return false;
    const buf = this.bufs[i];
    for (let j = 0; j < n; j++) if (buf[start + j] !== other[j]) return false;
    return true;
  }

  /** Redis's string2ll reading of the argument, or null. */
  redisInteger(i: number): number | null {
    return parseRedisIntegerAt(this.bufs[i], this.starts[i], this.ends[i]);
  }

  /** Rust's i64::from_str reading (redis-cell's), or null. */
  rustI64(i: number): number | null {
    return parseRustI64At(this.bufs[i], this.starts[i], this.ends[i]);
  }

  /** Redis's getDoubleFromObject reading, or null (a number is never longer than 5000 bytes). */
  redisDouble(i: number): number | null {
    if (this.byteLength(i) > 5000) return null;
    return parseRedisDoubleText(this.str(i));
  }
}

/** Arguments made from strings (for tests and internal callers). */
export function argsOf(...values: (string | Buffer)[]): CommandArgs {
  const args = new CommandArgs();
  args.setBuffers(values.map((v) => (typeof v === 'string' ? Buffer.from(v, 'latin1') : v)));
  return args;
}
