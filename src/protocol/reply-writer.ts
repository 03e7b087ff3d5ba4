/**
 * Reply writer: encodes RESP2 or RESP3 replies straight into one growable buffer, so the replies to
 * every command of one read leave in a single socket write. Strings are "binary strings": each char
 * is one byte (latin1), which is how keys and arguments travel through the server.
 *
 * RESP3-only types degrade as Redis degrades them for RESP2 clients: maps become flat arrays,
 * doubles and verbatim strings become bulk strings, booleans become integers, null is `$-1`.
 */
const INITIAL_BYTES = 64 * 1024;
const I64_MAX = '9223372036854775807';
const I64_MIN = '-9223372036854775808';

export type Protocol = 2 | 3;

export class ReplyWriter {
  private buf = Buffer.allocUnsafe(INITIAL_BYTES);
  private len = 0;
  /** The protocol of the client whose replies are being written. */
  proto: Protocol = 2;
  /** Told of every error reply when set (the server's debug log); null otherwise, so errors cost one test. */
  onError: ((text: string) => void) | null = null;
  /**
   * Where the last error reply began, or −1: the dispatcher sets it to −1 before a command runs and
   * reads it after, so a command failed when an error reply starts at its reply's first byte (an
   * error inside an array, as EXEC's elements, does not fail the command). Writing it costs one
   * store per error; nothing reads the reply's bytes to find out.
   */
  errorAt = -1;

  get length(): number {
    return this.len;
  }

  /**
   * The buffer the bytes written since the last take are at the start of (`length` of them), for a
   * reader done with them before the next write (then discard()): take() without its copy.
   */
  bytes(): Buffer {
    return this.buf;
  }

  /** Returns the bytes written since the last take (a copy the socket may keep) and empties the writer. */
  take(): Buffer {
    const out = Buffer.allocUnsafe(this.len);
    this.buf.copy(out, 0, 0, this.len);
    this.len = 0;
    this.errorAt = -1;
    if (this.buf.length > 4 * INITIAL_BYTES * 16) this.buf = Buffer.allocUnsafe(INITIAL_BYTES);
    return out;
  }

  /** Drops what was written since the last take (the replies of a client being disconnected). */
  discard(): void {
    this.len = 0;
    this.errorAt = -1;
    if (this.buf.length > 4 * INITIAL_BYTES * 16) this.buf = Buffer.allocUnsafe(INITIAL_BYTES);
  }

  /** Drops what was written after `offset` (a partial reply of a command that failed). */
  truncate(offset: number): void {
    if (offset < this.len) this.len = offset;
    if (this.errorAt >= offset) this.errorAt = -1;
  }

  /** The code of the error reply written at `offset` (`ERR`, `WRONGTYPE`, ...). */
  errorCodeAt(offset: number): string {
    let end = offset + 1;
    while (end < this.len && this.buf[end] !== 0x20 && this.buf[end] !== 0x0d) end++;
    return this.buf.toString('latin1', offset + 1, end);
  }

  /** The text of the error reply written at `offset`, without its `-` and CRLF (`ERR ...`). */
  errorTextAt(offset: number): string {
    let end = offset + 1;
    while (end < this.len && this.buf[end] !== 0x0d) end++;
    return this.buf.toString('latin1', offset + 1, end);
  }

  private ensure(extra: number): void {
    const need = this.len + extra;
    if (need <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < need) size *= 2;
    const bigger = Buffer.allocUnsafe(size);
    this.buf.copy(bigger, 0, 0, this.len);
    this.buf = bigger;
  }

  /** Writes ASCII/latin1 text with no framing. */
  raw(text: string): void {
    this.ensure(text.length);
    this.len += this.buf.write(text, this.len, 'latin1');
  }

  private byte(b: number): void {
    this.ensure(1);
    this.buf[this.len++] = b;
  }

  private crlf(): void {
    this.ensure(2);
    this.buf[this.len++] = 13;
    this.buf[this.len++] = 10;
  }

  /** Writes a decimal integer (with no framing). Values beyond ±2^63 are clamped as i64 would saturate. */
  private decimal(n: number): void {
    if (n >= 0 && n < 1e15 && Number.isInteger(n)) {
      // The common case, written digit by digit: no string is made for it.
      this.ensure(16);
      if (n < 10) {
        this.buf[this.len++] = 48 + n;
        return;
      }
      let digits = 1;
      for (let p = 10; p <= n; p *= 10) digits++;
      let end = this.len + digits;
      this.len = end;
      while (n >= 10) {
        const q = Math.floor(n / 10);
        this.buf[--end] = 48 + (n - q * 10);
        n = q;
      }
      this.buf[--end] = 48 + n;
      return;
    }
    if (n >= 9223372036854775807) return this.raw(I64_MAX);
    if (n <= -9223372036854775808) return this.raw(I64_MIN);
    // Integers up to 2^53 print exactly; −0 prints as 0, like C's long long.
    this.raw(n === 0 ? '0' : String(n));
  }

  /** `+text` (text must not contain CR or LF). */
  status(text: string): void {
    this.byte(0x2b);
    this.raw(text);
    this.crlf();
  }

  ok(): void {
    this.raw('+OK\r\n');
  }

  /** A whole reply made once (`+QUEUED\r\n`): copied byte by byte, cheaper than encoding a short string. */
  constant(bytes: Uint8Array): void {
    const n = bytes.length;
    this.ensure(n);
    const buf = this.buf;
    let p = this.len;
    for (let i = 0; i < n; i++) buf[p++] = bytes[i];
    this.len = p;
  }

  /**
   * `-CODE message`: `text` carries its code (`ERR ...`, `WRONGTYPE ...`). Like Redis's
   * addReplyError, CR and LF become spaces, so a message quoting user input never breaks framing.
   */
  error(text: string): void {
    if (this.onError !== null) this.onError(text);
    this.errorAt = this.len;
    this.byte(0x2d);
    this.raw(text.replace(/[\r\n]/g, ' '));
    this.crlf();
  }

  integer(n: number): void {
    // Limiter replies are five or six of these per call: the common sizes are written in one go,
    // with one bounds check and no string (−1, every allowed call's retry_after, included).
    if (n > -1e15 && n < 1e15 && Number.isInteger(n)) {
      this.ensure(20);
      const buf = this.buf;
      let p = this.len;
      buf[p++] = 0x3a;
      if (n < 0) {
        buf[p++] = 0x2d;
        n = -n;
      }
      let digits = 1;
      for (let pow = 10; pow <= n; pow *= 10) digits++;
      let end = p + digits;
      p = end;
      while (n >= 10) {
        const q = Math.floor(n / 10);
        buf[--end] = 48 + (n - q * 10);
        n = q;
      }
      buf[--end] = 48 + n;
      buf[p++] = 13;
      buf[p++] = 10;
      this.len = p;
      return;
    }
    this.byte(0x3a);
    this.decimal(n);
    this.crlf();
  }

  /** A bulk string from a binary string (one char = one byte) or raw bytes. */
  bulk(value: string | Buffer): void {
    this.byte(0x24);
    this.decimal(value.length);
    this.crlf();
    if (typeof value === 'string') {
      this.raw(value);
    } else {
      this.ensure(value.length);
      value.copy(this.buf, this.len);
      this.len += value.length;
    }
    this.crlf();
  }

  /** A bulk string of the bytes `src[start, end)` (an argument echoed back, as received: no string made). */
  bulkRange(src: Uint8Array, start: number, end: number): void {
    const n = end - start;
    this.byte(0x24);
    this.decimal(n);
    this.crlf();
    this.ensure(n);
    const buf = this.buf;
    let p = this.len;
    for (let i = start; i < end; i++) buf[p++] = src[i];
    this.len = p;
    this.crlf();
  }

  /** A bulk string from UTF-8 text (help lines, INFO). */
  text(value: string): void {
    this.bulk(Buffer.from(value, 'utf8'));
  }

  /** RESP3 null `_`, RESP2 null bulk `$-1`. */
  nullBulk(): void {
    this.raw(this.proto === 3 ? '_\r\n' : '$-1\r\n');
  }

  /** RESP3 null `_`, RESP2 null array `*-1`. */
  nullArray(): void {
    this.raw(this.proto === 3 ? '_\r\n' : '*-1\r\n');
  }

  arrayHeader(count: number): void {
    this.byte(0x2a);
    this.decimal(count);
    this.crlf();
  }

  /** A map of `count` pairs: RESP3 `%`, RESP2 an array of 2×count. */
  mapHeader(count: number): void {
    if (this.proto === 3) {
      this.byte(0x25);
      this.decimal(count);
    } else {
      this.byte(0x2a);
      this.decimal(count * 2);
    }
    this.crlf();
  }

  /** A set: RESP3 `~`, RESP2 an array. */
  setHeader(count: number): void {
    this.byte(this.proto === 3 ? 0x7e : 0x2a);
    this.decimal(count);
    this.crlf();
  }

  /** RESP3 `,1.5`, RESP2 a bulk string, formatted as Redis formats doubles (%.17g-like, shortest). */
  double(n: number): void {
    const text = Number.isNaN(n) ? 'nan' : n === Infinity ? 'inf' : n === -Infinity ? '-inf' : String(n);
    if (this.proto === 3) {
      this.byte(0x2c);
      this.raw(text);
      this.crlf();
    } else {
      this.bulk(text);
    }
  }

  /** RESP3 `#t`/`#f`, RESP2 `:1`/`:0`. */
  boolean(b: boolean): void {
    if (this.proto === 3) this.raw(b ? '#t\r\n' : '#f\r\n');
    else this.raw(b ? ':1\r\n' : ':0\r\n');
  }

  /** RESP3 verbatim string `=len\r\ntxt:...`, RESP2 a bulk string. Used by INFO, as Redis does. */
  verbatim(value: string, format = 'txt'): void {
    if (this.proto !== 3) return this.text(value);
    const body = Buffer.from(value, 'utf8');
    this.byte(0x3d);
    this.decimal(body.length + 4);
    this.crlf();
    this.raw(format + ':');
    this.ensure(body.length);
    body.copy(this.buf, this.len);
    this.len += body.length;
    this.crlf();
  }

  /** An array of bulk strings (binary strings). */
  bulkArray(values: readonly string[]): void {
    this.arrayHeader(values.length);
    for (const v of values) this.bulk(v);
  }

  /** An array of integers. */
  integerArray(values: ArrayLike<number>): void {
    this.arrayHeader(values.length);
    for (let i = 0; i < values.length; i++) this.integer(values[i]);
  }
}
