/**
 * Configuration: Redis-style names and values, from a redis.conf-syntax file, then environment
 * variables (`CELLGATE_PORT=6380`), then command-line flags (`--port 6380`), in rising precedence:
 * a flag always wins, as the most specific word of whoever starts the process (docs/configuration.md). The same table (config/params.ts) serves CONFIG GET/SET/REWRITE and `--help`, so
 * a name means one thing everywhere; config/values.ts validates values, config/file.ts reads the file
 * and rewrites it.
 */
import { readRegularFileSync } from './files/regular-file.js';
import { BY_NAME, DEFS, REFUSED, REFUSED_VALUES, type ConfigDef } from './config/params.js';
import { canonical, canonicalDefault, canonicalOutputLimits, ConfigError, type OutputLimit } from './config/values.js';
import { quoteValue, readConfigFile, rewriteConfigFile } from './config/file.js';

export { isSensitiveConfig, optionsHelp } from './config/params.js';
export { ConfigError, parseMemory, RESERVED_FILE_PREFIX, type OutputLimit } from './config/values.js';
export { quoteValue } from './config/file.js';

/** The environment variable of an option: CELLGATE_ and its name, dashes as underscores. */
function envName(name: string): string {
  return 'CELLGATE_' + name.toUpperCase().replace(/-/g, '_');
}

export class Config {
  private readonly values = new Map<string, string>();
  /** Bumped by every set: a reader caches what it derives from values until this moves. */
  generation = 0;
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
    this.generation++;
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
      // A mounted Secret: a regular file of at most 64 KiB (a FIFO or a device refused with the reason).
      bytes = readRegularFileSync(file, { maxBytes: 64 * 1024, what: 'requirepass-file' });
    } catch (e) {
      throw new ConfigError((e as Error).message);
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
   * Reads a redis.conf-syntax file (config/file.ts): `name value...` per line, `#` comments, Redis
   * quoting, `include FILE`.
   */
  loadFile(path: string): void {
    this.configFile = path;
    readConfigFile(path, (name, value) => {
      // `save` lines add up, as in Redis's redis.conf (`save 900 1` / `save 300 10` are two save
      // points); `save ""` clears them.
      if (name === 'save' && this.fileSaveLines++ > 0 && value.length > 0 && this.get('save') !== '') {
        this.set(name, `${this.get('save')} ${value.toString('utf8')}`);
      } else {
        this.set(name, value);
      }
    });
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
   * that name no option: the caller warns about them (see docs/configuration.md: unlike a flag, the
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
    const skip = new Set<string>(['requirepass-file']);
    if (this.get('requirepass-file') !== '') skip.add('requirepass');
    rewriteConfigFile(
      path,
      (name) => {
        const def = BY_NAME.get(name);
        return def === undefined || skip.has(def.name) ? null : this.configLine(def);
      },
      (written) => DEFS.filter((d) => !written.has(d.name) && !skip.has(d.name) && this.get(d.name) !== canonicalDefault(d)).map((d) => this.configLine(d)),
    );
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
