/**
 * Splits an inline command line into arguments with the quoting rules of Redis's `sdssplitargs`
 * (src/sds.c), so `nc`/telnet probes and `redis-cli`-style quoting behave as they do with Redis:
 * "..." understands \n \r \t \b \a \\ \" and \xHH; '...' understands \'; a closing quote must be
 * followed by a space or the end of the line.
 *
 * One pass over the line, whatever it holds: a plain argument is recorded as a position in the line
 * (no copy, no allocation), a quoted one is decoded into one scratch buffer per line, and the split
 * stops at the first argument past `maxArgs` or longer than `maxArgBytes`, so a line of 32,000
 * one-letter arguments from a client that has not authenticated costs eleven arguments of work, not
 * 32,000 Buffers.
 */
import { CommandArgs } from './command-args.js';

const SPACE = 0x20;
const TAB = 0x09;
const LF = 0x0a;
const VT = 0x0b;
const FF = 0x0c;
const CR = 0x0d;
const NUL = 0x00;
const DQUOTE = 0x22;
const SQUOTE = 0x27;
const BACKSLASH = 0x5c;

/** splitInline's outcomes. */
export const SPLIT_OK = 0;
export const SPLIT_UNBALANCED = 1;
/** An argument beyond `maxArgs` began. */
export const SPLIT_TOO_MANY_ARGS = 2;
/** An argument was longer than `maxArgBytes` (decoded). */
export const SPLIT_ARG_TOO_BIG = 3;
export type SplitResult = typeof SPLIT_OK | typeof SPLIT_UNBALANCED | typeof SPLIT_TOO_MANY_ARGS | typeof SPLIT_ARG_TOO_BIG;

function isSpace(c: number): boolean {
  return c === SPACE || c === TAB || c === LF || c === VT || c === FF || c === CR;
}

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x61 && c <= 0x66) return c - 0x61 + 10;
  if (c >= 0x41 && c <= 0x46) return c - 0x41 + 10;
  return -1;
}

/** What `\<c>` stands for inside double quotes (anything else stands for itself). */
function escaped(c: number): number {
  switch (c) {
    case 0x6e: return LF; // n
    case 0x72: return CR; // r
    case 0x74: return TAB; // t
    case 0x62: return 0x08; // b
    case 0x61: return 0x07; // a
    default: return c;
  }
}

/**
 * Splits `line[start, end)` into `argv` (reset first, marked inline). The range must hold no NUL
 * (a NUL ends a C string, so callers cut there: the request parser never completes a line holding
 * one). Arguments are positions in `line` or in a scratch buffer made for this line; neither is
 * written again, so they stay valid as the parser's arguments do.
 */
export function splitInline(line: Buffer, start: number, end: number, argv: CommandArgs, maxArgs: number, maxArgBytes: number): SplitResult {
  argv.resetInline();
  let scratch: Buffer | null = null;
  let s = 0; // the next free byte of scratch
  let p = start;
  for (;;) {
    while (p < end && isSpace(line[p])) p++;
    if (p >= end) return SPLIT_OK;
    if (argv.length >= maxArgs) return SPLIT_TOO_MANY_ARGS;
    // The plain part of the argument: up to a separator, the end, or a quote.
    const argStart = p;
    let c = line[p];
    while (c !== SPACE && c !== TAB && c !== LF && c !== CR && c !== DQUOTE && c !== SQUOTE) {
      if (++p === end) break;
      c = line[p];
    }
    if (p === end || (c !== DQUOTE && c !== SQUOTE)) {
      if (p - argStart > maxArgBytes) return SPLIT_ARG_TOO_BIG;
      argv.push(line, argStart, p);
      p++; // the separator
      continue;
    }
    // A quote: the plain part, then the quoted one, decoded into the scratch buffer. Decoding never
    // makes a line longer, so one buffer of the line's size holds every argument of it.
    if (scratch === null) scratch = Buffer.allocUnsafe(end - start);
    const out = scratch;
    const outStart = s;
    s += line.copy(out, s, argStart, p);
    const quote = c;
    p++;
    for (;;) {
      if (p >= end) return SPLIT_UNBALANCED;
      c = line[p];
      if (quote === DQUOTE) {
        if (c === BACKSLASH && p + 3 < end && line[p + 1] === 0x78 /* x */) {
          const hi = hexValue(line[p + 2]);
          const lo = hexValue(line[p + 3]);
          if (hi >= 0 && lo >= 0) {
            out[s++] = hi * 16 + lo;
            p += 4;
            continue;
          }
        }
        if (c === BACKSLASH && p + 1 < end) {
          out[s++] = escaped(line[p + 1]);
          p += 2;
          continue;
        }
        if (c === DQUOTE) break;
      } else {
        if (c === BACKSLASH && p + 1 < end && line[p + 1] === SQUOTE) {
          out[s++] = SQUOTE;
          p += 2;
          continue;
        }
        if (c === SQUOTE) break;
      }
      out[s++] = c;
      p++;
    }
    // The closing quote ends the argument, and must be followed by a space or the end of the line.
    if (p + 1 < end && !isSpace(line[p + 1])) return SPLIT_UNBALANCED;
    p++;
    if (s - outStart > maxArgBytes) return SPLIT_ARG_TOO_BIG;
    argv.push(out, outStart, s);
  }
}

/** The whole line split, each argument its own Buffer (config files); null for unbalanced quotes. */
export function splitInlineArgs(line: Buffer): Buffer[] | null {
  // A NUL ends the line, as it ends the C string Redis splits.
  let n = line.indexOf(NUL);
  if (n === -1) n = line.length;
  const argv = new CommandArgs();
  if (splitInline(line, 0, n, argv, Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER) !== SPLIT_OK) return null;
  const args: Buffer[] = [];
  for (let i = 0; i < argv.length; i++) args.push(Buffer.from(argv.buffer(i)));
  return args;
}
