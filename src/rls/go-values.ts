/**
 * Values as envoyproxy/ratelimit reads its environment: kelseyhightower/envconfig's rules over Go's
 * strconv and time parsers (a bool is ParseBool's, an int ParseInt's with base 0, a duration
 * time.ParseDuration's, a map `k:v,k:v`). A value they refuse makes envoyproxy/ratelimit panic at
 * start; here it is a GoValueError, and the start is refused naming the variable.
 */

export class GoValueError extends Error {}

export type GoType = 'string' | 'bool' | 'int' | 'duration' | 'float' | 'map' | 'list';

/** A parsed value: strings as they are, durations in milliseconds, maps as entries. */
export type GoValue = string | boolean | number | [string, string][] | string[];

const TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const FALSE = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

/** strconv.ParseBool. */
export function parseGoBool(text: string): boolean {
  if (TRUE.has(text)) return true;
  if (FALSE.has(text)) return false;
  throw new GoValueError(`'${text}' is not a boolean (true, false, 1, 0, t, f...)`);
}

/** Go's underscoreOK: underscores only between digits, or between a base prefix and a digit. */
function underscoresOk(digits: string, prefixed: boolean): boolean {
  if (!digits.includes('_')) return true;
  if (digits.startsWith('_') && !prefixed) return false;
  return !digits.endsWith('_') && !digits.includes('__');
}

/** strconv.ParseInt(text, 0, 64): a sign, then 0x / 0o / 0b / a leading 0 (octal) or decimal digits. */
export function parseGoInt(text: string): number {
  const m = /^([+-]?)(0[xX]|0[oO]|0[bB]|0(?=[0-9a-fA-F_]))?([0-9a-fA-F_]+)$/.exec(text);
  const fail = (): never => {
    throw new GoValueError(`'${text}' is not an integer`);
  };
  if (m === null) fail();
  const [, sign, prefix = '', digits] = m!;
  const base = prefix === '' ? 10 : /x/i.test(prefix) ? 16 : /b/i.test(prefix) ? 2 : 8;
  if (!underscoresOk(digits, prefix !== '')) fail();
  const clean = digits.replace(/_/g, '');
  if (clean === '') fail();
  const valid = base === 16 ? /^[0-9a-f]+$/i : base === 10 ? /^[0-9]+$/ : base === 8 ? /^[0-7]+$/ : /^[01]+$/;
  if (!valid.test(clean)) fail();
  let n = 0n;
  for (const c of clean) n = n * BigInt(base) + BigInt(parseInt(c, base));
  if (sign === '-') n = -n;
  if (n > 2n ** 63n - 1n || n < -(2n ** 63n)) throw new GoValueError(`'${text}' is out of range`);
  return Number(n);
}

const DURATION_UNIT_MS: Record<string, number> = {
  ns: 1e-6, us: 1e-3, 'µs': 1e-3, 'μs': 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000,
};

/** time.ParseDuration, in milliseconds: `300ms`, `1.5h`, `1h30m`, `0`. */
export function parseGoDuration(text: string): number {
  const fail = (): never => {
    throw new GoValueError(`'${text}' is not a duration (such as 300ms, 10s, 1h30m)`);
  };
  let s = text;
  let sign = 1;
  if (s.startsWith('-') || s.startsWith('+')) {
    if (s[0] === '-') sign = -1;
    s = s.slice(1);
  }
  if (s === '0') return 0;
  if (s === '') fail();
  let total = 0;
  const part = /^(\d*)(\.(\d*))?([a-zµμ]+)/;
  while (s !== '') {
    const m = part.exec(s);
    if (m === null || (m[1] === '' && (m[3] ?? '') === '')) fail();
    const unit = DURATION_UNIT_MS[m![4]];
    if (unit === undefined) fail();
    total += Number(`${m![1] || '0'}.${m![3] ?? ''}0`) * unit;
    s = s.slice(m![0].length);
  }
  return sign * total;
}

/** strconv.ParseFloat (decimal, an exponent, inf and nan; underscores between digits). */
export function parseGoFloat(text: string): number {
  const digits = '\\d(?:_?\\d)*';
  const re = new RegExp(`^[+-]?(?:(?:${digits})?\\.?(?:${digits})?(?:[eE][+-]?${digits})?|inf|infinity|nan)$`, 'i');
  if (!re.test(text) || !/\d|inf|nan/i.test(text)) throw new GoValueError(`'${text}' is not a number`);
  const t = text.toLowerCase().replace(/_/g, '');
  if (t.includes('nan')) return NaN;
  if (t.includes('inf')) return t.startsWith('-') ? -Infinity : Infinity;
  return Number(t);
}

/** envconfig's map: `k:v,k:v` (each item exactly one colon; empty: no entries). */
export function parseGoMap(text: string): [string, string][] {
  if (text.trim() === '') return [];
  return text.split(',').map((item) => {
    const kv = item.split(':');
    if (kv.length !== 2) throw new GoValueError(`invalid map item: "${item}"`);
    return [kv[0], kv[1]] as [string, string];
  });
}

/** Parses `text` as a value of `type`; throws GoValueError. */
export function parseGoValue(type: GoType, text: string): GoValue {
  switch (type) {
    case 'string':
      return text;
    case 'bool':
      return parseGoBool(text);
    case 'int':
      return parseGoInt(text);
    case 'duration':
      return parseGoDuration(text);
    case 'float':
      return parseGoFloat(text);
    case 'map':
      return parseGoMap(text);
    case 'list':
      return text.trim() === '' ? [] : text.split(',');
  }
}
