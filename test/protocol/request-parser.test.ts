/**
 * The request parser in-process (the wire-level suite is test/server/protocol.test.ts): random
 * commands with arguments of every header width, fed in random pieces, come out byte for byte; the
 * one-pass path for short arguments agrees with the general one at its edges.
 */
import { describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import { ProtocolError, RequestParser } from '../../src/protocol/request-parser.js';

const realAllocUnsafe = Buffer.allocUnsafe;
const realConcat = Buffer.concat;

function encode(args: Buffer[]): Buffer {
  return Buffer.concat([Buffer.from(`*${args.length}\r\n`), ...args.flatMap((a) => [Buffer.from(`$${a.length}\r\n`), a, Buffer.from('\r\n')])]);
}

/** Feeds `bytes` cut at `cuts` and returns every command parsed (as latin1 strings) or the error. */
function parseAll(bytes: Buffer, cuts: number[]): (string[] | string)[] {
  const parser = new RequestParser({ maxBulkBytes: 512 * 1024 * 1024 });
  const out: (string[] | string)[] = [];
  const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  let from = 0;
  for (const to of [...points, bytes.length]) {
    if (to < from) continue;
    parser.feed(bytes.subarray(from, to));
    from = to;
    for (;;) {
      const argv = parser.next(true);
      if (argv === null) break;
      if (argv instanceof ProtocolError) return [...out, argv.message];
      const args: string[] = [];
      for (let i = 0; i < argv.length; i++) args.push(argv.str(i));
      out.push(args);
    }
  }
  return out;
}

const argument = fc.oneof(
  fc.uint8Array({ maxLength: 12 }),
  fc.constantFrom(0, 9, 10, 99, 100, 999, 1000, 9999, 10_000, 40_000).map((n) => new Uint8Array(n).fill(0x61)),
);

describe('RequestParser', () => {
  it('returns every argument byte for byte, however the bytes are split', () => {
    fc.assert(
      fc.property(fc.array(fc.array(argument, { minLength: 1, maxLength: 6 }), { minLength: 1, maxLength: 5 }), fc.array(fc.nat(), { maxLength: 8 }), (commands, cuts) => {
        const args = commands.map((c) => c.map((a) => Buffer.from(a)));
        const bytes = Buffer.concat(args.map(encode));
        expect(parseAll(bytes, cuts)).toEqual(args.map((c) => c.map((a) => a.toString('latin1'))));
      }),
      { numRuns: 300, seed: 20261130 },
    );
  });

  it('applies the general rules at the edges of the short-argument path', () => {
    const one = (text: string): (string[] | string)[] => parseAll(Buffer.from(text, 'latin1'), []);
    expect(one('*1\r\n$4\r\nPING\r\n')).toEqual([['PING']]);
    expect(one('*1\r\n$04\r\nPING\r\n')).toEqual(['invalid bulk length']);
    expect(one('*1\r\n$0\r\n\r\n')).toEqual([['']]);
    expect(one('*1\r\n$-1\r\n')).toEqual(['invalid bulk length']);
    expect(one('*1\r\nx4\r\nPING\r\n')).toEqual(["expected '$', got 'x'"]);
    // Like Redis, the byte after \r and the two after the payload are skipped unchecked.
    expect(one('*2\r\n$1\rXa..$5\r\nhello\r\n')).toEqual([['a', 'hello']]);
    // Five digits take the general path and the same answer.
    expect(one(`*1\r\n$10000\r\n${'b'.repeat(10_000)}\r\n`)).toEqual([['b'.repeat(10_000)]]);
    // The one-pass `*` header: one or two digits; the rest, and the rules, on the general path.
    expect(one('*01\r\n$4\r\nPING\r\n')).toEqual(['invalid multibulk length']);
    expect(one('*1\rX$4\r\nPING\r\n')).toEqual([['PING']]);
    expect(one(`*12\r\n${'$1\r\na\r\n'.repeat(12)}`)).toEqual([Array(12).fill('a')]);
    expect(one(`*100\r\n${'$1\r\nb\r\n'.repeat(100)}`)).toEqual([Array(100).fill('b')]);
    expect(one('*1 \r\n')).toEqual(['invalid multibulk length']);
    const preAuth = (text: string): string | number | null => {
      const parser = new RequestParser({ maxBulkBytes: 1024 * 1024 });
      parser.feed(Buffer.from(text, 'latin1'));
      const r = parser.next(false);
      return r instanceof ProtocolError ? r.message : r === null ? null : r.length;
    };
    expect(preAuth(`*10\r\n${'$1\r\na\r\n'.repeat(10)}`)).toBe(10);
    expect(preAuth('*11\r\n')).toBe('unauthenticated multibulk length');
    expect(preAuth('*99\r\n')).toBe('unauthenticated multibulk length');
    // Incomplete at every point: nothing until the last byte.
    const text = '*2\r\n$3\r\nabc\r\n$12\r\nhello world!\r\n';
    for (let cut = 0; cut < text.length; cut++) expect(parseAll(Buffer.from(text), [cut])).toEqual([['abc', 'hello world!']]);
  });
});

/**
 * Linear work, however the bytes are cut: an incomplete line or argument sent one byte per read
 * costs a bounded multiple of its size (the parser's own counters of bytes scanned for line ends or
 * split, and of bytes copied to join pieces), and so do the buffers it allocates (counted here
 * around Buffer.allocUnsafe and Buffer.concat, independently of those counters). Before, every read
 * re-copied and rescanned everything pending: a 60 KB line cost ~1.8 GB of each.
 */
describe('RequestParser work is linear in the bytes received', () => {
  const BIG = 512 * 1024 * 1024;

  /** Feeds `bytes` one byte per feed, then `tail` whole; returns what came out and the work done. */
  function drip(bytes: Buffer, tail: Buffer, authenticated = true): { results: (string[] | string)[]; scanned: number; copied: number; allocated: number } {
    const parser = new RequestParser({ maxBulkBytes: BIG });
    const results: (string[] | string)[] = [];
    let allocated = 0;
    let inConcat = false; // Buffer.concat may allocate through Buffer.allocUnsafe: count it once
    const allocUnsafe = vi.spyOn(Buffer, 'allocUnsafe').mockImplementation((size: number) => {
      if (!inConcat) allocated += size;
      return realAllocUnsafe(size);
    });
    const concat = vi.spyOn(Buffer, 'concat').mockImplementation((list: readonly Uint8Array[], total?: number) => {
      inConcat = true;
      try {
        const out = realConcat(list, total);
        allocated += out.length;
        return out;
      } finally {
        inConcat = false;
      }
    });
    const take = (): void => {
      for (;;) {
        const r = parser.next(authenticated);
        if (r === null) return;
        if (r instanceof ProtocolError) {
          results.push(r.message);
          return;
        }
        const args: string[] = [];
        for (let i = 0; i < r.length; i++) args.push(r.text(i, 32));
        results.push(args);
      }
    };
    try {
      for (let i = 0; i < bytes.length; i++) {
        parser.feed(bytes.subarray(i, i + 1));
        take();
      }
      if (tail.length > 0) {
        parser.feed(tail);
        take();
      }
    } finally {
      allocUnsafe.mockRestore();
      concat.mockRestore();
    }
    return { results, scanned: parser.scannedBytes, copied: parser.copiedBytes, allocated };
  }

  const N = 60_000;
  const cases: [string, Buffer, Buffer, (string[] | string)[]][] = [
    ['an inline line', Buffer.from('ECHO ' + 'a'.repeat(N)), Buffer.from('\r\n'), [['ECHO', 'a'.repeat(32)]]],
    ['a `*` header (too big at 64 KiB)', Buffer.from('*' + '1'.repeat(N)), Buffer.from('1'.repeat(6000)), ['too big mbulk count string']],
    ['a `$` header (too big at 64 KiB)', Buffer.from('*1\r\n$' + '1'.repeat(N)), Buffer.from('1'.repeat(6000)), ['too big bulk count string']],
    ['an argument under the big-argument size', Buffer.from(`*2\r\n$4\r\nECHO\r\n$30000\r\n${'b'.repeat(30_000)}`), Buffer.from('\r\n'), [['ECHO', 'b'.repeat(32)]]],
    ['a big argument', Buffer.from(`*2\r\n$4\r\nECHO\r\n$${N}\r\n${'c'.repeat(N)}`), Buffer.from('\r\n'), [['ECHO', 'c'.repeat(32)]]],
    ['a line behind a NUL (never complete)', Buffer.from('PI\0NG' + 'd'.repeat(N)), Buffer.from('\r\n' + 'd'.repeat(6000)), ['too big inline request']],
  ];
  it.each(cases)('%s sent one byte per read', (_name, bytes, tail, expected) => {
    const { results, scanned, copied, allocated } = drip(bytes, tail);
    expect(results).toEqual(expected);
    const total = bytes.length + tail.length;
    expect(allocated).toBeLessThanOrEqual(4 * total);
    expect(scanned).toBeLessThanOrEqual(3 * total);
    expect(copied).toBeLessThanOrEqual(4 * total);
  });

  it('a big argument sent one byte per read is held in a few buffers, not one per read; bigger reads are kept as they came', () => {
    const parser = new RequestParser({ maxBulkBytes: BIG });
    const value = Buffer.alloc(100_000, 0x65);
    const whole = Buffer.concat([value, Buffer.alloc(8192, 0x66), Buffer.from('x')]);
    parser.feed(Buffer.from(`*2\r\n$4\r\nECHO\r\n$${whole.length}\r\n`));
    expect(parser.next(true)).toBeNull();
    for (let i = 0; i < value.length; i++) {
      parser.feed(value.subarray(i, i + 1));
      if (i % 10_000 === 0) expect(parser.next(true)).toBeNull();
    }
    // 100,000 reads of one byte: held in 16 KiB pieces.
    expect(parser.pendingPieces).toBeLessThanOrEqual(Math.ceil(value.length / (16 * 1024)) + 1);
    // Counted as the bytes received (and the ECHO before it), not as the 16 KiB pieces.
    expect(parser.pendingBytes - value.length).toBeGreaterThanOrEqual(0);
    expect(parser.pendingBytes - value.length).toBeLessThan(100);
    parser.feed(Buffer.alloc(8192, 0x66)); // a read of 8 KiB is kept as it came
    parser.feed(Buffer.from('x'));
    parser.feed(Buffer.from('\r\n*1\r\n$4\r\nPING\r\n'));
    const argv = parser.next(true);
    if (argv === null || argv instanceof ProtocolError) throw new Error(`expected ECHO, got ${String(argv)}`);
    expect(argv.buffer(1).equals(whole)).toBe(true);
    const ping = parser.next(true);
    expect(ping !== null && !(ping instanceof ProtocolError) && ping.str(0)).toBe('PING');
  });

  it('heldBytes (the client memory account) counts the room allocated for a line still arriving', () => {
    const parser = new RequestParser({ maxBulkBytes: BIG });
    for (const c of 'ECHO hello') parser.feed(Buffer.from(c));
    expect(parser.next(true)).toBeNull();
    expect(parser.pendingBytes).toBe(10);
    expect(parser.heldBytes).toBeGreaterThan(parser.pendingBytes);
    expect(parser.heldBytes).toBeLessThanOrEqual(2 * parser.pendingBytes + 2);
    parser.feed(Buffer.from('\n'));
    expect(parser.next(true)).not.toBeNull();
    expect(parser.next(true)).toBeNull();
    expect(parser.heldBytes).toBe(0);
  });

  it('a pipeline cut at every byte parses as a whole and costs a bounded multiple of its size', () => {
    const pipeline = Buffer.concat([
      Buffer.from('PING\r\nECHO "a b" \'c\'\n'),
      ...Array.from({ length: 50 }, (_, i) => encode([Buffer.from('CL.THROTTLE'), Buffer.from(`key:${i}`), Buffer.from('5'), Buffer.from('10'), Buffer.from('60')])),
      Buffer.from('*0\r\n*-1\r\nECHO x\r\n'),
    ]);
    const { results, scanned, copied, allocated } = drip(pipeline, Buffer.alloc(0));
    expect(results.length).toBe(53);
    expect(results[1]).toEqual(['ECHO', 'a b', 'c']);
    expect(results[2]).toEqual(['CL.THROTTLE', 'key:0', '5', '10', '60']);
    expect(results[52]).toEqual(['ECHO', 'x']);
    expect(allocated).toBeLessThanOrEqual(4 * pipeline.length);
    expect(scanned).toBeLessThanOrEqual(3 * pipeline.length);
    expect(copied).toBeLessThanOrEqual(4 * pipeline.length);
  });
});

describe('inline commands before AUTH have the multibulk limits', () => {
  function parse(line: string | Buffer, authenticated: boolean): string[] | string | null {
    const parser = new RequestParser({ maxBulkBytes: 512 * 1024 * 1024 });
    parser.feed(typeof line === 'string' ? Buffer.from(line, 'latin1') : line);
    const r = parser.next(authenticated);
    if (r === null || r instanceof ProtocolError) return r === null ? null : r.message;
    const args: string[] = [];
    for (let i = 0; i < r.length; i++) args.push(r.str(i));
    return args;
  }
  const args = (n: number): string => Array.from({ length: n }, (_, i) => `a${i}`).join(' ');

  it('at most 10 arguments: the 11th is `unauthenticated multibulk length`', () => {
    expect(parse(`${args(10)}\r\n`, false)).toHaveLength(10);
    expect(parse(`${args(11)}\r\n`, false)).toBe('unauthenticated multibulk length');
    expect(parse(`${args(11)}\r\n`, true)).toHaveLength(11);
    // 32,000 one-letter arguments: refused at the 11th, however many follow.
    expect(parse(`${'a '.repeat(32_000)}\r\n`, false)).toBe('unauthenticated multibulk length');
    expect(parse(`${'a '.repeat(32_000)}\r\n`, true)).toHaveLength(32_000);
  });

  it('each at most 16 KiB, plain or quoted (decoded): past it `unauthenticated bulk length`', () => {
    const max = 'x'.repeat(16 * 1024);
    expect(parse(`ECHO ${max}\r\n`, false)).toEqual(['ECHO', max]);
    expect(parse(`ECHO ${max}y\r\n`, false)).toBe('unauthenticated bulk length');
    expect(parse(`ECHO "${max}"\r\n`, false)).toEqual(['ECHO', max]);
    expect(parse(`ECHO "${max}\\x41"\r\n`, false)).toBe('unauthenticated bulk length');
    expect(parse(`ECHO '${max}y'\r\n`, false)).toBe('unauthenticated bulk length');
    expect(parse(`ECHO ${max}y\r\n`, true)).toEqual(['ECHO', `${max}y`]);
  });

  it('a line of at most 64 KiB even when it arrives whole (after AUTH, as Redis, only an incomplete one is bounded)', () => {
    const long = `ECHO ${'z'.repeat(64 * 1024)}\r\n`;
    expect(parse(long, false)).toBe('too big inline request');
    expect(parse(long, true)).toEqual(['ECHO', 'z'.repeat(64 * 1024)]);
    const atLimit = `E ${'z'.repeat(64 * 1024 - 2)}\r\n`;
    expect(parse(atLimit, false)).toBe('unauthenticated bulk length');
  });
});
