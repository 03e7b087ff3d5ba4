/**
 * The request parser in-process (the wire-level suite is test/server/protocol.test.ts): random
 * commands with arguments of every header width, fed in random pieces, come out byte for byte; the
 * one-pass path for short arguments agrees with the general one at its edges.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { ProtocolError, RequestParser } from '../../src/protocol/request-parser.js';

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
    // Incomplete at every point: nothing until the last byte.
    const text = '*2\r\n$3\r\nabc\r\n$12\r\nhello world!\r\n';
    for (let cut = 0; cut < text.length; cut++) expect(parseAll(Buffer.from(text), [cut])).toEqual([['abc', 'hello world!']]);
  });
});
