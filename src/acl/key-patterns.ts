/**
 * A user's key patterns (`~app:*`, `%R~reports:*`): the access each grants, their rule text, and
 * matching a key's bytes against them, which every command of a user with key patterns pays for.
 */
import { globMatch } from '../glob.js';

/** Key access a pattern grants: bit 1 read, bit 2 write. */
export const KEY_READ = 1;
export const KEY_WRITE = 2;

/**
 * A key pattern prepared for keyAllowed: `literal` alone (exact) or followed by `*`s (prefix) when
 * the rest has no glob character, else `glob` (the pattern, for globMatch).
 */
export interface KeyMatcher {
  readonly access: number;
  readonly literal: Buffer;
  readonly exact: boolean;
  readonly glob: string | null;
}

export function keyMatcher(pattern: string, access: number): KeyMatcher {
  let end = pattern.length;
  while (end > 0 && pattern[end - 1] === '*') end--;
  const head = pattern.slice(0, end);
  if (/[*?[\\]/.test(head)) return { access, literal: Buffer.alloc(0), exact: false, glob: pattern };
  return { access, literal: Buffer.from(head, 'latin1'), exact: end === pattern.length, glob: null };
}

/**
 * Whether the key bytes buf[start, end) may be accessed with `need` (KEY_READ|KEY_WRITE bits): one
 * of the patterns matches with that access. A literal pattern, or a literal prefix and `*` (`app:*`,
 * the usual shape), is compared with the bytes, so no string is made for the key unless a pattern
 * needs the glob matcher (globMatch on the key as latin1, the same answer).
 */
export function keyAllowed(matchers: readonly KeyMatcher[], buf: Buffer, start: number, end: number, need: number): boolean {
  const len = end - start;
  let text: string | null = null;
  for (let m = 0; m < matchers.length; m++) {
    const k = matchers[m];
    if ((k.access & need) !== need) continue;
    if (k.glob === null) {
      const lit = k.literal;
      const n = lit.length;
      if (k.exact ? len !== n : len < n) continue;
      let i = 0;
      while (i < n && buf[start + i] === lit[i]) i++;
      if (i === n) return true;
    } else {
      if (text === null) text = buf.toString('latin1', start, end);
      if (globMatch(k.glob, text)) return true;
    }
  }
  return false;
}

/** The rule that grants `access` to `pattern`, as ACL LIST prints it (`~p`, `%R~p`, `%W~p`). */
export function keyRule(pattern: string, access: number): string {
  return (access === (KEY_READ | KEY_WRITE) ? '~' : access === KEY_READ ? '%R~' : '%W~') + pattern;
}
