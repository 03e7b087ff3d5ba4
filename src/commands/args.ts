/**
 * Argument parsing with the exact rules of the systems cellgate is compatible with. Each parser
 * takes the raw argument bytes and returns a number, or null when the text is not acceptable.
 */

/** The argument as a binary string (one char per byte): how keys and names are held. */
export function str(arg: Buffer): string {
  return arg.toString('latin1');
}

/** Lowercase ASCII view of an argument, for keyword comparison. */
export function lower(arg: Buffer): string {
  return arg.toString('latin1').toLowerCase();
}

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
 * Digits of `arg` from `start` as a non-negative number, straight from the bytes (no string is
 * made: this runs several times per limiter call). Returns -1 if a byte is not a digit, and -2 if
 * there are more than 15 digits (the caller then takes the exact, slower path).
 */
function smallDigits(arg: Buffer, start: number): number {
  const n = arg.length;
  if (n - start > 15) return -2;
  let value = 0;
  for (let i = start; i < n; i++) {
    const d = arg[i] - 48;
    if (d < 0 || d > 9) return -1;
    value = value * 10 + d;
  }
  return value;
}

/**
 * Redis's `string2ll`: optional '-', then digits with no leading zero (except "0" itself),
 * no '+', no spaces, within i64. Used wherever Redis says "value is not an integer or out of range".
 */
export function parseRedisInteger(arg: Buffer): number | null {
  const n = arg.length;
  if (n === 1 && arg[0] === 48) return 0;
  const negative = n > 0 && arg[0] === 45;
  const start = negative ? 1 : 0;
  if (start >= n || arg[start] === 48) return null;
  const fast = smallDigits(arg, start);
  if (fast >= 0) return negative ? -fast : fast;
  if (fast === -1) return null;
  return toI64(negative, str(arg).slice(start));
}

/** Rust's `i64::from_str`, which redis-cell uses: optional '+' or '-', digits (leading zeros allowed). */
export function parseRustI64(arg: Buffer): number | null {
  const n = arg.length;
  const c0 = n > 0 ? arg[0] : 0;
  const start = c0 === 43 || c0 === 45 ? 1 : 0;
  if (start >= n) return null;
  const fast = smallDigits(arg, start);
  if (fast >= 0) return c0 === 45 ? -fast : fast;
  if (fast === -1) return null;
  return toI64(c0 === 45, str(arg).slice(start));
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
  const text = str(arg);
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
