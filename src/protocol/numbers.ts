/**
 * Number parsing with the exact rules of the systems cellgate is compatible with. Each parser
 * takes the raw argument bytes and returns a number, or null when the text is not acceptable.
 * In the protocol room because CommandArgs parses its arguments with it; handlers use it too.
 */

const I64_MAX = 9223372036854775807n;
const I64_MIN = -9223372036854775808n;

/** Digits-only check and i64 range check; `digits` has had its sign removed by the caller. */
function toI64(negative: boolean, digits: string): number | null {
  if (digits.length === 0) return null;
  for (let i = 0; i < digits.length; i++) {
    const c = digits.charCodeAt(i);
    if (c < 48 || c > 57) return null;
  }
  if (digits.length > 19) {
    // Only leading zeros can make a valid i64 this long (Rust accepts them; Redis never gets here).
    digits = digits.replace(/^0+(?=\d)/, '');
    if (digits.length > 19) return null;
  }
  if (digits.length < 16) {
    const n = Number(digits);
    return negative ? -n : n;
  }
  const big = negative ? -BigInt(digits) : BigInt(digits);
  if (big > I64_MAX || big < I64_MIN) return null;
  return Number(big);
}

/**
 * Digits of buf[start, end) as a non-negative number, straight from the bytes (no string is made:
 * this runs several times per limiter call). Returns -1 if a byte is not a digit, and -2 if there
 * are more than 15 digits (the caller then takes the exact, slower path).
 */
function smallDigits(buf: Buffer, start: number, end: number): number {
  if (end - start > 15) return -2;
  let value = 0;
  for (let i = start; i < end; i++) {
    const d = buf[i] - 48;
    if (d < 0 || d > 9) return -1;
    value = value * 10 + d;
  }
  return value;
}

/**
 * Redis's `string2ll` over buf[start, end): optional '-', then digits with no leading zero (except
 * "0" itself), no '+', no spaces, within i64. Used wherever Redis says "value is not an integer or
 * out of range".
 */
export function parseRedisIntegerAt(buf: Buffer, start: number, end: number): number | null {
  if (end - start === 1 && buf[start] === 48) return 0;
  const negative = end > start && buf[start] === 45;
  const first = negative ? start + 1 : start;
  if (first >= end || buf[first] === 48) return null;
  const fast = smallDigits(buf, first, end);
  if (fast >= 0) return negative ? -fast : fast;
  if (fast === -1) return null;
  return toI64(negative, buf.toString('latin1', first, end));
}

/** Rust's `i64::from_str` over buf[start, end), as redis-cell parses: optional '+' or '-', digits (leading zeros allowed). */
export function parseRustI64At(buf: Buffer, start: number, end: number): number | null {
  const c0 = end > start ? buf[start] : 0;
  const first = c0 === 43 || c0 === 45 ? start + 1 : start;
  if (first >= end) return null;
  const fast = smallDigits(buf, first, end);
  if (fast >= 0) return c0 === 45 ? -fast : fast;
  if (fast === -1) return null;
  return toI64(c0 === 45, buf.toString('latin1', first, end));
}

export function parseRedisInteger(arg: Buffer): number | null {
  return parseRedisIntegerAt(arg, 0, arg.length);
}

export function parseRustI64(arg: Buffer): number | null {
  return parseRustI64At(arg, 0, arg.length);
}

const DECIMAL_FLOAT = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const INFINITY = /^[+-]?inf(?:inity)?$/i;
const HEX_FLOAT = /^([+-]?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?(?:[pP]([+-]?\d+))?$/;

/**
 * Redis's `getDoubleFromObject` (strtod over the whole string): decimal or exponent notation,
 * "inf"/"infinity", C99 hex floats (`0x1p-1`); no leading space, no trailing garbage, never NaN.
 * Like Redis, a finite number that overflows to ±inf or underflows to 0 (strtod's ERANGE) is refused.
 */
export function parseRedisDouble(arg: Buffer): number | null {
  return parseRedisDoubleText(arg.toString('latin1'));
}

/** parseRedisDouble over the argument's text (one char per byte). */
export function parseRedisDoubleText(text: string): number | null {
  if (text.length === 0 || text.length > 5000) return null;
  let value: number;
  let mantissaNonZero: boolean;
  if (DECIMAL_FLOAT.test(text)) {
    value = Number(text);
    mantissaNonZero = /[1-9]/.test(text.split(/[eE]/)[0]);
  } else if (INFINITY.test(text)) {
    return text.startsWith('-') ? -Infinity : Infinity;
  } else {
    const hex = HEX_FLOAT.exec(text);
    if (hex === null || (hex[2] === '' && (hex[3] ?? '') === '')) return null;
    const digits = hex[2] + (hex[3] ?? '');
    mantissaNonZero = /[1-9a-fA-F]/.test(digits);
    value = parseInt(digits, 16) * 2 ** (Number(hex[4] ?? 0) - 4 * (hex[3] ?? '').length);
    if (hex[1] === '-') value = -value;
  }
  if (!Number.isFinite(value)) return null;
  if (value === 0 && mantissaNonZero) return null;
  return value;
}
