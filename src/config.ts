/**
 * Configuration: Redis-style names and values, from a redis.conf-syntax file, then command-line
 * flags (`--port 6380`), then environment variables (`CELLGATE_PORT=6380`), in rising precedence.
 * The same table serves CONFIG GET/SET, so a name means one thing everywhere.
 */
import { readFileSync } from 'node:fs';
import { splitInlineArgs } from './protocol/inline.js';

type Kind =
  | { type: 'int'; min: number; max: number }
  | { type: 'memory' }
  | { type: 'bool' }
  | { type: 'enum'; values: string[] }
  | { type: 'string' }
  | { type: 'filename' }
  | { type: 'save' };

interface ConfigDef {
  name: string;
  kind: Kind;
  default: string;
  /** CONFIG SET may change it at run time. */
  mutable: boolean;
  /** Hidden from CONFIG GET * when true (secrets are still readable by name, as Redis does). */
  help: string;
}

const DEFS: ConfigDef[] = [
  { name: 'port', kind: { type: 'int', min: 0, max: 65535 }, default: '6379', mutable: false, help: 'TCP port (0 picks a free one)' },
  { name: 'bind', kind: { type: 'string' }, default: '127.0.0.1 ::1', mutable: false, help: 'addresses to listen on' },
  { name: 'protected-mode', kind: { type: 'bool' }, default: 'yes', mutable: true, help: 'refuse non-loopback clients when no password is set' },
  { name: 'requirepass', kind: { type: 'string' }, default: '', mutable: true, help: 'password for the default user' },
  { name: 'maxclients', kind: { type: 'int', min: 1, max: 1_000_000 }, default: '10000', mutable: true, help: 'most connected clients' },
  { name: 'timeout', kind: { type: 'int', min: 0, max: 2_147_483_647 }, default: '0', mutable: true, help: 'close clients idle this many seconds (0 = never)' },
  { name: 'tcp-keepalive', kind: { type: 'int', min: 0, max: 2_147_483_647 }, default: '300', mutable: true, help: 'TCP keepalive seconds' },
  { name: 'proto-max-bulk-len', kind: { type: 'memory' }, default: '536870912', mutable: true, help: 'largest bulk argument' },
  { name: 'client-query-buffer-limit', kind: { type: 'memory' }, default: '1073741824', mutable: true, help: 'largest unprocessed input per client' },
  { name: 'maxmemory', kind: { type: 'memory' }, default: '0', mutable: true, help: 'memory limit (0 = none)' },
  { name: 'maxmemory-policy', kind: { type: 'enum', values: ['noeviction', 'volatile-ttl', 'allkeys-lru', 'allkeys-random'] }, default: 'volatile-ttl', mutable: true, help: 'what to do at maxmemory' },
  { name: 'dir', kind: { type: 'string' }, default: './data', mutable: false, help: 'snapshot directory' },
  { name: 'dbfilename', kind: { type: 'filename' }, default: 'cellgate.snap', mutable: true, help: 'snapshot file name' },
  { name: 'save', kind: { type: 'save' }, default: '3600 1 300 100 60 10000', mutable: true, help: 'snapshot after <seconds> if <changes>' },
  { name: 'stop-writes-on-bgsave-error', kind: { type: 'bool' }, default: 'yes', mutable: true, help: 'refuse writes (MISCONF) while the last background save failed' },
  { name: 'appendonly', kind: { type: 'enum', values: ['no'] }, default: 'no', mutable: false, help: 'always no: cellgate persists by snapshot' },
  { name: 'databases', kind: { type: 'int', min: 1, max: 1 }, default: '1', mutable: false, help: 'one database, 0' },
  { name: 'hz', kind: { type: 'int', min: 1, max: 500 }, default: '10', mutable: true, help: 'background task frequency' },
  { name: 'loglevel', kind: { type: 'enum', values: ['debug', 'verbose', 'notice', 'warning', 'nothing'] }, default: 'notice', mutable: true, help: 'log verbosity' },
  { name: 'log-format', kind: { type: 'enum', values: ['human', 'json'] }, default: 'human', mutable: true, help: 'log lines as text or JSON objects' },
  { name: 'logfile', kind: { type: 'string' }, default: '', mutable: false, help: 'log file (empty = stdout)' },
  { name: 'enable-debug-command', kind: { type: 'enum', values: ['no', 'yes', 'local'] }, default: 'no', mutable: false, help: 'allow DEBUG (CLOCK, SLEEP)' },
  { name: 'metrics-port', kind: { type: 'int', min: 0, max: 65535 }, default: '0', mutable: false, help: 'Prometheus metrics port (0 = off)' },
];

const BY_NAME = new Map(DEFS.map((d) => [d.name, d]));

export class ConfigError extends Error {}

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
      return String(n);
    }
    case 'memory': {
      const n = parseMemory(value);
      if (n === null) throw new ConfigError('argument must be a memory value');
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
    case 'save': {
      const parts = value.trim() === '' ? [] : value.trim().split(/\s+/);
      if (parts.length % 2 !== 0 || parts.some((p) => !/^\d+$/.test(p))) throw new ConfigError('Invalid save parameters');
      return parts.join(' ');
    }
    case 'string':
      return value;
    case 'filename':
      // As Redis: the snapshot always lives in `dir`.
      if (value === '' || value.includes('/') || value === '.' || value === '..') throw new ConfigError("dbfilename can't be a path, just a filename");
      return value;
  }
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

  /** Sets a value from any source. `runtime` applies CONFIG SET's mutability rule. */
  set(name: string, value: string, runtime = false): void {
    const def = BY_NAME.get(name.toLowerCase());
    if (def === undefined) throw new ConfigError(`unknown option '${name}'`);
    if (runtime && !def.mutable) throw new ConfigError('can\'t set immutable config');
    this.values.set(def.name, canonical(def, value));
  }

  isMutable(name: string): boolean {
    return BY_NAME.get(name)?.mutable ?? false;
  }

  /** Reads a redis.conf-syntax file: `name value...` per line, `#` comments, Redis quoting. */
  loadFile(path: string): void {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (e) {
      throw new ConfigError(`cannot read config file '${path}': ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    this.configFile = path;
    const lines = text.split(/\r?\n/);
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i].trim();
      if (line === '' || line.startsWith('#')) continue;
      const args = splitInlineArgs(Buffer.from(line, 'utf8'));
      if (args === null || args.length === 0) throw new ConfigError(`${path}:${i + 1}: unbalanced quotes`);
      const [name, ...rest] = args.map((a) => a.toString('utf8'));
      try {
        this.set(name, rest.join(' '));
      } catch (e) {
        throw new ConfigError(`${path}:${i + 1}: '${name}': ${(e as Error).message}`);
      }
    }
  }

  /** Applies `--name value [value...]` flags, as redis-server reads them. */
  applyFlags(flags: string[]): void {
    for (let i = 0; i < flags.length; ) {
      const flag = flags[i];
      if (!flag.startsWith('--') || flag.length === 2) throw new ConfigError(`unexpected argument '${flag}'`);
      const name = flag.slice(2).toLowerCase();
      const values: string[] = [];
      i++;
      while (i < flags.length && !flags[i].startsWith('--')) values.push(flags[i++]);
      if (!BY_NAME.has(name)) throw new ConfigError(`unknown option '--${name}'`);
      if (values.length === 0) throw new ConfigError(`option '--${name}' needs a value`);
      try {
        this.set(name, values.join(' '));
      } catch (e) {
        throw new ConfigError(`--${name}: ${(e as Error).message}`);
      }
    }
  }

  /** Applies `CELLGATE_<NAME>` variables (dashes become underscores). */
  applyEnv(env: NodeJS.ProcessEnv): void {
    for (const def of DEFS) {
      const key = 'CELLGATE_' + def.name.toUpperCase().replace(/-/g, '_');
      const value = env[key];
      if (value === undefined) continue;
      try {
        this.set(def.name, value);
      } catch (e) {
        throw new ConfigError(`${key}: ${(e as Error).message}`);
      }
    }
  }

  /** Name/value pairs matching a glob, for CONFIG GET. */
  matching(match: (name: string) => boolean): [string, string][] {
    const out: [string, string][] = [];
    for (const def of DEFS) if (match(def.name)) out.push([def.name, this.get(def.name)]);
    return out;
  }
}
