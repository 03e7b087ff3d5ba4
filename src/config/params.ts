/**
 * The configuration's parameter table: every option cellgate knows, with the kind of value it takes,
 * its default, whether CONFIG SET may change it, and its `--help` text; and the Redis directives and
 * values cellgate refuses, with the reason. The same table serves the config file, the environment,
 * the flags, CONFIG GET/SET/REWRITE and `--help`, so a name means one thing everywhere.
 */
import { defaultClientsMemoryBytes } from '../server/client-memory.js';

export type Kind =
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

export interface ConfigDef {
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

export const DEFS: ConfigDef[] = [
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
  // Redis's default for normal clients is 0 0 0 (unlimited); see docs/security.md for ours.
  { name: 'client-output-buffer-limit', kind: { type: 'output-limits' }, default: 'normal 268435456 67108864 60 slave 268435456 67108864 60 pubsub 33554432 8388608 60', mutable: true, help: 'disconnect clients whose unsent output exceeds <hard>, or <soft> for <soft-seconds>' },
  { name: 'maxmemory', kind: { type: 'memory' }, default: '0', mutable: true, help: 'memory limit (0 = none)' },
  // Redis's default is 0 (off); a share of the V8 heap limit instead (docs/security.md, client-memory.ts).
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
  { name: 'backend', kind: { type: 'string' }, default: '', mutable: false, sensitive: true, help: 'where limiter state lives: empty = this process; redis://[[user]:password@]host:port[/db], rediss://... (TLS), redis-cluster://[[user]:password@]host:port[,host:port...] (rediss-cluster:// over TLS) or redis-sentinel://[[user]:password@]host:port[,host:port...]/<master name>[/db] (docs/backend.md)' },
  { name: 'backend-sentinel-username', kind: { type: 'string' }, default: '', mutable: false, help: 'user name for the Sentinels themselves of a redis-sentinel:// backend (the URL\'s credentials are the master\'s)' },
  { name: 'backend-sentinel-password', kind: { type: 'string' }, default: '', mutable: false, sensitive: true, help: 'password for the Sentinels themselves of a redis-sentinel:// backend (envoyproxy/ratelimit\'s REDIS_SENTINEL_AUTH)' },
  { name: 'backend-tls-cert-file', kind: { type: 'string' }, default: '', mutable: true, help: 'client certificate (PEM) the backend connections present over TLS; re-read when it changes' },
  { name: 'backend-tls-key-file', kind: { type: 'string' }, default: '', mutable: true, help: 'private key (PEM) of backend-tls-cert-file; re-read when it changes' },
  { name: 'backend-tls-ca-cert-file', kind: { type: 'string' }, default: '', mutable: true, help: 'CA certificates (PEM) the backend\'s certificate is checked against, besides the system\'s (rediss://, rediss-cluster://); re-read when it changes' },
  { name: 'backend-prefix', kind: { type: 'string' }, default: 'cellgate:', mutable: false, help: 'prefix of every key cellgate writes to the backend' },
  { name: 'backend-timeout', kind: { type: 'int', min: 1, max: 600_000 }, default: '100', mutable: true, help: 'milliseconds a limiter call waits for the backend before it is answered by backend-unavailable' },
  { name: 'backend-unavailable', kind: { type: 'enum', values: ['local', 'allow', 'deny'] }, default: 'local', mutable: true, help: 'answer while the backend is down or slow: local (decide in this process), allow (fail open) or deny (fail closed)' },
  { name: 'dir', kind: { type: 'string' }, default: './data', mutable: false, help: 'snapshot directory' },
  { name: 'dbfilename', kind: { type: 'filename' }, default: 'cellgate.snap', mutable: true, help: 'snapshot file name' },
  { name: 'save', kind: { type: 'save' }, default: '3600 1 300 100 60 10000', mutable: true, help: 'snapshot after <seconds> if <changes>' },
  // Redis's default is yes; for soft limiter state refusing every call is the worse outage (docs/persistence.md, "Write errors").
  { name: 'stop-writes-on-bgsave-error', kind: { type: 'bool' }, default: 'no', mutable: true, help: 'refuse writes (MISCONF) while the last background save failed' },
  { name: 'snapshot-corrupt-policy', kind: { type: 'enum', values: ['refuse', 'move-aside'] }, default: 'refuse', mutable: false, help: 'a snapshot that fails validation at start: refuse to start, or rename it to <file>.corrupt-<timestamp> and start empty' },
  { name: 'key-load-delay', kind: { type: 'int', min: 0, max: 1_000_000 }, default: '0', mutable: false, help: 'testing: busy-wait this many microseconds per key loaded (as Redis)' },
  { name: 'appendonly', kind: { type: 'bool' }, default: 'no', mutable: true, help: 'keep a journal of every state change (docs/journal-format.md): a crash loses at most appendfsync\'s window' },
  { name: 'appendfsync', kind: { type: 'enum', values: ['always', 'everysec', 'no'] }, default: 'everysec', mutable: true, help: 'journal fsync: always (before each event-loop turn\'s replies), everysec (in the background), no (left to the OS)' },
  { name: 'appendfilename', kind: { type: 'aofname', what: 'filename' }, default: 'appendonly.aof', mutable: false, help: 'prefix of the journal\'s files (manifest, base, incremental)' },
  { name: 'appenddirname', kind: { type: 'aofname', what: 'dirname' }, default: 'appendonlydir', mutable: false, help: 'folder inside dir holding the journal\'s files' },
  { name: 'auto-aof-rewrite-percentage', kind: { type: 'int', min: 0, max: 2_147_483_647 }, default: '100', mutable: true, help: 'rewrite the journal when it grew this many percent over its size after the last rewrite (0 = never)' },
  { name: 'auto-aof-rewrite-min-size', kind: { type: 'memory' }, default: '67108864', mutable: true, help: 'no automatic journal rewrite below this size' },
  { name: 'aof-load-worker', kind: { type: 'enum', values: ['yes', 'no', 'test-fail'] }, default: 'yes', mutable: false, help: 'at start, read and check the journal\'s records in a worker thread while the main thread applies them, given two CPUs or more (no: on the main thread; test-fail, for tests: the worker fails after its first batch)' },
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
  { name: 'rls-port', kind: { type: 'int', min: 0, max: 65535 }, default: '0', mutable: false, help: 'gRPC port of Envoy\'s rate limit service, envoyproxy/ratelimit\'s 8081 (0 = off; docs/envoy.md)' },
  { name: 'rls-bind', kind: { type: 'addresses' }, default: '', mutable: false, help: 'addresses the rate limit service listens on (empty = those of bind)' },
  { name: 'rls-config', kind: { type: 'string' }, default: '', mutable: false, help: 'directory of envoyproxy/ratelimit YAML files (every *.yaml, one domain each; regular files of at most 1 MiB, 1,000 files), watched through its path (a swapped symlink or a re-created directory reloads) and reloaded on SIGHUP' },
  { name: 'rls-config-ignore-dotfiles', kind: { type: 'bool' }, default: 'no', mutable: false, help: 'skip the files of rls-config whose names start with a dot (envoyproxy/ratelimit\'s RUNTIME_IGNOREDOTFILES)' },
  { name: 'rls-health-backend', kind: { type: 'enum', values: ['always', 'first-contact'] }, default: 'always', mutable: true, help: 'when /healthcheck needs the backend reachable: always, or only until it was first reached (envoyproxy/ratelimit\'s REDIS_HEALTH_CHECK_ACTIVE_CONNECTION false)' },
  { name: 'rls-prometheus-addr', kind: { type: 'string' }, default: '', mutable: false, help: 'also serve the metrics port on this [host]:port (an empty host: every IPv4 address), as envoyproxy/ratelimit\'s PROMETHEUS_ADDR; empty = off' },
  { name: 'rls-force-start', kind: { type: 'bool' }, default: 'no', mutable: false, help: 'count the rate limit service as ready (/readyz, /healthcheck, gRPC health) before a first configuration has loaded; calls are refused until one has (envoyproxy/ratelimit\'s FORCE_START_WITHOUT_INITIAL_CONFIG)' },
  { name: 'rls-ready-needs-limits', kind: { type: 'bool' }, default: 'no', mutable: true, help: 'count the rate limit service ready only while its configuration has at least one domain (envoyproxy/ratelimit\'s HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED); an empty configuration is otherwise a configuration' },
  { name: 'rls-tls', kind: { type: 'bool' }, default: 'no', mutable: false, help: 'serve the rate limit service over TLS (rls-tls-cert-file, rls-tls-key-file, rls-tls-ca-cert-file; each defaults to the server\'s tls-* file), certificates re-read when their files change and on CONFIG SET' },
  { name: 'rls-tls-cert-file', kind: { type: 'string' }, default: '', mutable: true, help: 'certificate of the gRPC port (PEM; empty = tls-cert-file), re-read when the file changes (envoyproxy/ratelimit\'s GRPC_SERVER_TLS_CERT)' },
  { name: 'rls-tls-key-file', kind: { type: 'string' }, default: '', mutable: true, help: 'its private key (PEM; empty = tls-key-file, decrypted with tls-key-file-pass), re-read when the file changes (GRPC_SERVER_TLS_KEY)' },
  { name: 'rls-tls-ca-cert-file', kind: { type: 'string' }, default: '', mutable: true, help: 'CA of client certificates (PEM); when set, every client must present one it signed (GRPC_CLIENT_TLS_CACERT). Empty = tls-ca-cert-file, as tls-auth-clients says' },
  { name: 'rls-tls-client-san', kind: { type: 'string' }, default: '', mutable: true, help: 'a name a client certificate must carry among its subject alternative names (GRPC_CLIENT_TLS_SAN); empty = any' },
  { name: 'rls-max-connections-per-peer', kind: { type: 'int', min: 0, max: 1_000_000 }, default: '256', mutable: false, help: 'most gRPC connections open at once from one remote address, so one peer cannot take all of rls-max-connections (0 = no share)' },
  { name: 'rls-handshake-timeout', kind: { type: 'int', min: 10, max: 600_000 }, default: '10000', mutable: false, help: 'milliseconds a gRPC connection has, from its accept, to finish its TLS handshake and send HTTP/2\'s preface and SETTINGS; then it is closed' },
  { name: 'rls-max-unfinished-bytes-per-connection', kind: { type: 'memory', min: 4096 }, default: '4194304', mutable: false, help: 'most bytes one gRPC connection\'s unfinished request messages may hold; a call that would cross it ends with RESOURCE_EXHAUSTED' },
  { name: 'rls-max-unfinished-bytes', kind: { type: 'memory', min: 4096 }, default: '67108864', mutable: false, help: 'most bytes all gRPC connections\' unfinished request messages may hold together; a call that would cross it ends with RESOURCE_EXHAUSTED' },
  { name: 'rls-message-timeout', kind: { type: 'int', min: 10, max: 3_600_000 }, default: '10000', mutable: false, help: 'milliseconds a gRPC call has, from its stream\'s opening, to send its whole request message; then it ends with DEADLINE_EXCEEDED' },
  { name: 'rls-shadow-mode', kind: { type: 'bool' }, default: 'no', mutable: true, help: 'count as configured but answer OK to every request (envoyproxy/ratelimit\'s SHADOW_MODE)' },
  { name: 'rls-response-headers', kind: { type: 'bool' }, default: 'no', mutable: true, help: 'add the limit, remaining and reset headers to each answer (envoyproxy/ratelimit\'s LIMIT_RESPONSE_HEADERS_ENABLED)' },
  { name: 'rls-header-names', kind: { type: 'string' }, default: 'RateLimit-Limit RateLimit-Remaining RateLimit-Reset', mutable: true, help: 'the names of those three headers, space-separated (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER)' },
  { name: 'rls-key-prefix', kind: { type: 'string' }, default: '', mutable: false, help: 'prefix of the rate limit service\'s cache keys (envoyproxy/ratelimit\'s CACHE_KEY_PREFIX)' },
  { name: 'rls-max-message-bytes', kind: { type: 'memory', min: 4096 }, default: '1048576', mutable: false, help: 'largest gRPC request message the rate limit service accepts' },
  { name: 'rls-max-connections', kind: { type: 'int', min: 1, max: 1_000_000 }, default: '1024', mutable: false, help: 'most gRPC connections open at once; a new one beyond it is closed' },
  // The xDS client of the rate limit service (docs/envoy.md, "Configuration over xDS"), as envoyproxy/ratelimit's CONFIG_GRPC_XDS_*.
  { name: 'rls-xds-server', kind: { type: 'string' }, default: '', mutable: false, help: 'host:port of an xDS management server that pushes the rate limit configuration (state of the world over ADS; empty = none). Never together with rls-config' },
  { name: 'rls-xds-node-id', kind: { type: 'string' }, default: 'default', mutable: false, help: 'the node id cellgate subscribes with (the xDS server picks the configuration by it)' },
  { name: 'rls-xds-node-metadata', kind: { type: 'string' }, default: '', mutable: false, help: 'the node\'s metadata, key=value pairs separated by commas (a pair without = is ignored, as envoyproxy/ratelimit does)' },
  { name: 'rls-xds-tls', kind: { type: 'bool' }, default: 'no', mutable: false, help: 'reach the xDS server over TLS' },
  { name: 'rls-xds-tls-cert-file', kind: { type: 'string' }, default: '', mutable: false, help: 'client certificate for the xDS server (PEM), re-read when the file changes' },
  { name: 'rls-xds-tls-key-file', kind: { type: 'string' }, default: '', mutable: false, help: 'its private key (PEM), re-read when the file changes' },
  { name: 'rls-xds-tls-ca-cert-file', kind: { type: 'string' }, default: '', mutable: false, help: 'CA certificates that sign the xDS server\'s certificate, trusted besides the system\'s (PEM), re-read when the file changes' },
  { name: 'rls-xds-tls-server-name', kind: { type: 'string' }, default: '', mutable: false, help: 'the name the xDS server\'s certificate must carry (empty = the host of rls-xds-server)' },
  { name: 'rls-xds-retry-ms', kind: { type: 'int', min: 10, max: 600_000 }, default: '3000', mutable: false, help: 'milliseconds before reconnecting to the xDS server; doubled after each stream that broke within 30 s, up to 60 s' },
  { name: 'rls-xds-max-message-bytes', kind: { type: 'memory', min: 4096 }, default: '4194304', mutable: false, help: 'largest message accepted from the xDS server; a larger one breaks the stream (logged) and the configuration in force stays' },
  { name: 'rls-xds-first-response-ms', kind: { type: 'int', min: 100, max: 3_600_000 }, default: '30000', mutable: false, help: 'milliseconds the xDS server has to send its first response on a new stream before it is logged and the stream opened again' },
];

export const BY_NAME = new Map(DEFS.map((d) => [d.name, d]));

/**
 * Redis directives cellgate does not implement, with the reason: a redis.conf that sets one gets that
 * reason at start instead of a bare "unknown option", so nobody thinks it took effect.
 */
export const REFUSED: Record<string, string> = {
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
export const REFUSED_VALUES: Record<string, string> = {
  'daemonize yes': 'cellgate does not fork into the background: run it in the foreground under a supervisor (systemd Type=simple, a container runtime)',
  'supervised systemd': 'cellgate does not send sd_notify (Node cannot write to the notify socket without a native module): use supervised no with systemd Type=simple',
  'supervised upstart': 'cellgate does not raise SIGSTOP for upstart: use supervised no',
};

/** Every option with its default and help text, for `--help` (generated from the table, so never stale). */
export function optionsHelp(): string {
  const width = Math.max(...DEFS.map((d) => d.name.length)) + 2;
  return DEFS.map((d) => {
    const def = d.default === '' ? '""' : d.default;
    return `  --${d.name.padEnd(width)}${d.help} (default: ${def}${d.mutable ? '; CONFIG SET can change it' : ''})`;
  }).join('\n');
}
