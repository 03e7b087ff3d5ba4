/**
 * Request parser: bytes from one connection → argument vectors, exactly as Redis's
 * `processMultibulkBuffer` / `processInlineBuffer` (src/networking.c) read them.
 *
 * Why hand-written: the ecosystem's RESP parsers (redis-parser, respjs) parse *replies* for clients.
 * They do not know inline commands with Redis's quoting, the pre-authentication limits, or the
 * server's protocol-error texts and their close-after-reply rule, which clients rely on byte for byte.
 * It is also faster on the hot path: on 16 pipelined CL.THROTTLE, 66 ns per command against
 * redis-parser's 488 (with returnBuffers, reading the multibulk as a reply array), because it records
 * argument positions instead of making a Buffer per argument and reads short arguments in one pass
 * (`npm run bench:micro`).
 *
 * Arguments are positions in the bytes received (CommandArgs, reused for every command of the
 * connection); the bytes themselves are never overwritten, so a Buffer view of one stays valid.
 */
import { splitInlineArgs } from './inline.js';
import { CommandArgs } from './command-args.js';

/** Redis's PROTO_INLINE_MAX_SIZE: the longest inline line or `*`/`$` header line. */
export const INLINE_MAX_BYTES = 64 * 1024;
/** Before AUTH: at most this many arguments of at most this many bytes (Redis 7's limits). */
export const UNAUTH_MAX_ARGS = 10;
export const UNAUTH_MAX_BULK_BYTES = 16 * 1024;
/** Arguments larger than this are gathered chunk by chunk and joined once (Redis: PROTO_MBULK_BIG_ARG). */
const BIG_ARG_BYTES = 32 * 1024;
/**
 * The most arguments one command may have. Redis accepts up to INT_MAX, but each argument costs
 * this server a Buffer view (~100 bytes of heap) on top of its bytes, so a `*2000000000` command
 * trickled in as `$0` bulks would grow the heap by ~100× the bytes received. A million covers any
 * real command (DEL/EXISTS of a million keys); beyond it the count is an "invalid multibulk length",
 * Redis's text for counts out of range. The arguments parsed so far also count toward
 * `client-query-buffer-limit` (as Redis's argv_len_sum), ARG_OVERHEAD_BYTES each.
 */
export const MAX_ARGS = 1024 * 1024;
const ARG_OVERHEAD_BYTES = 64;
/**
 * The most query-buffer bytes (pendingBytes) one allowed pre-auth request takes: UNAUTH_MAX_ARGS
 * arguments of UNAUTH_MAX_BULK_BYTES, their headers and ARG_OVERHEAD_BYTES each (a pre-auth inline
 * line is at most INLINE_MAX_BYTES, less than this).
 */
export const UNAUTH_MAX_REQUEST_BYTES = UNAUTH_MAX_ARGS * (UNAUTH_MAX_BULK_BYTES + ARG_OVERHEAD_BYTES + 64);

const CR = 13;
const LF = 10;
const NUL = 0;
const EMPTY = Buffer.alloc(0);

/** A protocol error: the connection answers `-ERR Protocol error: <message>` and closes. */
export class ProtocolError {
  constructor(readonly message: string) {}
}

export interface ParserLimits {
  /** `proto-max-bulk-len`: the largest `$` length accepted. */
  maxBulkBytes: number;
}

/** The result of one `next()` call: a command, nothing yet, or a protocol error. */
export type ParseResult = CommandArgs | null | ProtocolError;

export class RequestParser {
  private buf: Buffer = EMPTY;
  private pos = 0;
  /** Arguments still expected by the multibulk being read (0 = between commands). */
  private argsLeft = 0;
  /** The command being read; reused for every command (see CommandArgs). */
  private readonly argv = new CommandArgs();
  /** Length of the bulk being read, or -1 while its `$` header is still to come. */
  private bulkLen = -1;
  /** For big arguments: chunks gathered so far and their total size. */
  private bigChunks: Buffer[] | null = null;
  private bigBytes = 0;
  /** Bytes (plus per-argument overhead) of the arguments of the command being read (CLIENT LIST argv-mem). */
  argvBytes = 0;

  constructor(private readonly limits: ParserLimits) {}

  /** Bytes received but not yet turned into commands (the query buffer, for limits and CLIENT LIST). */
  get pendingBytes(): number {
    return this.buf.length - this.pos + this.bigBytes + this.argvBytes;
  }

  /**
   * Bytes this parser keeps for its client: the query buffer (pendingBytes: input not run yet, the
   * arguments of a command being read) and the argument arrays a many-argument command grew (the
   * client's memory account, src/server/client-memory.ts). Bytes of commands already run in this
   * batch are not counted: they go when the batch ends.
   */
  get heldBytes(): number {
    return this.pendingBytes + this.argv.extraCapacityBytes;
  }

  feed(chunk: Buffer): void {
    if (this.bigChunks !== null) {
      this.bigChunks.push(chunk);
      this.bigBytes += chunk.length;
      return;
    }
    if (this.pos >= this.buf.length) {
      this.buf = chunk;
    } else {
      this.buf = Buffer.concat([this.buf.subarray(this.pos), chunk]);
    }
    this.pos = 0;
  }

  /**
   * Parses the next complete command. `authenticated` applies Redis's tighter limits to
   * clients that still have to AUTH. An empty array is never returned: `*0`, `*-1` and blank
   * inline lines are skipped, as Redis does.
   */
  next(authenticated: boolean): ParseResult {
    for (;;) {
      if (this.bigChunks !== null && !this.finishBigArg()) return null;
      if (this.argsLeft === 0) {
        if (this.pos >= this.buf.length) {
          // Everything received has run: keep no reference to it (an idle connection would hold its
          // last read, up to 64 KiB, for as long as it stays connected).
          if (this.buf !== EMPTY) {
            this.buf = EMPTY;
            this.pos = 0;
            this.argv.release();
          }
          return null;
        }
        if (this.buf[this.pos] !== 0x2a /* '*' */) {
          const inline = this.parseInline();
          if (inline === null || inline instanceof ProtocolError) return inline;
          if (inline.length === 0) continue;
          this.argv.setBuffers(inline);
          return this.argv;
        }
        const header = this.parseMultibulkHeader(authenticated);
        if (header !== true) return header;
        if (this.argsLeft === 0) continue; // *0 or *-1: nothing to run
      }
      const done = this.parseBulks(authenticated);
      if (done !== true) return done;
      this.argvBytes = 0;
      return this.argv;
    }
  }

  /** Reads `*<count>\r\n`. Returns true when the header was consumed. */
  private parseMultibulkHeader(authenticated: boolean): true | null | ProtocolError {
    const cr = lineEnd(this.buf, this.pos, CR);
    if (cr === -1) {
      if (this.buf.length - this.pos > INLINE_MAX_BYTES) return new ProtocolError('too big mbulk count string');
      return null;
    }
    if (cr + 1 >= this.buf.length) return null; // wait for the \n
    const count = parseLength(this.buf, this.pos + 1, cr);
    if (count === null || count > MAX_ARGS) return new ProtocolError('invalid multibulk length');
    if (count > UNAUTH_MAX_ARGS && !authenticated) return new ProtocolError('unauthenticated multibulk length');
    this.pos = cr + 2;
    this.argsLeft = count > 0 ? count : 0;
    this.argv.reset();
    this.bulkLen = -1;
    return true;
  }

  /** Reads the `$<len>\r\n<bytes>\r\n` arguments of the current multibulk. */
  private parseBulks(authenticated: boolean): true | null | ProtocolError {
    while (this.argsLeft > 0) {
      if (this.bulkLen === -1 && this.shortBulk()) continue;
      if (this.bulkLen === -1) {
        const cr = lineEnd(this.buf, this.pos, CR);
        if (cr === -1) {
          if (this.buf.length - this.pos > INLINE_MAX_BYTES) return new ProtocolError('too big bulk count string');
          return null;
        }
        if (cr + 1 >= this.buf.length) return null;
        const first = this.buf[this.pos];
        if (first !== 0x24 /* '$' */) {
          return new ProtocolError(`expected '$', got '${String.fromCharCode(first)}'`);
        }
        const len = parseLength(this.buf, this.pos + 1, cr);
        if (len === null || len < 0 || len > this.limits.maxBulkBytes) return new ProtocolError('invalid bulk length');
        if (len > UNAUTH_MAX_BULK_BYTES && !authenticated) return new ProtocolError('unauthenticated bulk length');
        this.pos = cr + 2;
        this.bulkLen = len;
        if (len >= BIG_ARG_BYTES && this.buf.length - this.pos < len + 2) {
          // Gather the rest without re-copying the growing buffer on every read.
          this.bigChunks = [this.buf.subarray(this.pos)];
          this.bigBytes = this.buf.length - this.pos;
          this.buf = EMPTY;
          this.pos = 0;
          return null;
        }
      }
      if (this.buf.length - this.pos < this.bulkLen + 2) return null;
      this.argv.push(this.buf, this.pos, this.pos + this.bulkLen);
      if (this.argsLeft > 1) this.argvBytes += this.bulkLen + ARG_OVERHEAD_BYTES;
      this.pos += this.bulkLen + 2; // Redis skips the trailing \r\n without checking it
      this.bulkLen = -1;
      this.argsLeft--;
    }
    return true;
  }

  /**
   * The common case in one pass: a whole `$<1 to 4 digits>\r\n<bytes>\r\n` argument already in the
   * buffer, its length without a leading zero (so within every limit: under the pre-auth 16 KiB, the
   * big-argument threshold and any proto-max-bulk-len, which is at least 1 MB). Takes the argument and
   * returns true; anything else (a longer or odd header, an incomplete argument) returns false and
   * leaves it to the general path, which applies every rule and error.
   */
  private shortBulk(): boolean {
    const buf = this.buf;
    const pos = this.pos;
    const n = buf.length;
    if (pos + 3 >= n || buf[pos] !== 0x24 /* '$' */) return false;
    let c = buf[pos + 1];
    if (c < 0x31 || c > 0x39) return false;
    let len = c - 0x30;
    let i = pos + 2;
    c = buf[i];
    while (c >= 0x30 && c <= 0x39) {
      if (i === pos + 5) return false; // a fifth digit
      len = len * 10 + (c - 0x30);
      c = ++i < n ? buf[i] : -1;
    }
    if (c !== CR) return false;
    const start = i + 2; // Redis skips the byte after \r without checking it
    if (start + len + 2 > n) return false;
    this.argv.push(buf, start, start + len);
    if (this.argsLeft > 1) this.argvBytes += len + ARG_OVERHEAD_BYTES;
    this.pos = start + len + 2;
    this.argsLeft--;
    return true;
  }

  /** Completes a big argument once all its bytes are in. Returns false while it is incomplete. */
  private finishBigArg(): boolean {
    const chunks = this.bigChunks!;
    if (this.bigBytes < this.bulkLen + 2) return false;
    const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, this.bigBytes);
    this.bigChunks = null;
    this.bigBytes = 0;
    this.buf = all;
    this.pos = 0;
    return true;
  }

  /** Reads one inline line. Returns its arguments (possibly none), null if incomplete, or an error. */
  private parseInline(): Buffer[] | null | ProtocolError {
    const lf = lineEnd(this.buf, this.pos, LF);
    if (lf === -1) {
      if (this.buf.length - this.pos > INLINE_MAX_BYTES) return new ProtocolError('too big inline request');
      return null;
    }
    let end = lf;
    if (end > this.pos && this.buf[end - 1] === CR) end--;
    const line = this.buf.subarray(this.pos, end);
    this.pos = lf + 1;
    const args = splitInlineArgs(line);
    if (args === null) return new ProtocolError('unbalanced quotes in request');
    return args;
  }
}

/**
 * Where the line starting at `from` ends (the index of `byte`), or -1 if it is not there yet. Redis
 * looks for line ends with strchr, which stops at a NUL: a NUL before the line end hides it, so the
 * request stays incomplete until the size limit ends it ("too big ..."), instead of being split at
 * the NUL and running whatever follows. Garbage with a NUL is a desync, not a command
 * (tests/unit/protocol.tcl, "Protocol desync regression test"). Only the line itself is scanned for
 * the NUL, so binary payloads further on cost nothing.
 */
function lineEnd(buf: Buffer, from: number, byte: number): number {
  // A plain loop: header lines are a few bytes long, and a native indexOf per line costs more
  // than scanning them here.
  const n = buf.length;
  for (let i = from; i < n; i++) {
    const c = buf[i];
    if (c === byte) return i;
    if (c === NUL) return -1;
  }
  return -1;
}

/** The digits of the largest magnitudes a signed 64-bit integer holds, positive and negative. */
const I64_MAX_DIGITS = '9223372036854775807';
const I64_MIN_DIGITS = '9223372036854775808';

/**
 * Parses the digits of a `*` or `$` header between `start` and `end` with Redis's `string2ll`
 * rules: optional '-', no '+', no leading zeros, no spaces, and within the signed 64-bit range
 * (`*-9223372036854775809` is not a number, so it is an invalid length rather than "nothing").
 * Returns null if it is not a number.
 */
function parseLength(buf: Buffer, start: number, end: number): number | null {
  if (end <= start) return null;
  let i = start;
  let negative = false;
  if (buf[i] === 0x2d /* '-' */) {
    negative = true;
    i++;
    if (i === end) return null;
  }
  if (end - start === 1 && buf[start] === 0x30) return 0;
  const digits = end - i;
  if (digits > I64_MAX_DIGITS.length) return null;
  const first = buf[i];
  if (first < 0x31 || first > 0x39) return null;
  let value = 0;
  for (let j = i; j < end; j++) {
    const d = buf[j] - 0x30;
    if (d < 0 || d > 9) return null;
    value = value * 10 + d;
  }
  // At 19 digits the float is no longer exact: compare the digits themselves against the limit.
  if (digits === I64_MAX_DIGITS.length && buf.toString('latin1', i, end) > (negative ? I64_MIN_DIGITS : I64_MAX_DIGITS)) return null;
  // Past 2^53 the exact value no longer matters: every caller rejects it as too large (or, when
  // negative, treats it as "no arguments" as Redis does for any count <= 0).
  return negative ? -value : value;
}
