/**
 * fast-check arbitraries over request frames, grammar-aware: well-formed multibulks of safe
 * commands, wrong counts and lengths, junk in headers, inline lines with stray quotes and escapes,
 * binary junk, and split points. Command names come from a safe list: random frames never run
 * admin or write commands. Used by test/server/protocol.test.ts and test/hardening/fuzz.test.ts.
 */
import fc from 'fast-check';
import { mbulk } from './raw.js';

export const SAFE_WORDS = ['PING', 'ECHO', 'EXISTS', 'TYPE', 'TTL', 'foo', 'CL.THROTTLE', 'fuzz:k', '5', '10', '60', '-1', 'x', '', 'hello world'];

export const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));
export const word = fc.oneof(fc.constantFrom(...SAFE_WORDS), fc.string({ maxLength: 6 }));
// Command names come from a safe list: random frames must never run admin commands.
export const validMbulk = fc.tuple(fc.constantFrom('PING', 'ECHO', 'EXISTS', 'TYPE', 'foo'), fc.array(fc.oneof(word.map((w) => Buffer.from(w, 'latin1')), bytes(40)), { maxLength: 5 }))
  .map(([name, args]) => mbulk(name, ...args));
export const wrongLengths = fc.tuple(fc.array(bytes(20), { minLength: 1, maxLength: 4 }), fc.integer({ min: -3, max: 3 }), fc.integer({ min: -2, max: 2 }), fc.nat(3))
  .map(([args, countDelta, lenDelta, which]) => {
    const parts = [`*${args.length + countDelta}\r\n`];
    args.forEach((a, i) => parts.push(`$${a.length + (i === which ? lenDelta : 0)}\r\n${a.toString('latin1')}\r\n`));
    return Buffer.from('*2\r\n$4\r\nECHO\r\n$1\r\nz\r\n' + parts.join(''), 'latin1');
  });
export const headerJunk = fc.tuple(fc.constantFrom('*', '$', '*1\r\n$', '*2\r\n$4\r\nECHO\r\n$'), fc.string({ maxLength: 12 }), fc.constantFrom('\r\n', '\n', '\r', ''))
  .map(([prefix, body, end]) => Buffer.from(prefix + body + end, 'latin1'));
export const inlineWithQuotes = fc.tuple(fc.array(fc.tuple(fc.constantFrom('', '"', "'", '\\', '\\x4', '\\x41', '\\"', "\\'"), word), { minLength: 1, maxLength: 5 }), fc.constantFrom('\r\n', '\n'))
  .map(([tokens, end]) => {
    const line = tokens.map(([q, w], i) => (i === 0 ? (w === '' ? 'PING' : 'ECHO') : q + w + (i % 2 === 0 ? q : ''))).join(' ');
    return Buffer.from(line.replace(/[\r\n]/g, ' ') + end, 'latin1');
  });
export const junk = bytes(120);
export const frame = fc.array(fc.oneof(validMbulk, wrongLengths, headerJunk, inlineWithQuotes, junk), { minLength: 1, maxLength: 4 }).map((parts) => Buffer.concat(parts));
export const frameWithSplits = frame.chain((buf) => fc.tuple(fc.constant(buf), fc.uniqueArray(fc.integer({ min: 1, max: Math.max(1, buf.length - 1) }), { maxLength: 4 })));

