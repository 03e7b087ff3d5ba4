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

/** Digits-only check and i64 range check; `text` has had its sign handled by the caller. */
function toI64(negative: boolean, digits: string): number | null {
  if (digits.length === 0 || digits.length > 19 + 1) return null;
  for (let i = 0; i < digits.length; i++) {
    const c = digits.charCodeAt(i);
    if (c < 48 || c > 57) return null;
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
 * Redis's `string2ll`: optional '-', then digits with no leading zero (except "0" itself),
 * no '+', no spaces, within i64. Used wherever Redis says "value is not an integer or out of range".
 */
export function parseRedisInteger(arg: Buffer): number | null {
  const text = str(arg);
  if (text === '0') return 0;
  const negative = text.charCodeAt(0) === 45;
  const digits = negative ? text.slice(1) : text;
  if (digits.length === 0 || digits.charCodeAt(0) === 48) return null;
  return toI64(negative, digits);
}

/** Rust's `i64::from_str`, which redis-cell uses: optional '+' or '-', digits (leading zeros allowed). */
export function parseRustI64(arg: Buffer): number | null {
  const text = str(arg);
  const c0 = text.charCodeAt(0);
  const signed = c0 === 43 || c0 === 45;
  return toI64(c0 === 45, signed ? text.slice(1) : text);
}

const DECIMAL_FLOAT = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const INFINITY = /^[+-]?inf(?:inity)?$/i;
const HEX_INT = /^([+-]?)0[xX]([0-9a-fA-F]+)$/;

/**
 * Redis's `getDoubleFromObject` (strtod over the whole string): decimal or exponent notation,
 * "inf"/"infinity", hex integers; no leading space, no trailing garbage, never NaN.
 */
export function parseRedisDouble(arg: Buffer): number | null {
  const text = str(arg);
  if (text.length === 0 || text.length > 5000) return null;
  if (DECIMAL_FLOAT.test(text)) return Number(text);
  if (INFINITY.test(text)) return text.startsWith('-') ? -Infinity : Infinity;
  const hex = HEX_INT.exec(text);
  if (hex !== null) return (hex[1] === '-' ? -1 : 1) * parseInt(hex[2], 16);
  return null;
}
