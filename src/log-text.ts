/**
 * Bounded copies for what the server keeps about a client's doing (the ACL log, the slow log):
 * whatever the client sent or named itself, an entry holds at most a few hundred bytes of it. A
 * kept string is a copy made now, so one 200 MB client name must not be copied into each of 128
 * log entries. Strings here are binary (one char per byte), so length is bytes.
 *
 * The cut is copied into a string of its own: V8's slice() of a long string is a view that keeps
 * the whole parent alive, which would keep the 200 MB name in memory behind a 128-byte entry.
 */
import type { CommandArgs } from './protocol/command-args.js';

/** How much of an argument, key or user name a log entry keeps (Redis's SLOWLOG_ENTRY_MAX_STRING). */
export const LOGGED_TEXT_BYTES = 128;

/**
 * `text` cut to `maxBytes`, marked as Redis's slow log marks what it cut:
 * `<first maxBytes>... (N more bytes)`.
 */
export function loggedText(text: string, maxBytes = LOGGED_TEXT_BYTES): string {
  if (text.length <= maxBytes) return ownCopy(text);
  return ownCopy(`${text.slice(0, maxBytes)}... (${text.length - maxBytes} more bytes)`);
}

/**
 * A field of a CLIENT LIST line kept in a log (client name, lib-name, lib-ver): cut to `maxBytes`
 * and marked by a trailing `...`, without spaces, so the line still splits into `key=value` fields.
 */
export function loggedField(value: string, maxBytes = LOGGED_TEXT_BYTES): string {
  return ownCopy(value.length <= maxBytes ? value : `${value.slice(0, maxBytes)}...`);
}

/** A short string with its own bytes, holding no reference to the string it was cut from. */
function ownCopy(short: string): string {
  return Buffer.from(short, 'latin1').toString('latin1');
}

/** Argument `i` as loggedText() would keep it, converting only the bytes kept (it may be 512 MiB). */
export function loggedArg(argv: CommandArgs, i: number, maxBytes = LOGGED_TEXT_BYTES): string {
  const length = argv.byteLength(i);
  const text = argv.text(i, maxBytes);
  return length > maxBytes ? `${text}... (${length - maxBytes} more bytes)` : text;
}
