/**
 * Argument parsers against the rules of the systems they imitate: Redis's string2ll and
 * getDoubleFromObject (strtod), and Rust's i64::from_str (redis-cell).
 */
import { describe, expect, it } from 'vitest';
import { parseRedisDouble, parseRedisInteger, parseRustI64 } from '../../src/commands/args.js';

const b = (s: string) => Buffer.from(s, 'latin1');

describe('parseRedisInteger (string2ll)', () => {
  const cases: [string, number | null][] = [
    ['0', 0], ['-1', -1], ['42', 42], ['9223372036854775807', 9223372036854775807], ['-9223372036854775808', -9223372036854775808],
    ['9223372036854775808', null], ['01', null], ['-0', null], ['+1', null], [' 1', null], ['1 ', null], ['', null], ['-', null], ['1.0', null], ['0x10', null],
  ];
  for (const [text, expected] of cases) it(JSON.stringify(text), () => expect(parseRedisInteger(b(text))).toBe(expected));
});

describe('parseRustI64 (redis-cell)', () => {
  const cases: [string, number | null][] = [
    ['+5', 5], ['-0', -0], ['007', 7], ['0000000000000000000001', 1], ['9223372036854775807', 9223372036854775807],
    ['9223372036854775808', null], ['+', null], ['', null], [' 1', null], ['1.5', null], ['0x10', null], ['--1', null],
  ];
  for (const [text, expected] of cases) it(JSON.stringify(text), () => expect(parseRustI64(b(text))).toBe(expected));
});

describe('parseRedisDouble (strtod, whole string)', () => {
  const cases: [string, number | null][] = [
    ['3', 3], ['0.5', 0.5], ['5e-1', 0.5], ['.5', 0.5], ['5.', 5], ['-2.25', -2.25], ['0e5', 0], ['1e-310', 1e-310],
    ['inf', Infinity], ['-Infinity', -Infinity], ['0x10', 16], ['0x1p-1', 0.5], ['0x.8', 0.5],
    ['1e400', null], ['1e-400', null], ['nan', null], ['', null], [' 1', null], ['1 ', null], ['abc', null], ['0x', null], ['1e', null],
  ];
  for (const [text, expected] of cases) it(JSON.stringify(text), () => expect(parseRedisDouble(b(text))).toBe(expected));
});
