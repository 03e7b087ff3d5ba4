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
 *
 * The work is linear in the bytes received, however a client cuts them: bytes that arrive while a
 * line or an argument is incomplete are appended to a buffer with room to spare (grown by doubling,
 * or sized once when the argument's length is known) instead of being copied again with everything
 * before them on every read, and the search for a line's end resumes where the previous one stopped.
 * A 64 KiB line sent one byte per read costs about 64 KiB of scanning and 128 KiB of copying, not
 * the 2 GB of rescanning and re-copying it would cost otherwise. `scannedBytes` and `copiedBytes`
 * count that work (the tests check it stays proportional to the input).
 */
import { splitInline, SPLIT_ARG_TOO_BIG, SPLIT_OK, SPLIT_TOO_MANY_ARGS } from './inline.js';
import { CommandArgs } from './command-args.js';

/**
 * Redis's PROTO_INLINE_MAX_SIZE: the longest incomplete inline line or `*`/`$` header line (and,
 * before AUTH, the longest inline line however it arrived).
 */
export const INLINE_MAX_BYTES = 64 * 1024;
/**
 * Before AUTH: at most this many arguments of at most this many bytes (Redis 7's limits for
 * multibulk requests; cellgate applies them to inline lines too, with the same errors).
 */
export const UNAUTH_MAX_ARGS = 10;
export const UNAUTH_MAX_BULK_BYTES = 16 * 1024;
/** Arguments larger than this are gathered chunk by chunk and joined once (Redis: PROTO_MBULK_BIG_ARG). */
const BIG_ARG_BYTES = 32 * 1024;
/**
 * While a big argument arrives, reads smaller than this are copied into one buffer of
 * BIG_TAIL_BYTES rather than kept as one object each: a sender trickling a byte per read would
 * otherwise cost a Buffer (~100 bytes of heap) per byte it sent.
 */
const SMALL_READ_BYTES = 4 * 1024;
const BIG_TAIL_BYTES = 16 * 1024;
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

/**
 * The most room a line still arriving is given: enough to tell a line over INLINE_MAX_BYTES (an
 * error) from one that is not, so a client dripping a line holds at most this much buffer.
 */
const LINE_ROOM_BYTES = INLINE_MAX_BYTES + 2;

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
  /**
   * The bytes received and not yet consumed start at `pos` and end at `end`. `buf` is either a
   * chunk as read (`end` is its length) or a buffer this parser joined pieces into, whose room past
   * `end` later reads fill; bytes before `end` are never written again.
   */
  private buf: Buffer = EMPTY;
  private end = 0;
  private pos = 0;
  /** buf is a buffer this parser joined pieces into (not a chunk as read). */
  private joined = false;
  /**
   * Where the search for the current line's end resumes: bytes [pos, scanAt) hold neither the byte
   * searched for nor a NUL. A line's end is always before the next `pos`, so a value left from an
   * earlier line is at most `pos` and means nothing.
   */
  private scanAt = 0;
  /** Bytes examined while looking for line ends and splitting inline lines (for the linearity tests). */
  scannedBytes = 0;
  /** Bytes copied to join pieces of input (for the linearity tests). */
  copiedBytes = 0;
  /** Arguments still expected by the multibulk being read (0 = between commands). */
  private argsLeft = 0;
  /** The command being read; reused for every command (see CommandArgs). */
  private readonly argv = new CommandArgs();
  /** Length of the bulk being read, or -1 while its `$` header is still to come. */
  private bulkLen = -1;
  /** For big arguments: chunks gathered so far and their total size. */
  private bigChunks: Buffer[] | null = null;
  private bigBytes = 0;
  /** Where small reads of a big argument are gathered (see SMALL_READ_BYTES), and how much it holds. */
  private bigTail: Buffer | null = null;
  private bigTailBytes = 0;
  /** Bytes (plus per-argument overhead) of the arguments of the command being read (CLIENT LIST argv-mem). */
  argvBytes = 0;

  constructor(private readonly limits: ParserLimits) {}

  /** Bytes received but not yet turned into commands (the query buffer, for limits and CLIENT LIST). */
  get pendingBytes(): number {
    return this.end - this.pos + this.bigBytes + this.argvBytes;
  }

  /**
   * Bytes this parser keeps for its client: the query buffer (pendingBytes: input not run yet, the
   * arguments of a command being read), the argument arrays a many-argument command grew (the
   * client's memory account, src/server/client-memory.ts), and the room allocated for input still
   * arriving but not filled yet (a joined buffer's, the big-argument tail's). Bytes of commands
   * already run in this batch are not counted: they go when the batch ends.
   */
  get heldBytes(): number {
    const room = (this.joined ? this.buf.length - this.end : 0) + (this.bigTail === null ? 0 : this.bigTail.length - this.bigTailBytes);
    return this.pendingBytes + this.argv.extraCapacityBytes + room;
  }

  feed(chunk: Buffer): void {
    if (this.bigChunks !== null) {
      this.bigBytes += chunk.length;
      if (chunk.length >= SMALL_READ_BYTES) {
        this.closeBigTail();
        this.bigChunks.push(chunk);
        return;
      }
      if (this.bigTail === null || this.bigTail.length - this.bigTailBytes < chunk.length) {
        this.closeBigTail();
        this.bigTail = Buffer.allocUnsafe(BIG_TAIL_BYTES);
      }
      chunk.copy(this.bigTail, this.bigTailBytes);
      this.bigTailBytes += chunk.length;
      this.copiedBytes += chunk.length;
      return;
    }
    const pending = this.end - this.pos;
    if (pending <= 0) {
      // The usual case: everything before has run, the chunk is used as it is.
      this.buf = chunk;
      this.joined = false;
      this.pos = 0;
      this.end = chunk.length;
      this.scanAt = 0;
      return;
    }
    if (this.buf.length - this.end >= chunk.length) {
      // Room left in a buffer this parser joined: the new bytes are the only ones copied.
      chunk.copy(this.buf, this.end);
      this.end += chunk.length;
      this.copiedBytes += chunk.length;
      return;
    }
    const needed = pending + chunk.length;
    const joined = Buffer.allocUnsafe(this.roomFor(needed));
    this.buf.copy(joined, 0, this.pos, this.end);
    chunk.copy(joined, pending);
    this.copiedBytes += needed;
    this.scanAt = this.scanAt > this.pos ? this.scanAt - this.pos : 0;
    this.buf = joined;
    this.joined = true;
    this.pos = 0;
    this.end = needed;
  }

  /**
   * The size of a buffer joining the `needed` bytes of a request still arriving. An argument of
   * known length gets the room that completes it. Otherwise the first join is exact (the usual case:
   * a read that ended inside a command, completed by the next read); when the bytes of the last join
   * are still all pending (a line growing read by read), the room doubles, so the copies add up to
   * about twice the line, up to LINE_ROOM_BYTES, past which an incomplete line is an error anyway.
   */
  private roomFor(needed: number): number {
    if (this.argsLeft > 0 && this.bulkLen >= 0) return Math.max(needed, this.bulkLen + 2);
    if (!this.joined || this.pos !== 0) return needed;
    return Math.max(needed, Math.min(2 * needed, LINE_ROOM_BYTES));
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
        if (this.pos >= this.end) {
          // Everything received has run: keep no reference to it (an idle connection would hold its
          // last read, up to 64 KiB, for as long as it stays connected).
          if (this.buf !== EMPTY) {
            this.buf = EMPTY;
            this.joined = false;
            this.end = 0;
            this.pos = 0;
            this.scanAt = 0;
            this.argv.release();
          }
          return null;
        }
        if (this.buf[this.pos] !== 0x2a /* '*' */) {
          const inline = this.parseInline(authenticated);
          if (inline !== true) return inline;
          if (this.argv.length === 0) continue;
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
    // The common case in one pass: `*` and one or two digits without a leading zero, then \r and the
    // byte after it (skipped unchecked, as below), all received, within the pre-auth count when it
    // applies. Anything else takes the general path, which applies every rule and error.
    const buf = this.buf;
    const p = this.pos;
    if (p + 3 < this.end) {
      const d1 = buf[p + 1] - 0x30;
      if (d1 >= 1 && d1 <= 9) {
        let count = d1;
        let at = p + 2;
        const d2 = buf[at] - 0x30;
        if (d2 >= 0 && d2 <= 9) {
          count = count * 10 + d2;
          at++;
        }
        if (buf[at] === CR && at + 1 < this.end && (authenticated || count <= UNAUTH_MAX_ARGS)) {
          this.pos = at + 2;
          this.argsLeft = count;
          this.argv.reset();
          this.bulkLen = -1;
          return true;
        }
      }
    }
    const cr = this.lineEnd(CR);
    if (cr === -1) {
      if (this.end - this.pos > INLINE_MAX_BYTES) return new ProtocolError('too big mbulk count string');
      return null;
    }
    if (cr + 1 >= this.end) return null; // wait for the \n
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
        const cr = this.lineEnd(CR);
        if (cr === -1) {
          if (this.end - this.pos > INLINE_MAX_BYTES) return new ProtocolError('too big bulk count string');
          return null;
        }
        if (cr + 1 >= this.end) return null;
        const first = this.buf[this.pos];
        if (first !== 0x24 /* '$' */) {
          return new ProtocolError(`expected '$', got '${String.fromCharCode(first)}'`);
        }
        const len = parseLength(this.buf, this.pos + 1, cr);
        if (len === null || len < 0 || len > this.limits.maxBulkBytes) return new ProtocolError('invalid bulk length');
        if (len > UNAUTH_MAX_BULK_BYTES && !authenticated) return new ProtocolError('unauthenticated bulk length');
        this.pos = cr + 2;
        this.bulkLen = len;
        if (len >= BIG_ARG_BYTES && this.end - this.pos < len + 2) {
          // Gather the rest as a list of the chunks read, joined once when it is complete.
          this.bigChunks = [this.buf.subarray(this.pos, this.end)];
          this.bigBytes = this.end - this.pos;
          this.buf = EMPTY;
          this.joined = false;
          this.end = 0;
          this.pos = 0;
          this.scanAt = 0;
          return null;
        }
      }
      if (this.end - this.pos < this.bulkLen + 2) return null;
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
    const n = this.end;
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
    if (this.bigBytes < this.bulkLen + 2) return false;
    this.closeBigTail();
    const chunks = this.bigChunks!;
    const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, this.bigBytes);
    if (chunks.length > 1) this.copiedBytes += this.bigBytes;
    this.bigChunks = null;
    this.bigBytes = 0;
    this.buf = all;
    this.joined = false;
    this.end = all.length;
    this.pos = 0;
    this.scanAt = 0;
    return true;
  }

  /** Moves the small reads gathered so far into bigChunks (a copy of them if they fill less than half of it). */
  private closeBigTail(): void {
    const tail = this.bigTail;
    if (tail === null) return;
    const used = tail.subarray(0, this.bigTailBytes);
    if (this.bigTailBytes * 2 < tail.length) {
      this.bigChunks!.push(Buffer.from(used));
      this.copiedBytes += this.bigTailBytes;
    } else {
      this.bigChunks!.push(used);
    }
    this.bigTail = null;
    this.bigTailBytes = 0;
  }

  /** Separate buffers holding the input not yet parsed (for the tests). */
  get pendingPieces(): number {
    return (this.bigChunks?.length ?? 0) + (this.bigTail === null ? 0 : 1) + (this.end > this.pos ? 1 : 0);
  }

  /**
   * Reads one inline line into argv. Returns true when a line was read (argv may be empty: a blank
   * line), null if it is incomplete, or an error. Before AUTH the line has the multibulk limits:
   * at most UNAUTH_MAX_ARGS arguments of at most UNAUTH_MAX_BULK_BYTES (the split stops at the first
   * one beyond, with the multibulk path's errors), and at most INLINE_MAX_BYTES however it arrived
   * (Redis bounds only a line still incomplete; one that came whole in a few reads can be longer).
   */
  private parseInline(authenticated: boolean): true | null | ProtocolError {
    const lf = this.lineEnd(LF);
    const start = this.pos;
    if (lf === -1) {
      if (this.end - start > INLINE_MAX_BYTES) return new ProtocolError('too big inline request');
      return null;
    }
    let end = lf;
    if (end > start && this.buf[end - 1] === CR) end--;
    if (!authenticated && end - start > INLINE_MAX_BYTES) return new ProtocolError('too big inline request');
    this.pos = lf + 1;
    this.scannedBytes += end - start;
    const result = authenticated
      ? splitInline(this.buf, start, end, this.argv, MAX_ARGS, Number.MAX_SAFE_INTEGER)
      : splitInline(this.buf, start, end, this.argv, UNAUTH_MAX_ARGS, UNAUTH_MAX_BULK_BYTES);
    if (result === SPLIT_OK) return true;
    if (result === SPLIT_TOO_MANY_ARGS) return new ProtocolError(authenticated ? 'invalid multibulk length' : 'unauthenticated multibulk length');
    if (result === SPLIT_ARG_TOO_BIG) return new ProtocolError('unauthenticated bulk length');
    return new ProtocolError('unbalanced quotes in request');
  }

  /**
   * Where the current line ends (the index of `byte`), or -1 if it is not there yet; the search
   * resumes at scanAt, so a line arriving in pieces is scanned once. Redis looks for line ends with
   * strchr, which stops at a NUL: a NUL before the line end hides it, so the request stays
   * incomplete until the size limit ends it ("too big ..."), instead of being split at the NUL and
   * running whatever follows. Garbage with a NUL is a desync, not a command (tests/unit/protocol.tcl,
   * "Protocol desync regression test"); the search stays at the NUL. Only the line itself is
   * scanned for the NUL, so binary payloads further on cost nothing.
   */
  private lineEnd(byte: number): number {
    // A plain loop: header lines are a few bytes long, and a native indexOf per line costs more
    // than scanning them here.
    const buf = this.buf;
    const n = this.end;
    const from = this.scanAt > this.pos ? this.scanAt : this.pos;
    let i = from;
    while (i < n) {
      const c = buf[i];
      if (c === byte) {
        this.scannedBytes += i + 1 - from;
        this.scanAt = i;
        return i;
      }
      if (c === NUL) break;
      i++;
    }
    this.scannedBytes += i - from;
    this.scanAt = i;
    return -1;
  }
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
