/**
 * Splits an inline command line into arguments with the quoting rules of Redis's `sdssplitargs`
 * (src/sds.c), so `nc`/telnet probes and `redis-cli`-style quoting behave as they do with Redis:
 * "..." understands \n \r \t \b \a \\ \" and \xHH; '...' understands \'; a closing quote must be
 * followed by a space or the end of the line. Returns null for unbalanced quotes.
 */
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

function isSpace(c: number): boolean {
  return c === SPACE || c === TAB || c === LF || c === VT || c === FF || c === CR;
}

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x61 && c <= 0x66) return c - 0x61 + 10;
  if (c >= 0x41 && c <= 0x46) return c - 0x41 + 10;
  return -1;
}

export function splitInlineArgs(line: Buffer): Buffer[] | null {
  const args: Buffer[] = [];
  // A NUL ends the line, as it ends the C string Redis splits.
  let n = line.indexOf(NUL);
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
      const c = p < n ? line[p] : NUL;
      if (inDouble) {
        if (c === BACKSLASH && p + 3 < n && line[p + 1] === 0x78 /* x */ &&
            hexValue(line[p + 2]) >= 0 && hexValue(line[p + 3]) >= 0) {
          current.push(hexValue(line[p + 2]) * 16 + hexValue(line[p + 3]));
          p += 3;
        } else if (c === BACKSLASH && p + 1 < n) {
          p++;
          const e = line[p];
          current.push(e === 0x6e ? LF : e === 0x72 ? CR : e === 0x74 ? TAB : e === 0x62 ? 0x08 : e === 0x61 ? 0x07 : e);
        } else if (c === DQUOTE) {
          if (p + 1 < n && !isSpace(line[p + 1])) return null;
          done = true;
        } else if (p >= n) {
          return null;
        } else {
          current.push(c);
        }
      } else if (inSingle) {
        if (c === BACKSLASH && p + 1 < n && line[p + 1] === SQUOTE) {
          p++;
          current.push(SQUOTE);
        } else if (c === SQUOTE) {
          if (p + 1 < n && !isSpace(line[p + 1])) return null;
          done = true;
        } else if (p >= n) {
          return null;
        } else {
          current.push(c);
        }
      } else if (p >= n || c === SPACE || c === LF || c === CR || c === TAB) {
        done = true;
      } else if (c === DQUOTE) {
        inDouble = true;
      } else if (c === SQUOTE) {
        inSingle = true;
      } else {
        current.push(c);
      }
      if (p < n) p++;
    }
    args.push(Buffer.from(current));
  }
}
