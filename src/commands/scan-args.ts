/**
 * SCAN's arguments, parsed once for both keyspaces: the local one (src/store/local-keys.ts) and the
 * shared backend's (src/backend/backend-keys.ts).
 */
import type { CommandArgs } from '../protocol/command-args.js';
import type { CommandContext } from './types.js';

const U64_MAX = 2n ** 64n - 1n;

/**
 * A SCAN cursor read as Redis does (strtoul, base 10, whole argument): an optional sign then
 * decimal digits; a negative value wraps modulo 2^64, "" is 0, leading whitespace or a value
 * beyond 2^64 − 1 is refused (null). Cursors past the keyspace's range all mean "the end".
 */
export function parseScanCursor(text: string): number | null {
  const m = /^([+-]?)(\d*)$/.exec(text);
  if (m === null || (m[2] === '' && m[1] !== '')) return null;
  if (m[2] === '') return 0;
  let v = BigInt(m[2]);
  if (v > U64_MAX) return null;
  if (m[1] === '-' && v !== 0n) v = 2n ** 64n - v;
  return v > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(v);
}

/** SCAN's options, parsed. */
export interface ScanArgs {
  cursor: number;
  count: number;
  /** MATCH, or null for every key. */
  pattern: string | null;
  /** TYPE, lowercase, or null. */
  typeFilter: string | null;
}

/** Parses SCAN's arguments; null after an error reply. */
export function parseScanArgs(ctx: CommandContext, argv: CommandArgs): ScanArgs | null {
  const r = ctx.reply;
  const cursor = parseScanCursor(argv.str(1));
  if (cursor === null) {
    r.error('ERR invalid cursor');
    return null;
  }
  let count = 10;
  let pattern: string | null = null;
  let typeFilter: string | null = null;
  for (let i = 2; i < argv.length; i++) {
    const opt = argv.lower(i);
    const more = i + 1 < argv.length;
    if (opt === 'count' && more) {
      const n = argv.redisInteger(++i);
      if (n === null) {
        r.error('ERR value is not an integer or out of range');
        return null;
      }
      if (n < 1) {
        r.error('ERR syntax error');
        return null;
      }
      count = n;
    } else if (opt === 'match' && more) {
      pattern = argv.str(++i);
      if (pattern === '*') pattern = null;
    } else if (opt === 'type' && more) {
      typeFilter = argv.lower(++i);
    } else {
      r.error('ERR syntax error');
      return null;
    }
  }
  return { cursor, count, pattern, typeFilter };
}
