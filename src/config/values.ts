/**
 * Configuration values: each kind of the parameter table (params.ts) validated and put in the
 * canonical form CONFIG GET shows (memory values in bytes, enums in lowercase...), with Redis's
 * error texts.
 */
import type { ConfigDef } from './params.js';

/** A refused option or value, with the reason (Redis's text where Redis has one). */
export class ConfigError extends Error {}

/** Redis's upper bound of proto-max-bulk-len and client-query-buffer-limit (LONG_MAX), for its error text. */
const MAX_SIZE_LIMIT_TEXT = '9223372036854775807';

/** Parses Redis memory notation: 100, 1k (1000), 1kb (1024), 5mb, 2gb. */
export function parseMemory(text: string): number | null {
  const m = /^(\d+)(k|kb|m|mb|g|gb)?$/i.exec(text.trim());
  if (m === null) return null;
  const mul: Record<string, number> = { k: 1e3, kb: 1024, m: 1e6, mb: 1024 ** 2, g: 1e9, gb: 1024 ** 3 };
  return Number(m[1]) * (m[2] ? mul[m[2].toLowerCase()] : 1);
}

/** Validates a value for `def` and returns its canonical text, or throws ConfigError(reason). */
export function canonical(def: ConfigDef, value: string): string {
  const k = def.kind;
  switch (k.type) {
    case 'int': {
      if (!/^-?\d+$/.test(value)) throw new ConfigError('argument couldn\'t be parsed into an integer');
      const n = Number(value);
      if (n < k.min || n > k.max) throw new ConfigError(`argument must be between ${k.min} and ${k.max} inclusive`);
      if (k.clamp !== undefined) return String(Math.min(Math.max(n, k.clamp[0]), k.clamp[1]));
      return String(n);
    }
    case 'memory': {
      const n = parseMemory(value);
      if (n === null) throw new ConfigError('argument must be a memory value');
      if (k.min !== undefined && n < k.min) throw new ConfigError(`argument must be between ${k.min} and ${MAX_SIZE_LIMIT_TEXT} inclusive`);
      return String(n);
    }
    case 'memory-or-percent': {
      const pct = /^(\d+)%$/.exec(value.trim());
      if (pct !== null) {
        const n = Number(pct[1]);
        if (n < 1 || n > 100) throw new ConfigError('percentage argument must be between 1 and 100');
        return `${n}%`;
      }
      const n = parseMemory(value);
      if (n === null) throw new ConfigError('argument must be a memory or percent value');
      return String(n);
    }
    case 'bool': {
      const v = value.toLowerCase();
      if (v !== 'yes' && v !== 'no') throw new ConfigError('argument must be \'yes\' or \'no\'');
      return v;
    }
    case 'enum': {
      const v = value.toLowerCase();
      if (!k.values.includes(v)) throw new ConfigError(`argument(s) must be one of the following: ${k.values.join(', ')}`);
      return v;
    }
    case 'octal': {
      if (!/^[0-7]{1,4}$/.test(value)) throw new ConfigError('argument must be an octal number between 0 and 7777');
      return parseInt(value, 8).toString(8);
    }
    case 'save': {
      const parts = value.trim() === '' ? [] : value.trim().split(/\s+/);
      if (parts.length % 2 !== 0 || parts.some((p) => !/^\d+$/.test(p))) throw new ConfigError('Invalid save parameters');
      return parts.join(' ');
    }
    case 'output-limits':
      return canonicalOutputLimits(value, DEFAULT_OUTPUT_LIMITS);
    case 'string':
    case 'bytes':
      return value;
    case 'filename':
      return canonicalFilename(value);
    case 'addresses':
      return canonicalAddresses(value);
    case 'aofname':
      return canonicalAofName(value, k.what);
  }
}

/**
 * Names starting with this are cellgate's own files in `dir` (save temp files, the lock file): a
 * dbfilename may not start with it, so the start-up cleanup of temp files can never touch a snapshot.
 */
export const RESERVED_FILE_PREFIX = '.cellgate-';

/**
 * A dbfilename: as Redis, the snapshot always lives in `dir`, so no path separator ('/', or '\\'
 * as on Windows); no control character that would forge lines in the log, INFO or a config file
 * (CR, LF, NUL...); and not one of cellgate's reserved names.
 */
function canonicalFilename(value: string): string {
  if (value === '' || value.includes('/') || value.includes('\\') || value === '.' || value === '..') throw new ConfigError("dbfilename can't be a path, just a filename");
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f]/.test(value)) throw new ConfigError('dbfilename must not contain control characters (CR, LF, NUL...)');
  if (value.startsWith(RESERVED_FILE_PREFIX)) throw new ConfigError(`dbfilename can't start with '${RESERVED_FILE_PREFIX}' (reserved for cellgate's temp and lock files)`);
  return value;
}

/**
 * `bind`: a leading '-' marks an optional address (Redis's `bind -::1`), so a word that is '-' and
 * nothing else names no address at all; it was listened on as the empty host, which Node takes for
 * every interface, the opposite of what was asked.
 */
function canonicalAddresses(value: string): string {
  for (const word of value.split(/\s+/)) {
    if (word === '-') throw new ConfigError("'-' alone is not an address: a leading '-' marks an optional address, e.g. '-::1'");
  }
  return value;
}

/**
 * appendfilename / appenddirname: Redis's rule (a name, not a path), and no blank, quote or control
 * character, so the manifest's `file <name> seq <n> type <t>` lines never need quoting; not one of
 * cellgate's reserved names either.
 */
function canonicalAofName(value: string, what: 'filename' | 'dirname'): string {
  if (value === '' || value.includes('/') || value.includes('\\') || value === '.' || value === '..') throw new ConfigError(`append${what} can't be a path, just a ${what}`);
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x20\x7f"']/.test(value)) throw new ConfigError(`append${what} must not contain spaces, quotes or control characters`);
  if (value.startsWith(RESERVED_FILE_PREFIX)) throw new ConfigError(`append${what} can't start with '${RESERVED_FILE_PREFIX}' (reserved for cellgate's temp and lock files)`);
  return value;
}

/** One class of `client-output-buffer-limit`: bytes and seconds (0 = no limit). */
export interface OutputLimit {
  hardBytes: number;
  softBytes: number;
  softSeconds: number;
}

const OUTPUT_CLASSES = ['normal', 'slave', 'pubsub'];
/**
 * The least non-zero hard or soft limit of the normal class. A limit smaller than a reply closes the
 * client that gets it, and the normal class applies to every client, the one that sets it included:
 * `normal 1 1 1` was accepted and closed the administrator at the next reply, with no way to set it
 * back. Redis never meets this because it does not count its 16 KiB static reply buffer against the
 * limit (only the reply list beyond it); cellgate counts every reply byte, so it refuses limits below
 * those 16 KiB instead: every small reply (OK, errors, INFO, CONFIG GET) fits under any accepted
 * limit. 0 (no limit) stays allowed. The other classes do not apply to clients here.
 */
const MIN_NORMAL_OUTPUT_LIMIT = 16 * 1024;
const DEFAULT_OUTPUT_LIMITS = 'normal 268435456 67108864 60 slave 268435456 67108864 60 pubsub 33554432 8388608 60';

/**
 * `client-output-buffer-limit <class> <hard> <soft> <soft-seconds> [...]`, as Redis: the classes
 * given replace those of `current`, the others keep their values (`replica` is `slave`, as Redis prints it). Returns all
 * three classes with byte values, as Redis's CONFIG GET shows them.
 */
export function canonicalOutputLimits(value: string, current: string): string {
  const parts = value.trim().split(/\s+/).filter(Boolean);
  const invalid = 'Wrong number of arguments in buffer limit configuration.';
  if (parts.length === 0 || parts.length % 4 !== 0) throw new ConfigError(invalid);
  const classes = new Map<string, string[]>();
  const cur = current.split(' ');
  for (let i = 0; i < cur.length; i += 4) classes.set(cur[i], cur.slice(i + 1, i + 4));
  for (let i = 0; i < parts.length; i += 4) {
    let cls = parts[i].toLowerCase();
    if (cls === 'replica') cls = 'slave';
    if (!OUTPUT_CLASSES.includes(cls)) throw new ConfigError('Invalid client class specified in buffer limit configuration.');
    const hard = parseMemory(parts[i + 1]);
    const soft = parseMemory(parts[i + 2]);
    const seconds = /^\d+$/.test(parts[i + 3]) ? Number(parts[i + 3]) : null;
    if (hard === null || soft === null || seconds === null) throw new ConfigError('Error in hard, soft or soft_seconds setting in buffer limit configuration.');
    if (cls === 'normal' && ((hard > 0 && hard < MIN_NORMAL_OUTPUT_LIMIT) || (soft > 0 && soft < MIN_NORMAL_OUTPUT_LIMIT))) {
      throw new ConfigError(`Error in hard or soft setting in buffer limit configuration: normal class limits must be 0 (no limit) or at least ${MIN_NORMAL_OUTPUT_LIMIT} bytes.`);
    }
    classes.set(cls, [String(hard), String(soft), String(seconds)]);
  }
  return OUTPUT_CLASSES.map((c) => `${c} ${classes.get(c)!.join(' ')}`).join(' ');
}


/** A default in the form CONFIG GET shows it (memory values in bytes, octal without leading zeros). */
export function canonicalDefault(def: ConfigDef): string {
  return def.kind.type === 'bytes' ? def.default : canonical(def, def.default);
}

