/**
 * Configuration: Redis-style names and values, from a redis.conf-syntax file, then environment
 * variables (`CELLGATE_PORT=6380`), then command-line flags (`--port 6380`), in rising precedence:
 * a flag always wins, as the most specific word of whoever starts the process (README
 * "Configuration"). The same table serves CONFIG GET/SET/REWRITE and `--help`, so a name means one
 * thing everywhere.
 */
import { readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import { replaceFileSync } from './persistence/exclusive-file.js';
import { splitInlineArgs } from './protocol/inline.js';
import { defaultClientsMemoryBytes } from './server/client-memory.js';

type Kind =
  /** `clamp`: accepted anywhere in [min, max], then held to [clamp[0], clamp[1]] (Redis's hz). */
  | { type: 'int'; min: number; max: number; clamp?: [number, number] }
  | { type: 'memory'; min?: number }
  /** Bytes, or a percentage (`10%`) of maxmemory: maxmemory-clients, as Redis. */
  | { type: 'memory-or-percent' }
  /** Bytes, not text: kept as a binary string (one char per byte), as keys are. */
  | { type: 'bytes' }
  | { type: 'bool' }
  | { type: 'enum'; values: string[] }
  | { type: 'string' }
  | { type: 'filename' }
  /** appendfilename / appenddirname: a plain name inside `dir`, as Redis (no path). */
  | { type: 'aofname'; what: 'filename' | 'dirname' }
  | { type: 'save' }
  /** A file mode in octal (unixsocketperm 700). */
  | { type: 'octal' }
  /** Listen addresses, space-separated; a leading '-' marks one that may be unavailable (Redis's syntax). */
  | { type: 'addresses' }
  | { type: 'output-limits' };

interface ConfigDef {
  name: string;
  kind: Kind;
  default: string;
  /** CONFIG SET may change it at run time. */
  mutable: boolean;
  help: string;
  /**
   * A secret (Redis's SENSITIVE_CONFIG): the value of CONFIG SET for it shows as `(redacted)` in the
   * slow log (isSensitiveConfig).
   */
  sensitive?: true;
}

/**
 * The least proto-max-bulk-len and client-query-buffer-limit, as Redis (config.c: 1 MiB): below it
 * ordinary commands of ordinary clients would be refused or their connections closed.
 */
const MIN_SIZE_LIMIT = 1024 * 1024;
/** Redis's upper bound of those (LONG_MAX), for its error text. */
const MAX_SIZE_LIMIT_TEXT = '9223372036854775807';

const DEFS: ConfigDef[] = [
  { name: 'port', kind: { type: 'int', min: 0, max: 65535 }, default: '6379', mutable: true, help: 'TCP port (0 picks a free one)' },
  { name: 'unixsocket', kind: { type: 'string' }, default: '', mutable: false, help: 'also listen on this unix socket path (empty = none); clients on it are local' },
  { name: 'unixsocketperm', kind: { type: 'octal' }, default: '0', mutable: false, help: 'permissions of the unix socket, octal (0 = as the umask leaves them)' },
  { name: 'tcp-backlog', kind: { type: 'int', min: 0, max: 65535 }, default: '511', mutable: false, help: 'listen backlog of the TCP sockets' },
  { name: 'pidfile', kind: { type: 'string' }, default: '', mutable: false, help: 'write the process id to this file at start, removed at exit (empty = none)' },
  { name: 'supervised', kind: { type: 'enum', values: ['no', 'auto'] }, default: 'no', mutable: false, help: 'no or auto: cellgate always runs in the foreground (systemd: Type=simple)' },
  { name: 'daemonize', kind: { type: 'enum', values: ['no'] }, default: 'no', mutable: false, help: 'always no: run it under a supervisor or a container runtime' },
  { name: 'bind', kind: { type: 'addresses' }, default: '127.0.0.1 ::1', mutable: true, help: 'addresses to listen on' },
  { name: 'protected-mode', kind: { type: 'bool' }, default: 'yes', mutable: true, help: 'refuse non-loopback clients when no password is set' },
  { name: 'requirepass', kind: { type: 'bytes' }, default: '', mutable: true, sensitive: true, help: 'password for the default user' },
  { name: 'aclfile', kind: { type: 'string' }, default: '', mutable: false, help: 'ACL users file (ACL LOAD/SAVE), loaded at start' },
  { name: 'requirepass-file', kind: { type: 'string' }, default: '', mutable: false, help: 'read requirepass from this file at start (container secrets)' },
  { name: 'maxclients', kind: { type: 'int', min: 1, max: 1_000_000 }, default: '10000', mutable: true, help: 'most connected clients' },
  { name: 'timeout', kind: { type: 'int', min: 0, max: 2_147_483_647 }, default: '0', mutable: true, help: 'close clients idle this many seconds (0 = never)' },
  { name: 'tcp-keepalive', kind: { type: 'int', min: 0, max: 2_147_483_647 }, default: '300', mutable: true, help: 'TCP keepalive seconds' },
  { name: 'proto-max-bulk-len', kind: { type: 'memory', min: MIN_SIZE_LIMIT }, default: '536870912', mutable: true, help: 'largest bulk argument' },
  { name: 'client-query-buffer-limit', kind: { type: 'memory', min: MIN_SIZE_LIMIT }, default: '1073741824', mutable: true, help: 'largest unprocessed input per client' },
  // Redis's default for normal clients is 0 0 0 (unlimited); see README "Security model" for ours.
  { name: 'client-output-buffer-limit', kind: { type: 'output-limits' }, default: 'normal 268435456 67108864 60 slave 268435456 67108864 60 pubsub 33554432 8388608 60', mutable: true, help: 'disconnect clients whose unsent output exceeds <hard>, or <soft> for <soft-seconds>' },
  { name: 'maxmemory', kind: { type: 'memory' }, default: '0', mutable: true, help: 'memory limit (0 = none)' },
  // Redis's default is 0 (off); a share of the V8 heap limit instead (README "Security model", client-memory.ts).
  { name: 'maxmemory-clients', kind: { type: 'memory-or-percent' }, default: String(defaultClientsMemoryBytes()), mutable: true, help: 'close the biggest clients while all clients together hold more than this (bytes, or a percentage of maxmemory; 0 = off)' },
  { name: 'maxmemory-policy', kind: { type: 'enum', values: ['noeviction', 'volatile-ttl', 'allkeys-lru', 'allkeys-random'] }, default: 'volatile-ttl', mutable: true, help: 'what to do at maxmemory' },
  { name: 'maxmemory-samples', kind: { type: 'int', min: 1, max: 64 }, default: '5', mutable: true, help: 'keys sampled per eviction' },
  { name: 'tls-port', kind: { type: 'int', min: 0, max: 65535 }, default: '0', mutable: false, help: 'TLS port (0 = no TLS)' },
  { name: 'tls-cert-file', kind: { type: 'string' }, default: '', mutable: true, help: 'server certificate (PEM)' },
  { name: 'tls-key-file', kind: { type: 'string' }, default: '', mutable: true, help: 'server private key (PEM)' },
  { name: 'tls-key-file-pass', kind: { type: 'string' }, default: '', mutable: true, sensitive: true, help: 'passphrase of tls-key-file' },
  { name: 'tls-ca-cert-file', kind: { type: 'string' }, default: '', mutable: true, help: 'CA certificates that sign client certificates (PEM)' },
  { name: 'tls-auth-clients', kind: { type: 'enum', values: ['yes', 'no', 'optional'] }, default: 'yes', mutable: false, help: 'require client certificates' },
  { name: 'tls-handshake-timeout', kind: { type: 'int', min: 1, max: 600_000 }, default: '10000', mutable: false, help: 'close TLS connections whose handshake takes longer than this many milliseconds' },
  { name: 'backend', kind: { type: 'string' }, default: '', mutable: false, sensitive: true, help: 'where limiter state lives: empty = this process; redis://[[user]:password@]host:port[/db], rediss://... (TLS) or redis-cluster://[[user]:password@]host:port[,host:port...] (docs/backend.md)' },
  { name: 'backend-prefix', kind: { type: 'string' }, default: 'cellgate:', mutable: false, help: 'prefix of every key cellgate writes to the backend' },
  { name: 'backend-timeout', kind: { type: 'int', min: 1, max: 600_000 }, default: '100', mutable: true, help: 'milliseconds a limiter call waits for the backend before it is answered by backend-unavailable' },
  { name: 'backend-unavailable', kind: { type: 'enum', values: ['local', 'allow', 'deny'] }, default: 'local', mutable: true, help: 'answer while the backend is down or slow: local (decide in this process), allow (fail open) or deny (fail closed)' },
  { name: 'dir', kind: { type: 'string' }, default: './data', mutable: false, help: 'snapshot directory' },
  { name: 'dbfilename', kind: { type: 'filename' }, default: 'cellgate.snap', mutable: true, help: 'snapshot file name' },
  { name: 'save', kind: { type: 'save' }, default: '3600 1 300 100 60 10000', mutable: true, help: 'snapshot after <seconds> if <changes>' },
  // Redis's default is yes; for soft limiter state refusing every call is the worse outage (README).
  { name: 'stop-writes-on-bgsave-error', kind: { type: 'bool' }, default: 'no', mutable: true, help: 'refuse writes (MISCONF) while the last background save failed' },
  { name: 'snapshot-corrupt-policy', kind: { type: 'enum', values: ['refuse', 'move-aside'] }, default: 'refuse', mutable: false, help: 'a snapshot that fails validation at start: refuse to start, or rename it to <file>.corrupt-<timestamp> and start empty' },
  { name: 'key-load-delay', kind: { type: 'int', min: 0, max: 1_000_000 }, default: '0', mutable: false, help: 'testing: busy-wait this many microseconds per key loaded (as Redis)' },
  { name: 'appendonly', kind: { type: 'bool' }, default: 'no', mutable: true, help: 'keep a journal of every state change (docs/journal-format.md): a crash loses at most appendfsync\'s window' },
  { name: 'appendfsync', kind: { type: 'enum', values: ['always', 'everysec', 'no'] }, default: 'everysec', mutable: true, help: 'journal fsync: always (before each event-loop turn\'s replies), everysec (in the background), no (left to the OS)' },
  { name: 'appendfilename', kind: { type: 'aofname', what: 'filename' }, default: 'appendonly.aof', mutable: false, help: 'prefix of the journal\'s files (manifest, base, incremental)' },
  { name: 'appenddirname', kind: { type: 'aofname', what: 'dirname' }, default: 'appendonlydir', mutable: false, help: 'folder inside dir holding the journal\'s files' },
  { name: 'auto-aof-rewrite-percentage', kind: { type: 'int', min: 0, max: 2_147_483_647 }, default: '100', mutable: true, help: 'rewrite the journal when it grew this many percent over its size after the last rewrite (0 = never)' },
  { name: 'auto-aof-rewrite-min-size', kind: { type: 'memory' }, default: '67108864', mutable: true, help: 'no automatic journal rewrite below this size' },
  { name: 'aof-load-truncated', kind: { type: 'bool' }, default: 'yes', mutable: true, help: 'at start, cut a half-written last journal record (logged) instead of refusing to start' },
  { name: 'databases', kind: { type: 'int', min: 1, max: 1 }, default: '1', mutable: false, help: 'one database, 0' },
  { name: 'slowlog-log-slower-than', kind: { type: 'int', min: -1, max: Number.MAX_SAFE_INTEGER }, default: '10000', mutable: true, help: 'log commands slower than this many microseconds (-1 = never, 0 = all)' },
  { name: 'slowlog-max-len', kind: { type: 'int', min: 0, max: Number.MAX_SAFE_INTEGER }, default: '128', mutable: true, help: 'entries the slow log keeps' },
  { name: 'hz', kind: { type: 'int', min: 0, max: 2_147_483_647, clamp: [1, 500] }, default: '10', mutable: true, help: 'background task frequency (held to 1..500, as Redis)' },
  { name: 'loglevel', kind: { type: 'enum', values: ['debug', 'verbose', 'notice', 'warning', 'nothing'] }, default: 'notice', mutable: true, help: 'log verbosity' },
  { name: 'log-format', kind: { type: 'enum', values: ['human', 'json'] }, default: 'human', mutable: true, help: 'log lines as text or JSON objects' },
  { name: 'logfile', kind: { type: 'string' }, default: '', mutable: false, help: 'log file (empty = stdout)' },
  { name: 'enable-debug-command', kind: { type: 'enum', values: ['no', 'yes', 'local'] }, default: 'no', mutable: false, help: 'allow DEBUG (CLOCK, SLEEP)' },
  { name: 'warmup', kind: { type: 'bool' }, default: 'yes', mutable: false, help: 'run limiter calls on a scratch keyspace before the port opens, so the first clients meet compiled code' },
  { name: 'metrics-port', kind: { type: 'int', min: 0, max: 65535 }, default: '0', mutable: false, help: 'Prometheus metrics port (0 = off)' },
  { name: 'metrics-bind', kind: { type: 'string' }, default: '127.0.0.1', mutable: false, help: 'addresses the metrics port listens on (loopback by default)' },
  { name: 'metrics-timeout', kind: { type: 'int', min: 100, max: 600_000 }, default: '5000', mutable: false, help: 'milliseconds a metrics-port connection may send nothing, take over its request, or stay idle between keep-alive requests before it is closed' },
];

const BY_NAME = new Map(DEFS.map((d) => [d.name, d]));

export class ConfigError extends Error {}

const SPACE = Buffer.from(' ');

/** The lines of a file (LF or CRLF), each without leading and trailing spaces and tabs. */
function splitLines(bytes: Buffer): Buffer[] {
  const lines: Buffer[] = [];
  const blank = (b: number): boolean => b === 0x20 || b === 0x09 || b === 0x0d || b === 0x0b || b === 0x0c;
  for (let start = 0; start <= bytes.length; ) {
    let end = bytes.indexOf(0x0a, start);
    if (end === -1) end = bytes.length;
    let a = start;
    let b = end;
    while (a < b && blank(bytes[a])) a++;
    while (b > a && blank(bytes[b - 1])) b--;
    lines.push(bytes.subarray(a, b));
    start = end + 1;
  }
  return lines;
}

/** Parses Redis memory notation: 100, 1k (1000), 1kb (1024), 5mb, 2gb. */
export function parseMemory(text: string): number | null {
  const m = /^(\d+)(k|kb|m|mb|g|gb)?$/i.exec(text.trim());
  if (m === null) return null;
  const mul: Record<string, number> = { k: 1e3, kb: 1024, m: 1e6, mb: 1024 ** 2, g: 1e9, gb: 1024 ** 3 };
  return Number(m[1]) * (m[2] ? mul[m[2].toLowerCase()] : 1);
}

/** Validates a value for `def` and returns its canonical text, or throws ConfigError(reason). */
function canonical(def: ConfigDef, value: string): string {
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
function canonicalOutputLimits(value: string, current: string): string {
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

/** How deep `include` may nest. */
const MAX_INCLUDE_DEPTH = 10;
/** The line above the options CONFIG REWRITE appends (Redis's). */
const REWRITE_MARKER = '# Generated by CONFIG REWRITE';

/**
 * Redis directives cellgate does not implement, with the reason: a redis.conf that sets one gets that
 * reason at start instead of a bare "unknown option", so nobody thinks it took effect.
 */
const REFUSED: Record<string, string> = {
  replicaof: 'cellgate has no replication (run one server per application instance; limits are local state)',
  slaveof: 'cellgate has no replication (run one server per application instance; limits are local state)',
  masterauth: 'cellgate has no replication',
  masteruser: 'cellgate has no replication',
  'cluster-enabled': 'cellgate has no cluster mode (shard by key in the client if one server is not enough)',
  'cluster-config-file': 'cellgate has no cluster mode',
  'rename-command': 'cellgate cannot rename commands (use requirepass and protected mode)',
  loadmodule: 'cellgate cannot load Redis modules (its limiters are built in)',
  'io-threads': 'cellgate serves every client on one thread',
  'unixsocketgroup': 'cellgate cannot change the unix socket\'s group (use unixsocketperm and the folder\'s group)',
};

/** Redis's secrets among the REFUSED directives: a CONFIG SET of one is redacted all the same. */
const REFUSED_SENSITIVE = new Set(['masterauth', 'masteruser']);

/**
 * Whether `name` (lowercase) is a secret whose CONFIG SET value the slow log must not keep, as
 * Redis's configSetCommand redacts SENSITIVE_CONFIG values: set or refused, the value was sent.
 */
export function isSensitiveConfig(name: string): boolean {
  return BY_NAME.get(name)?.sensitive === true || REFUSED_SENSITIVE.has(name);
}

/** Values of implemented directives that cellgate refuses, with the reason. */
const REFUSED_VALUES: Record<string, string> = {
  'daemonize yes': 'cellgate does not fork into the background: run it in the foreground under a supervisor (systemd Type=simple, a container runtime)',
  'supervised systemd': 'cellgate does not send sd_notify (Node cannot write to the notify socket without a native module): use supervised no with systemd Type=simple',
  'supervised upstart': 'cellgate does not raise SIGSTOP for upstart: use supervised no',
};

/** The environment variable of an option: CELLGATE_ and its name, dashes as underscores. */
function envName(name: string): string {
  return 'CELLGATE_' + name.toUpperCase().replace(/-/g, '_');
}

/** One config line as [name, value bytes]; undefined for a blank line or a comment, null for bad quoting. */
function parseLine(line: Buffer): [string, Buffer] | undefined | null {
  if (line.length === 0 || line[0] === 0x23 /* # */) return undefined;
  const args = splitInlineArgs(line);
  if (args === null || args.length === 0) return null;
  const rest: Buffer[] = [];
  for (let a = 1; a < args.length; a++) {
    if (a > 1) rest.push(SPACE);
    rest.push(args[a]);
  }
  return [args[0].toString('utf8').toLowerCase(), Buffer.concat(rest)];
}

/** Printable ASCII, as C's isprint in the C locale (what Redis's sdscatrepr tests). */
function isPrint(byte: number): boolean {
  return byte >= 0x20 && byte <= 0x7e;
}

/**
 * A value as a config file writes it: bare when it is one plain word, else quoted as Redis's
 * sdscatrepr (sds.c) quotes it, byte by byte: printable ASCII as is except `"` and `\`, which get a
 * backslash; \n \r \t \a \b; any other byte as \xHH. The bytes are the value's UTF-8 encoding (a
 * `bytes` option: its own bytes), so `limits-€.snap` is written `"limits-\xe2\x82\xac.snap"` and
 * the reader (sdssplitargs rules, protocol/inline.ts) gives back the same bytes.
 */
export function quoteValue(bytes: Buffer): string {
  let plain = bytes.length > 0;
  for (let i = 0; plain && i < bytes.length; i++) {
    const c = bytes[i];
    plain = c > 0x20 && c <= 0x7e && c !== 0x22 && c !== 0x27 && c !== 0x5c;
  }
  if (plain) return bytes.toString('latin1');
  let out = '"';
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i];
    if (c === 0x22 || c === 0x5c) out += '\\' + String.fromCharCode(c);
    else if (c === 0x0a) out += '\\n';
    else if (c === 0x0d) out += '\\r';
    else if (c === 0x09) out += '\\t';
    else if (c === 0x07) out += '\\a';
    else if (c === 0x08) out += '\\b';
    else if (isPrint(c)) out += String.fromCharCode(c);
    else out += '\\x' + c.toString(16).padStart(2, '0');
  }
  return out + '"';
}

/** A default in the form CONFIG GET shows it (memory values in bytes, octal without leading zeros). */
function canonicalDefault(def: ConfigDef): string {
  return def.kind.type === 'bytes' ? def.default : canonical(def, def.default);
}

/** Every option with its default and help text, for `--help` (generated from the table, so never stale). */
export function optionsHelp(): string {
  const width = Math.max(...DEFS.map((d) => d.name.length)) + 2;
  return DEFS.map((d) => {
    const def = d.default === '' ? '""' : d.default;
    return `  --${d.name.padEnd(width)}${d.help} (default: ${def}${d.mutable ? '; CONFIG SET can change it' : ''})`;
  }).join('\n');
}

export class Config {
  private readonly values = new Map<string, string>();
  /** The config file given at start, if any (INFO config_file). */
  configFile = '';

  constructor() {
    for (const def of DEFS) this.values.set(def.name, def.default);
  }

  static names(): string[] {
    return DEFS.map((d) => d.name);
  }

  has(name: string): boolean {
    return BY_NAME.has(name);
  }

  get(name: string): string {
    const v = this.values.get(name);
    if (v === undefined) throw new Error(`unknown config ${name}`);
    return v;
  }

  int(name: string): number {
    return Number(this.get(name));
  }

  bool(name: string): boolean {
    return this.get(name) === 'yes';
  }

  /**
   * Sets a value from any source. `runtime` applies CONFIG SET's mutability rule. A Buffer is the
   * value's bytes (CONFIG SET, the config file); a string is text (flags, environment), taken as
   * UTF-8. A `bytes` option (requirepass) keeps the bytes as they are, so a password that is not
   * UTF-8 (`\xff\xfe`) is the same password in CONFIG SET and in AUTH; the others are text.
   */
  set(name: string, value: string | Buffer, runtime = false): void {
    const def = BY_NAME.get(name.toLowerCase());
    if (def === undefined) throw new ConfigError(`unknown option '${name}'${REFUSED[name.toLowerCase()] ? `: ${REFUSED[name.toLowerCase()]}` : ''}`);
    if (runtime && !def.mutable) throw new ConfigError('can\'t set immutable config');
    if (def.kind.type === 'enum') {
      const why = REFUSED_VALUES[`${def.name} ${value.toString().trim().toLowerCase()}`];
      if (why !== undefined) throw new ConfigError(why);
    }
    if (def.kind.type === 'bytes') {
      this.values.set(def.name, (typeof value === 'string' ? Buffer.from(value, 'utf8') : value).toString('latin1'));
      return;
    }
    const text = typeof value === 'string' ? value : value.toString('utf8');
    if (def.kind.type === 'output-limits') {
      this.values.set(def.name, canonicalOutputLimits(text, this.get(def.name)));
      return;
    }
    this.values.set(def.name, canonical(def, text));
  }

  /** A `bytes` option's value (requirepass) as its bytes. */
  bytes(name: string): Buffer {
    return Buffer.from(this.get(name), 'latin1');
  }

  /** Whether CONFIG GET must reply the value's bytes (a `bytes` option) rather than its text. */
  isBytes(name: string): boolean {
    return BY_NAME.get(name)?.kind.type === 'bytes';
  }

  /** A class of client-output-buffer-limit, parsed. */
  outputLimit(cls: 'normal' | 'slave' | 'pubsub'): OutputLimit {
    const parts = this.get('client-output-buffer-limit').split(' ');
    const i = parts.indexOf(cls);
    return { hardBytes: Number(parts[i + 1]), softBytes: Number(parts[i + 2]), softSeconds: Number(parts[i + 3]) };
  }

  /**
   * Reads `requirepass-file` (container secrets: Docker/Kubernetes mount the password as a file)
   * into `requirepass`. One trailing newline (`\n` or `\r\n`) is stripped, as secret files written
   * by `echo` end with one. Called once at start; throws ConfigError with a one-line reason.
   */
  loadSecrets(): void {
    const file = this.get('requirepass-file');
    if (file === '') return;
    if (this.get('requirepass') !== '') throw new ConfigError('requirepass and requirepass-file are both set: use one of them');
    let bytes: Buffer;
    try {
      bytes = readFileSync(file);
    } catch (e) {
      throw new ConfigError(`cannot read requirepass-file '${file}': ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    // The file's bytes as they are (a password need not be UTF-8), less one trailing newline.
    let end = bytes.length;
    if (end > 0 && bytes[end - 1] === 0x0a) end--;
    if (end > 0 && end < bytes.length && bytes[end - 1] === 0x0d) end--;
    if (end === 0) throw new ConfigError(`requirepass-file '${file}' is empty`);
    this.set('requirepass', bytes.subarray(0, end));
  }

  isMutable(name: string): boolean {
    return BY_NAME.get(name)?.mutable ?? false;
  }

  /**
   * Reads a redis.conf-syntax file: `name value...` per line, `#` comments, Redis quoting. `include
   * FILE` reads another file there (a relative path is taken from the including file's folder),
   * up to MAX_INCLUDE_DEPTH deep, so a file that includes itself is an error, not a hang.
   */
  loadFile(path: string, depth = 0): void {
    let bytes: Buffer;
    try {
      bytes = readFileSync(path);
    } catch (e) {
      throw new ConfigError(`cannot read config file '${path}': ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    if (depth === 0) this.configFile = path;
    // Split as bytes, not text: a quoted "\xff" value stays the byte 0xff (requirepass is bytes).
    const lines = splitLines(bytes);
    for (let i = 0; i < lines.length; i++) {
      const parsed = parseLine(lines[i]);
      if (parsed === undefined) continue;
      if (parsed === null) throw new ConfigError(`${path}:${i + 1}: unbalanced quotes`);
      const [name, value] = parsed;
      if (name === 'include') {
        const target = value.toString('utf8');
        if (depth + 1 > MAX_INCLUDE_DEPTH) throw new ConfigError(`${path}:${i + 1}: 'include': includes nested more than ${MAX_INCLUDE_DEPTH} deep (does a file include itself?)`);
        this.loadFile(isAbsolute(target) ? target : join(dirname(path), target), depth + 1);
        continue;
      }
      try {
        // `save` lines add up, as in Redis's redis.conf (`save 900 1` / `save 300 10` are two save
        // points); `save ""` clears them.
        if (name === 'save' && this.fileSaveLines++ > 0 && value.length > 0 && this.get('save') !== '') {
          this.set(name, `${this.get('save')} ${value.toString('utf8')}`);
        } else {
          this.set(name, value);
        }
      } catch (e) {
        throw new ConfigError(`${path}:${i + 1}: '${name}': ${(e as Error).message}`);
      }
    }
  }

  /** `save` lines read from config files so far (the first replaces the default, the others add). */
  private fileSaveLines = 0;

  /** Applies `--name value [value...]` flags, as redis-server reads them. */
  applyFlags(flags: string[]): void {
    for (let i = 0; i < flags.length; ) {
      const flag = flags[i];
      if (!flag.startsWith('--') || flag.length === 2) throw new ConfigError(`unexpected argument '${flag}'`);
      const name = flag.slice(2).toLowerCase();
      const values: string[] = [];
      i++;
      while (i < flags.length && !flags[i].startsWith('--')) values.push(flags[i++]);
      if (!BY_NAME.has(name)) throw new ConfigError(`unknown option '--${name}'${REFUSED[name] ? `: ${REFUSED[name]}` : ''}`);
      if (values.length === 0) throw new ConfigError(`option '--${name}' needs a value`);
      try {
        this.set(name, values.join(' '));
      } catch (e) {
        throw new ConfigError(`--${name}: ${(e as Error).message}`);
      }
    }
  }

  /**
   * Applies `CELLGATE_<NAME>` variables (dashes become underscores). Returns the CELLGATE_* variables
   * that name no option: the caller warns about them (see README "Configuration": unlike a flag, the
   * environment is shared by a whole process tree, where test and benchmark tools keep their own
   * CELLGATE_* switches, so a stray one is reported, not fatal).
   */
  applyEnv(env: NodeJS.ProcessEnv): string[] {
    const known = new Set<string>();
    for (const def of DEFS) {
      const key = envName(def.name);
      known.add(key);
      const value = env[key];
      if (value === undefined) continue;
      try {
        this.set(def.name, value);
      } catch (e) {
        throw new ConfigError(`${key}: ${(e as Error).message}`);
      }
    }
    return Object.keys(env).filter((k) => k.startsWith('CELLGATE_') && !known.has(k)).sort();
  }

  /**
   * CONFIG REWRITE, as Redis's rewriteConfig: the file the server started with keeps its comments,
   * its order and every line that is not an option (include...); the first line of each option gets
   * the running value, later duplicates are dropped; options not in the file whose value is not the
   * default are appended under Redis's marker. Written to a temp file in the same folder, synced,
   * then renamed over the old one, so a crash leaves the old file or the new one, never half of one.
   * The password read from requirepass-file is never written out.
   */
  rewrite(): void {
    const path = this.configFile;
    if (path === '') throw new ConfigError('The server is running without a config file');
    let old: Buffer;
    try {
      old = readFileSync(path);
    } catch (e) {
      throw new ConfigError(`cannot read the config file '${path}': ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    const skip = new Set<string>(['requirepass-file']);
    if (this.get('requirepass-file') !== '') skip.add('requirepass');
    const done = new Set<string>();
    const out: string[] = [];
    const lines = old.toString('latin1').split('\n');
    if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
    let marker = false;
    for (const raw of lines) {
      if (raw.trim() === REWRITE_MARKER) {
        marker = true;
        out.push(raw);
        continue;
      }
      const parsed = parseLine(Buffer.from(raw.trim(), 'latin1'));
      const def = parsed ? BY_NAME.get(parsed[0]) : undefined;
      if (def === undefined || skip.has(def.name)) {
        out.push(raw);
        continue;
      }
      if (done.has(def.name)) continue;
      done.add(def.name);
      out.push(this.configLine(def));
    }
    const added = DEFS.filter((d) => !done.has(d.name) && !skip.has(d.name) && this.get(d.name) !== canonicalDefault(d));
    if (added.length > 0 && !marker) out.push(REWRITE_MARKER);
    for (const d of added) out.push(this.configLine(d));
    const text = Buffer.from(out.join('\n') + '\n', 'latin1');
    try {
      // A new temp file under a random name, renamed over the file (exclusive-file.ts): a symlink
      // planted next to the config file is never written through.
      replaceFileSync(path, text, statSync(path).mode & 0o7777, 'rewrite');
    } catch (e) {
      throw new ConfigError(`Rewriting config file: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
  }

  /** `name value` as a config file line, the value quoted when it needs it. */
  private configLine(def: ConfigDef): string {
    const value = def.kind.type === 'bytes' ? this.bytes(def.name) : Buffer.from(this.get(def.name), 'utf8');
    return `${def.name} ${quoteValue(value)}`;
  }

  /** Name/value pairs matching a glob, for CONFIG GET. */
  matching(match: (name: string) => boolean): [string, string][] {
    const out: [string, string][] = [];
    for (const def of DEFS) if (match(def.name)) out.push([def.name, this.get(def.name)]);
    return out;
  }
}
