/**
 * The one-pass inline splitter (positions, one scratch buffer per line, early stops) against the
 * straightforward one it replaced, kept here as the oracle: a Buffer per argument, byte by byte,
 * sdssplitargs's rules as written. Random lines of words, spaces of every kind, both quotes and
 * every escape must split the same, or both be unbalanced. The wire-level cases checked against
 * redis-server are in test/server/protocol.test.ts ("inline commands").
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { splitInline, splitInlineArgs, SPLIT_ARG_TOO_BIG, SPLIT_OK, SPLIT_TOO_MANY_ARGS, SPLIT_UNBALANCED } from '../../src/protocol/inline.js';
import { CommandArgs } from '../../src/protocol/command-args.js';

function isSpace(c: number): boolean {
  return c === 0x20 || (c >= 0x09 && c <= 0x0d);
}
function hex(c: number): number {
  const s = String.fromCharCode(c);
  return /^[0-9a-fA-F]$/.test(s) ? parseInt(s, 16) : -1;
}

/** The previous splitter: the oracle. */
function oracle(line: Buffer): Buffer[] | null {
  const args: Buffer[] = [];
  let n = line.indexOf(0);
  if (n === -1) n = line.length;
  let p = 0;
  for (;;) {
    while (p < n && isSpace(line[p])) p++;
    if (p >= n) return args;
    const current: number[] = [];
    let inDouble = false;
    let inSingle = false;
    let done = false;
    while (!done) {
      const c = p < n ? line[p] : 0;
      if (inDouble) {
        if (c === 0x5c && p + 3 < n && line[p + 1] === 0x78 && hex(line[p + 2]) >= 0 && hex(line[p + 3]) >= 0) {
          current.push(hex(line[p + 2]) * 16 + hex(line[p + 3]));
          p += 3;
        } else if (c === 0x5c && p + 1 < n) {
          p++;
          const e = line[p];
          current.push(e === 0x6e ? 10 : e === 0x72 ? 13 : e === 0x74 ? 9 : e === 0x62 ? 8 : e === 0x61 ? 7 : e);
        } else if (c === 0x22) {
          if (p + 1 < n && !isSpace(line[p + 1])) return null;
          done = true;
        } else if (p >= n) {
          return null;
        } else {
          current.push(c);
        }
      } else if (inSingle) {
        if (c === 0x5c && p + 1 < n && line[p + 1] === 0x27) {
          p++;
          current.push(0x27);
        } else if (c === 0x27) {
          if (p + 1 < n && !isSpace(line[p + 1])) return null;
          done = true;
        } else if (p >= n) {
          return null;
        } else {
          current.push(c);
        }
      } else if (p >= n || c === 0x20 || c === 10 || c === 13 || c === 9) {
        done = true;
      } else if (c === 0x22) {
        inDouble = true;
      } else if (c === 0x27) {
        inSingle = true;
      } else {
        current.push(c);
      }
      if (p < n) p++;
    }
    args.push(Buffer.from(current));
  }
}

const piece = fc.constantFrom('a', 'bc', 'x1', ' ', '  ', '\t', '\r', '\x0b', '\x0c', '\n', '"', "'", '\\', '\\x', '\\x4', '\\x41', '\\xg1', '\\n', '\\"', "\\'", '\\\\', '\x00', '\xff');
const line = fc.array(piece, { maxLength: 24 }).map((parts) => Buffer.from(parts.join(''), 'latin1'));

describe('splitInline', () => {
  it('splits every line as the straightforward splitter does (or both find the quotes unbalanced)', () => {
    fc.assert(
      fc.property(line, (bytes) => {
        const expected = oracle(bytes);
        const got = splitInlineArgs(bytes);
        expect(got === null ? null : got.map((b) => b.toString('latin1'))).toEqual(expected === null ? null : expected.map((b) => b.toString('latin1')));
      }),
      { numRuns: 3000, seed: 20261202 },
    );
  });

  it('splits a range of a bigger buffer into positions, quoted arguments decoded apart, the rest untouched', () => {
    const buf = Buffer.from('xx SET "k\\x41" v \'w x\' yy', 'latin1');
    const argv = new CommandArgs();
    expect(splitInline(buf, 3, buf.length - 3, argv, 100, 100)).toBe(SPLIT_OK);
    expect(Array.from({ length: argv.length }, (_, i) => argv.str(i))).toEqual(['SET', 'kA', 'v', 'w x']);
    expect(argv.source(0)).toBe(buf); // plain arguments are views of the line
    expect(argv.source(1)).not.toBe(buf);
    expect(buf.toString('latin1')).toBe('xx SET "k\\x41" v \'w x\' yy');
    // Inline arguments never stand for the RESP bytes a CL.THROTTLE cache compares.
    expect(argv.restBytes(1)).toBeNull();
    expect(argv.restEquals(2, Buffer.from('v'))).toBe(false);
  });

  it('stops at the first argument past maxArgs or longer than maxArgBytes', () => {
    const argv = new CommandArgs();
    const words = Buffer.from(`${'a '.repeat(1000)}`);
    expect(splitInline(words, 0, words.length, argv, 10, 100)).toBe(SPLIT_TOO_MANY_ARGS);
    expect(argv.length).toBe(10);
    expect(splitInline(words, 0, words.length, argv, 1000, 100)).toBe(SPLIT_OK);
    expect(argv.length).toBe(1000);
    const big = Buffer.from(`a ${'b'.repeat(101)} c`);
    expect(splitInline(big, 0, big.length, argv, 10, 100)).toBe(SPLIT_ARG_TOO_BIG);
    expect(argv.length).toBe(1);
    const quoted = Buffer.from(`a "${'\\x62'.repeat(100)}" c`);
    expect(splitInline(quoted, 0, quoted.length, argv, 10, 100)).toBe(SPLIT_OK);
    expect(argv.str(1)).toBe('b'.repeat(100));
    const quotedBig = Buffer.from(`a "${'\\x62'.repeat(101)}" c`);
    expect(splitInline(quotedBig, 0, quotedBig.length, argv, 10, 100)).toBe(SPLIT_ARG_TOO_BIG);
    expect(splitInline(Buffer.from('a "b'), 0, 4, argv, 10, 100)).toBe(SPLIT_UNBALANCED);
  });
});
