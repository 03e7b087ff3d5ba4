/**
 * Argument parsers against the rules of the systems they imitate: Redis's string2ll and
 * getDoubleFromObject (strtod), and Rust's i64::from_str (redis-cell).
 */
import { describe, expect, it } from 'vitest';
import { parseRedisDouble, parseRedisInteger, parseRustI64 } from '../../src/protocol/numbers.js';
import { CommandArgs, argsOf } from '../../src/protocol/command-args.js';

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

describe('CommandArgs (argument positions in the received bytes)', () => {
  it('reads numbers, strings and bytes at their positions without copying the request', () => {
    const request = Buffer.from('xxCL.THROTTLEyyuser:1zz+0070zz-5zz2.5', 'latin1');
    const args = new CommandArgs();
    args.push(request, 2, 13);
    args.push(request, 15, 21);
    args.push(request, 23, 28);
    args.push(request, 30, 32);
    args.push(request, 34, 37);
    expect(args.length).toBe(5);
    expect(args.lower(0)).toBe('cl.throttle');
    expect(args.str(1)).toBe('user:1');
    expect(args.rustI64(2)).toBe(70);
    expect(args.redisInteger(2)).toBeNull(); // '+' and leading zeros are Rust's, not Redis's
    expect(args.redisInteger(3)).toBe(-5);
    expect(args.redisDouble(4)).toBe(2.5);
    expect(args.buffer(1).toString()).toBe('user:1');
    expect(args.bytesEqual(0, Buffer.from('CL.THROTTLE'))).toBe(true);
    expect(args.bytesEqual(0, Buffer.from('cl.throttle'))).toBe(false);
    expect(args.lowerFrom(3)).toEqual(['-5', '2.5']);
  });

  it('is reused: reset forgets the previous command, and a huge one does not keep its room', () => {
    const args = argsOf('PING', 'hello');
    expect(args.str(1)).toBe('hello');
    for (let i = 0; i < 5000; i++) args.push(Buffer.from('x'), 0, 1);
    args.reset();
    expect(args.length).toBe(0);
    args.push(Buffer.from('ECHO'), 0, 4);
    expect(args.length).toBe(1);
    expect(args.str(0)).toBe('ECHO');
  });
});
