/**
 * `cellgate-server ratelimit`: cellgate started from envoyproxy/ratelimit's environment variables,
 * as Envoy Gateway's Deployment starts `/bin/ratelimit` (docs/envoy.md, "envoyproxy/ratelimit's
 * environment"). One table, two spellings: each variable (ratelimit-env.ts) is read as
 * envoyproxy/ratelimit reads it and mapped onto the settings of config/params.ts; a variable with
 * no counterpart is named (one log line, by the caller); a value that cannot be honoured refuses the
 * start, naming the variable.
 *
 * The mode writes no file: no snapshot, no journal, no lock in `dir` (the state lives on the
 * backend, REDIS_URL), so it runs on a read-only root filesystem. The RESP port listens on a loopback
 * port the kernel picks (CELLGATE_PORT to choose one): nothing in envoyproxy/ratelimit's world uses it.
 */
import { join } from 'node:path';
import { parseBackendUrl } from '../backend/backend-url.js';
import { Config, ConfigError } from '../config.js';
import type { Logger } from '../log.js';
import { GoValueError, parseGoValue, type GoValue } from './go-values.js';
import { DEPLOYER_VARIABLES, RATELIMIT_VARIABLES, type RatelimitVariable } from './ratelimit-env.js';

/** A refused start: the message names the variable first. */
export class RatelimitEnvError extends Error {}

export interface RatelimitStart {
  config: Config;
  /** Variables with no counterpart, set to a value that asks for something cellgate does not do: `NAME (why)`. */
  named: string[];
  /** Arguments given after `ratelimit` (envoyproxy/ratelimit reads none). */
  ignoredArgs: string[];
  /** What the log should say about the choices made (no Redis...). */
  notes: string[];
}

const ALL = [...RATELIMIT_VARIABLES, ...DEPLOYER_VARIABLES];

/** The variables' values: as set, else envoyproxy/ratelimit's default; `present` says which were set. */
class Values {
  private readonly values = new Map<string, GoValue>();
  readonly present = new Set<string>();

  constructor(env: NodeJS.ProcessEnv) {
    for (const x of ALL) {
      const text = env[x.name];
      if (text !== undefined) this.present.add(x.name);
      // envconfig applies a default only when the variable is unset, and skips a default of ''.
      const raw = text ?? (x.default === null || x.default === '' ? undefined : x.default);
      if (raw === undefined) continue;
      try {
        this.values.set(x.name, parseGoValue(x.type, raw));
      } catch (e) {
        if (e instanceof GoValueError) throw new RatelimitEnvError(`${x.name}=${raw}: ${e.message}`);
        throw e;
      }
    }
  }

  str(name: string): string {
    const v = this.values.get(name);
    return v === undefined ? '' : String(v);
  }

  bool(name: string): boolean {
    return this.values.get(name) === true;
  }

  num(name: string): number {
    const v = this.values.get(name);
    return typeof v === 'number' ? v : 0;
  }

  get(x: RatelimitVariable): GoValue | undefined {
    return this.values.get(x.name);
  }
}

/** Sets a cellgate setting for `variable`; a value the setting refuses refuses the start, naming the variable. */
function setter(config: Config) {
  return (setting: string, value: string, variable: string): void => {
    if (!config.has(setting)) throw new RatelimitEnvError(`${variable}: this build of cellgate has no '${setting}' setting to honour it`);
    try {
      config.set(setting, value);
    } catch (e) {
      if (e instanceof ConfigError) throw new RatelimitEnvError(`${variable}=${value}: ${e.message}`);
      throw e;
    }
  };
}

function port(values: Values, name: string): string {
  const n = values.num(name);
  if (!Number.isInteger(n) || n < 1 || n > 65535) throw new RatelimitEnvError(`${name}=${values.str(name)}: a port between 1 and 65535`);
  return String(n);
}

/**
 * GRPC_HOST's addresses: Go's wildcard listens on IPv4 and IPv6 alike, so 0.0.0.0 (or empty) is both
 * families here too, IPv6 where the host has it.
 */
function listenAddresses(host: string): string {
  if (host === '' || host === '0.0.0.0') return '0.0.0.0 -::';
  if (host === '::' || host === '[::]') return '-0.0.0.0 ::';
  return host.replace(/^\[(.*)\]$/, '$1');
}

/** `host:port` or `:port` (envoyproxy/ratelimit's PROMETHEUS_ADDR) as cellgate's `[host]:port`. */
function hostPort(text: string, variable: string): string {
  const m = /^(\[[^\]]*\]|[^:]*):(\d{1,5})$/.exec(text);
  if (m === null || Number(m[2]) < 1 || Number(m[2]) > 65535) throw new RatelimitEnvError(`${variable}=${text}: expected host:port or :port`);
  return text;
}

/** logrus's levels onto cellgate's (which has none between warning and nothing: error and above log warnings). */
function logLevel(text: string): string {
  const level = text.toLowerCase();
  if (level === 'trace' || level === 'debug') return 'debug';
  if (level === 'info') return 'notice';
  if (['warn', 'warning', 'error', 'fatal', 'panic'].includes(level)) return 'warning';
  throw new RatelimitEnvError(`LOG_LEVEL=${text}: not a level (trace, debug, info, warn, error, fatal, panic)`);
}

/** Reads the environment into a configuration; throws RatelimitEnvError naming the variable. */
export function ratelimitConfig(env: NodeJS.ProcessEnv, args: readonly string[]): RatelimitStart {
  const values = new Values(env);
  const named: string[] = [];
  for (const x of ALL) {
    const value = values.get(x);
    if (x.handling.kind === 'refused' && value !== undefined) {
      const why = x.handling.refuse(value);
      if (why !== null) throw new RatelimitEnvError(`${x.name}=${values.str(x.name)}: ${why}`);
    }
    if (x.handling.kind === 'named' && values.present.has(x.name) && (x.handling.asks?.(value!) ?? true)) named.push(`${x.name} (${x.handling.why})`);
  }
  const config = new Config();
  const set = setter(config);
  const notes: string[] = [];
  // The mode's own: no file is written; RESP on loopback only.
  config.set('save', '');
  config.set('appendonly', 'no');
  config.set('port', '0');
  config.set('bind', '127.0.0.1');

  set('metrics-port', port(values, 'PORT'), 'PORT');
  set('metrics-bind', values.str('HOST') === '' ? '0.0.0.0' : values.str('HOST').replace(/^\[(.*)\]$/, '$1'), 'HOST');
  set('rls-port', port(values, 'GRPC_PORT'), 'GRPC_PORT');
  set('rls-bind', listenAddresses(values.str('GRPC_HOST')), 'GRPC_HOST');
  set('loglevel', logLevel(values.str('LOG_LEVEL')), 'LOG_LEVEL');
  set('log-format', values.str('LOG_FORMAT').toLowerCase() === 'json' ? 'json' : 'human', 'LOG_FORMAT');

  configSource(values, set);
  // FORCE_START serves before a configuration; HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED keeps the
  // health check failing while the configuration has no domain, whatever FORCE_START says.
  set('rls-force-start', values.bool('FORCE_START_WITHOUT_INITIAL_CONFIG') ? 'yes' : 'no', 'FORCE_START_WITHOUT_INITIAL_CONFIG');
  set('rls-ready-needs-limits', values.bool('HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED') ? 'yes' : 'no', 'HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED');
  grpcTls(values, set);

  set('rls-response-headers', values.bool('LIMIT_RESPONSE_HEADERS_ENABLED') ? 'yes' : 'no', 'LIMIT_RESPONSE_HEADERS_ENABLED');
  const headers = ['LIMIT_LIMIT_HEADER', 'LIMIT_REMAINING_HEADER', 'LIMIT_RESET_HEADER'];
  for (const h of headers) {
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(values.str(h))) throw new RatelimitEnvError(`${h}=${values.str(h)}: not an HTTP header name`);
  }
  set('rls-header-names', headers.map((h) => values.str(h)).join(' '), headers.join(', '));
  set('rls-shadow-mode', values.bool('SHADOW_MODE') ? 'yes' : 'no', 'SHADOW_MODE');
  set('rls-key-prefix', values.str('CACHE_KEY_PREFIX'), 'CACHE_KEY_PREFIX');

  const sinks = ['USE_DOG_STATSD', 'USE_STATSD', 'USE_PROMETHEUS'].filter((s) => values.bool(s));
  if (sinks.length > 1 && !values.bool('DISABLE_STATS')) {
    // envoyproxy/ratelimit refuses this itself: "unable to use more than one stats sink at the same time".
    throw new RatelimitEnvError(`${sinks.join(', ')}: more than one stats sink asked for (USE_STATSD is true unless set to false); envoyproxy/ratelimit refuses this too`);
  }
  if (values.bool('USE_PROMETHEUS')) set('rls-prometheus-addr', hostPort(values.str('PROMETHEUS_ADDR'), 'PROMETHEUS_ADDR'), 'PROMETHEUS_ADDR');

  backend(values, set, notes);
  set('rls-health-backend', values.bool('REDIS_HEALTH_CHECK_ACTIVE_CONNECTION') ? 'always' : 'first-contact', 'REDIS_HEALTH_CHECK_ACTIVE_CONNECTION');
  return { config, named, ignoredArgs: [...args], notes };
}

type SetSetting = (setting: string, value: string, variable: string) => void;

/** CONFIG_TYPE: the files of RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, or xDS. */
function configSource(values: Values, set: SetSetting): void {
  const type = values.str('CONFIG_TYPE');
  if (type === 'GRPC_XDS_SOTW') {
    set('rls-xds-server', values.str('CONFIG_GRPC_XDS_SERVER_URL'), 'CONFIG_GRPC_XDS_SERVER_URL');
    set('rls-xds-node-id', values.str('CONFIG_GRPC_XDS_NODE_ID'), 'CONFIG_GRPC_XDS_NODE_ID');
    set('rls-xds-node-metadata', values.str('CONFIG_GRPC_XDS_NODE_METADATA'), 'CONFIG_GRPC_XDS_NODE_METADATA');
    set('rls-xds-retry-ms', String(Math.round(values.num('CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL'))), 'CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL');
    if (values.str('XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES') !== '') set('rls-xds-max-message-bytes', values.str('XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES'), 'XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES');
    if (values.bool('CONFIG_GRPC_XDS_SERVER_USE_TLS')) {
      set('rls-xds-tls', 'yes', 'CONFIG_GRPC_XDS_SERVER_USE_TLS');
      set('rls-xds-tls-cert-file', values.str('CONFIG_GRPC_XDS_CLIENT_TLS_CERT'), 'CONFIG_GRPC_XDS_CLIENT_TLS_CERT');
      set('rls-xds-tls-key-file', values.str('CONFIG_GRPC_XDS_CLIENT_TLS_KEY'), 'CONFIG_GRPC_XDS_CLIENT_TLS_KEY');
      set('rls-xds-tls-ca-cert-file', values.str('CONFIG_GRPC_XDS_SERVER_TLS_CACERT'), 'CONFIG_GRPC_XDS_SERVER_TLS_CACERT');
      set('rls-xds-tls-server-name', values.str('CONFIG_GRPC_XDS_SERVER_TLS_SAN'), 'CONFIG_GRPC_XDS_SERVER_TLS_SAN');
    }
    return;
  }
  if (type !== 'FILE') throw new RatelimitEnvError(`CONFIG_TYPE=${type}: FILE or GRPC_XDS_SOTW`);
  const root = values.str('RUNTIME_ROOT');
  const sub = values.str('RUNTIME_SUBDIRECTORY');
  if (root === '' || (values.bool('RUNTIME_WATCH_ROOT') && sub === '')) {
    // goruntime's loader then loads nothing at all (its "nil loader"): no limit would ever apply.
    throw new RatelimitEnvError(`${root === '' ? 'RUNTIME_ROOT' : 'RUNTIME_SUBDIRECTORY'} is empty: envoyproxy/ratelimit would then read no configuration file at all; name the directory holding ${values.str('RUNTIME_APPDIRECTORY')}/`);
  }
  // RUNTIME_WATCH_ROOT true (a swap of the RUNTIME_ROOT symlink) or false (changes in the directory):
  // the directory is watched through its path, so both reload.
  set('rls-config', join(root, sub, values.str('RUNTIME_APPDIRECTORY')), 'RUNTIME_ROOT');
  set('rls-config-ignore-dotfiles', values.bool('RUNTIME_IGNOREDOTFILES') ? 'yes' : 'no', 'RUNTIME_IGNOREDOTFILES');
}

/**
 * GRPC_SERVER_USE_TLS and its files, onto the rls-tls-* settings (re-read when the files change, as
 * a mounted Secret is updated). Client certificates are required exactly when
 * GRPC_CLIENT_TLS_CACERT is set, and carry GRPC_CLIENT_TLS_SAN when that is set, as there.
 */
function grpcTls(values: Values, set: SetSetting): void {
  if (!values.bool('GRPC_SERVER_USE_TLS')) return;
  set('rls-tls', 'yes', 'GRPC_SERVER_USE_TLS');
  for (const f of ['GRPC_SERVER_TLS_CERT', 'GRPC_SERVER_TLS_KEY']) {
    if (values.str(f) === '') throw new RatelimitEnvError(`${f} is empty: GRPC_SERVER_USE_TLS=true needs the certificate and key files`);
  }
  const ca = values.str('GRPC_CLIENT_TLS_CACERT');
  const san = values.str('GRPC_CLIENT_TLS_SAN');
  set('rls-tls-cert-file', values.str('GRPC_SERVER_TLS_CERT'), 'GRPC_SERVER_TLS_CERT');
  set('rls-tls-key-file', values.str('GRPC_SERVER_TLS_KEY'), 'GRPC_SERVER_TLS_KEY');
  if (ca !== '') set('rls-tls-ca-cert-file', ca, 'GRPC_CLIENT_TLS_CACERT');
  // Without a CA no client certificate is asked for, so there is no name to check (as there).
  if (san !== '' && ca !== '') set('rls-tls-client-san', san, 'GRPC_CLIENT_TLS_SAN');
}

/** REDIS_AUTH: `user:password` or a password (strings.Cut on the first colon, as there). */
function credentials(auth: string): string {
  if (auth === '') return '';
  const colon = auth.indexOf(':');
  const user = colon === -1 ? '' : auth.slice(0, colon);
  const pass = colon === -1 ? auth : auth.slice(colon + 1);
  return `${encodeURIComponent(user)}:${encodeURIComponent(pass)}@`;
}

/**
 * One address of REDIS_URL: `host:port`, or `redis://[user[:password]@]host:port[/db]` as its Redis
 * client reads it (the URL's credentials apply only without REDIS_AUTH).
 */
function address(text: string, auth: string): { hostPort: string; creds: string; db: string } {
  if (/^rediss:\/\//i.test(text)) throw new RatelimitEnvError(`REDIS_URL=${text}: envoyproxy/ratelimit does not read rediss:// either; give host:port and REDIS_TLS=true`);
  if (!text.startsWith('redis://')) return { hostPort: text, creds: credentials(auth), db: '' };
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    throw new RatelimitEnvError(`REDIS_URL: '${text.replace(/\/\/[^@/]*@/, '//***@')}' is not a URL`);
  }
  const db = u.pathname.length > 1 ? u.pathname.slice(1) : (u.searchParams.get('db') ?? '');
  const urlCreds = u.username !== '' || u.password !== '' ? `${u.username}:${u.password}@` : '';
  return { hostPort: u.host, creds: auth !== '' ? credentials(auth) : urlCreds, db };
}

/** REDIS_* onto `backend` and the backend-tls-* settings. */
function backend(values: Values, set: SetSetting, notes: string[]): void {
  const type = values.str('BACKEND_TYPE');
  if (type === 'memcache') throw new RatelimitEnvError('BACKEND_TYPE=memcache: cellgate has no memcached backend; use Redis (REDIS_URL)');
  if (type !== 'redis' && type !== '') throw new RatelimitEnvError(`BACKEND_TYPE=${type}: redis is the only backend`);
  if (!values.present.has('REDIS_URL')) {
    notes.push('REDIS_URL is not set: the counts are kept in this process (exact for one replica, lost at restart; envoyproxy/ratelimit would wait for Redis at /var/run/nutcracker/ratelimit.sock)');
    return;
  }
  const socket = values.str('REDIS_SOCKET_TYPE');
  if (socket !== 'tcp') {
    throw new RatelimitEnvError(`REDIS_SOCKET_TYPE=${socket}${values.present.has('REDIS_SOCKET_TYPE') ? '' : ' (its default)'}: cellgate reaches Redis over TCP only; set REDIS_SOCKET_TYPE=tcp`);
  }
  const redisType = values.str('REDIS_TYPE').toLowerCase();
  const auth = values.str('REDIS_AUTH');
  const tls = values.bool('REDIS_TLS');
  const parts = values.str('REDIS_URL').split(',');
  let url: string;
  if (redisType === 'single') {
    const a = address(parts[0], auth);
    url = `${tls ? 'rediss' : 'redis'}://${a.creds}${a.hostPort}${a.db === '' ? '' : `/${a.db}`}`;
  } else if (redisType === 'cluster') {
    const nodes = parts.map((p) => address(p, auth));
    url = `${tls ? 'rediss-cluster' : 'redis-cluster'}://${nodes[0].creds}${nodes.map((n) => n.hostPort).join(',')}`;
  } else if (redisType === 'sentinel') {
    // `<master name>,<sentinel>,...`, as there.
    if (parts.length < 2) throw new RatelimitEnvError('REDIS_URL: with REDIS_TYPE=sentinel, <master name>,<sentinel host:port>,...');
    if (tls) throw new RatelimitEnvError('REDIS_TLS=true with REDIS_TYPE=sentinel: cellgate\'s backend reaches Sentinels and their master without TLS only (docs/backend.md)');
    url = `redis-sentinel://${credentials(auth)}${parts.slice(1).join(',')}/${encodeURIComponent(parts[0])}`;
    // The Sentinels' own password (REDIS_AUTH is the master's), as there.
    set('backend-sentinel-password', values.str('REDIS_SENTINEL_AUTH'), 'REDIS_SENTINEL_AUTH');
  } else {
    throw new RatelimitEnvError(`REDIS_TYPE=${values.str('REDIS_TYPE')}: single, cluster or sentinel`);
  }
  try {
    parseBackendUrl(url);
  } catch (e) {
    const which = redisType === 'sentinel' ? 'REDIS_TYPE=sentinel' : 'REDIS_URL';
    throw new RatelimitEnvError(`${which}: cellgate's backend cannot take it: ${(e as Error).message}`);
  }
  set('backend', url, 'REDIS_URL');
  if (tls) {
    const files: [string, string][] = [['REDIS_TLS_CLIENT_CERT', 'backend-tls-cert-file'], ['REDIS_TLS_CLIENT_KEY', 'backend-tls-key-file'], ['REDIS_TLS_CACERT', 'backend-tls-ca-cert-file']];
    for (const [variable, setting] of files) if (values.str(variable) !== '') set(setting, values.str(variable), variable);
  }
}

/**
 * What the start logs about the mode: one line naming every variable that has no counterpart (and
 * the arguments, which envoyproxy/ratelimit does not read either), then the choices made.
 */
export function logRatelimitStart(log: Logger, start: RatelimitStart): void {
  const ignored = [...start.named];
  if (start.ignoredArgs.length > 0) ignored.push(`the arguments ${start.ignoredArgs.join(' ')} (envoyproxy/ratelimit reads none)`);
  if (ignored.length > 0) {
    log.warning(`envoyproxy/ratelimit settings with no counterpart in cellgate, ignored: ${ignored.join('; ')}`, { ignored: start.named.map((n) => n.split(' ')[0]), arguments: start.ignoredArgs });
  }
  for (const note of start.notes) log.warning(note);
}

/** Refuses what would write a file in this mode (a CELLGATE_* variable given on top); null when none. */
export function ratelimitFileRefusal(config: Config): string | null {
  if (config.bool('appendonly')) return 'CELLGATE_APPENDONLY: the ratelimit mode writes no file (no journal); the state lives on the backend';
  if (config.get('save') !== '') return 'CELLGATE_SAVE: the ratelimit mode writes no file (no snapshot); the state lives on the backend';
  if (config.get('pidfile') !== '' || config.get('logfile') !== '') return 'CELLGATE_PIDFILE / CELLGATE_LOGFILE: the ratelimit mode writes no file';
  return null;
}
