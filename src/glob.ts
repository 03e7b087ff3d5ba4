/**
 * Redis's glob matching (`stringmatchlen`), used by KEYS, SCAN MATCH and CONFIG GET:
 * `*`, `?`, `[abc]`, `[^a-z]`, and `\` to escape. Works on binary strings (one char per byte).
 * Backtracks only to the last `*`, so patterns like `a*a*a*a*b` stay linear-ish instead of
 * exponential.
 */
export function globMatch(pattern: string, text: string, nocase = false): boolean {
  if (nocase) {
    pattern = pattern.toLowerCase();
    text = text.toLowerCase();
  }
  let p = 0;
  let t = 0;
  let starP = -1;
  let starT = 0;
  while (t < text.length) {
    if (p < pattern.length) {
      const c = pattern[p];
      if (c === '*') {
        while (p < pattern.length && pattern[p] === '*') p++;
        if (p === pattern.length) return true;
        starP = p;
        starT = t;
        continue;
      }
      const consumed = matchOne(pattern, p, text[t]);
      if (consumed > 0) {
        p += consumed;
        t++;
        continue;
      }
    }
    if (starP === -1) return false;
    p = starP;
    t = ++starT;
  }
  while (p < pattern.length && pattern[p] === '*') p++;
  return p === pattern.length;
}

/**
 * Matches one pattern element at `p` against `ch`. Returns how many pattern chars it spans, or 0
 * when it does not match.
 */
function matchOne(pattern: string, p: number, ch: string): number {
  const c = pattern[p];
  if (c === '?') return 1;
  if (c === '\\' && p + 1 < pattern.length) return pattern[p + 1] === ch ? 2 : 0;
  if (c !== '[') return c === ch ? 1 : 0;
  let i = p + 1;
  const negate = pattern[i] === '^';
  if (negate) i++;
  let matched = false;
  for (;;) {
    if (i >= pattern.length) {
      i--; // unterminated class: Redis treats the end of the pattern as its end
      break;
    }
    const k = pattern[i];
    if (k === ']') break;
    if (k === '\\' && i + 1 < pattern.length) {
      if (pattern[i + 1] === ch) matched = true;
      i += 2;
    } else if (i + 2 < pattern.length && pattern[i + 1] === '-' && pattern[i + 2] !== ']') {
      let lo = k;
      let hi = pattern[i + 2];
      if (lo > hi) [lo, hi] = [hi, lo];
      if (ch >= lo && ch <= hi) matched = true;
      i += 3;
    } else {
      if (k === ch) matched = true;
      i++;
    }
  }
  if (negate) matched = !matched;
  return matched ? i - p + 1 : 0;
}
