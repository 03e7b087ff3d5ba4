/**
 * Every environment variable envoyproxy/ratelimit reads (its src/settings/settings.go, through
 * kelseyhightower/envconfig), with its type and default, and what cellgate does with it
 * (docs/envoy.md, "envoyproxy/ratelimit's environment"):
 *  - `mapped`: honoured, onto a setting of the one table (ratelimit-mode.ts maps it);
 *  - `named`: no counterpart; when set to a value that asks for something cellgate does not do, it
 *    is named in the one log line at start and otherwise ignored (statsd, tracing, tuning knobs);
 *  - `refused`: a value that cannot be honoured refuses the start, naming the variable (a value
 *    that would change what is decided, or where the state lives).
 * Every present variable is parsed as envoyproxy/ratelimit parses it first: a value it would refuse
 * (an `x` for a bool) refuses the start here too.
 */
import { type GoType, type GoValue } from './go-values.js';

export type Handling =
  | { kind: 'mapped' }
  /** `asks(value)`: whether the value asks for what cellgate does not do (else it is left unnamed). */
  | { kind: 'named'; why: string; asks?: (v: GoValue) => boolean }
  /** `refuse(value)`: the reason a value cannot be honoured, or null when it can. */
  | { kind: 'refused'; refuse: (v: GoValue) => string | null };

export interface RatelimitVariable {
  name: string;
  type: GoType;
  /** envconfig's `default` tag (applied when the variable is unset); null: none. */
  default: string | null;
  handling: Handling;
}

const MAPPED: Handling = { kind: 'mapped' };
const named = (why: string, asks?: (v: GoValue) => boolean): Handling => ({ kind: 'named', why, asks });
/** Refused when true (a boolean that asks for behaviour cellgate does not have). */
const refusedWhenTrue = (why: string): Handling => ({ kind: 'refused', refuse: (v) => (v === true ? why : null) });
const whenTrue = (v: GoValue): boolean => v === true;

const STATSD = 'cellgate serves its counters in the Prometheus format on the HTTP port (PORT), and pushes no statsd';
const TRACING = 'cellgate exports no OpenTelemetry traces';
const REDIS_TUNING = 'cellgate\'s backend client has its own connection handling (docs/backend.md)';
const PER_SECOND = 'every limit counts on the one backend (REDIS_URL)';
const MEMCACHE = 'cellgate has no memcached backend (BACKEND_TYPE=memcache is refused)';
const XDS_TUNING = 'the xDS client\'s own reconnection and message bounds apply';

const v = (name: string, type: GoType, def: string | null, handling: Handling): RatelimitVariable => ({ name, type, default: def, handling });

/** In settings.go's order. */
export const RATELIMIT_VARIABLES: readonly RatelimitVariable[] = [
  v('HOST', 'string', '0.0.0.0', MAPPED),
  v('PORT', 'int', '8080', MAPPED),
  v('DEBUG_HOST', 'string', '0.0.0.0', named('no debug listener: /rlconfig is on PORT, and there is no pprof')),
  v('DEBUG_PORT', 'int', '6070', named('no debug listener: /rlconfig is on PORT, and there is no pprof')),
  v('GRPC_UDS', 'string', '', { kind: 'refused', refuse: (x) => (x === '' ? null : 'the rate limit service listens on TCP only (GRPC_HOST, GRPC_PORT), not on a unix socket') }),
  v('GRPC_HOST', 'string', '0.0.0.0', MAPPED),
  v('GRPC_PORT', 'int', '8081', MAPPED),
  v('GRPC_MAX_CONNECTION_AGE', 'duration', '24h', named('connections are not aged out (idle ones close after 5 minutes; Envoy reconnects)')),
  v('GRPC_MAX_CONNECTION_AGE_GRACE', 'duration', '1h', named('connections are not aged out')),
  v('GRPC_SERVER_USE_TLS', 'bool', 'false', MAPPED),
  v('GRPC_SERVER_TLS_CERT', 'string', '', MAPPED),
  v('GRPC_SERVER_TLS_KEY', 'string', '', MAPPED),
  v('GRPC_CLIENT_TLS_CACERT', 'string', '', MAPPED),
  v('GRPC_CLIENT_TLS_SAN', 'string', '', MAPPED),
  v('LOG_LEVEL', 'string', 'WARN', MAPPED),
  v('LOG_FORMAT', 'string', 'text', MAPPED),
  v('CONFIG_TYPE', 'string', 'FILE', MAPPED),
  v('FORCE_START_WITHOUT_INITIAL_CONFIG', 'bool', 'false', MAPPED),
  v('CONFIG_GRPC_XDS_NODE_ID', 'string', 'default', MAPPED),
  v('CONFIG_GRPC_XDS_NODE_METADATA', 'string', '', MAPPED),
  v('CONFIG_GRPC_XDS_SERVER_URL', 'string', 'localhost:18000', MAPPED),
  v('CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL', 'duration', '3s', MAPPED),
  v('CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS', 'map', '', named('no headers are added to the xDS stream', (x) => (x as unknown[]).length > 0)),
  v('CONFIG_GRPC_XDS_SERVER_USE_TLS', 'bool', 'false', MAPPED),
  v('CONFIG_GRPC_XDS_CLIENT_TLS_CERT', 'string', '', MAPPED),
  v('CONFIG_GRPC_XDS_CLIENT_TLS_KEY', 'string', '', MAPPED),
  v('CONFIG_GRPC_XDS_SERVER_TLS_CACERT', 'string', '', MAPPED),
  v('CONFIG_GRPC_XDS_SERVER_TLS_SAN', 'string', '', MAPPED),
  v('XDS_CLIENT_BACKOFF_INITIAL_INTERVAL', 'duration', '10s', named(XDS_TUNING)),
  v('XDS_CLIENT_BACKOFF_MAX_INTERVAL', 'duration', '60s', named(XDS_TUNING)),
  v('XDS_CLIENT_BACKOFF_RANDOM_FACTOR', 'float', '0.5', named(XDS_TUNING)),
  v('XDS_CLIENT_BACKOFF_JITTER', 'bool', 'true', named(XDS_TUNING)),
  v('XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES', 'int', null, MAPPED),
  v('USE_DOG_STATSD', 'bool', 'false', named(STATSD, whenTrue)),
  v('USE_DOG_STATSD_MOGRIFIERS', 'list', '', named(STATSD, (x) => (x as unknown[]).length > 0)),
  v('USE_STATSD', 'bool', 'true', named(STATSD, whenTrue)),
  v('STATSD_HOST', 'string', 'localhost', named(STATSD)),
  v('STATSD_PORT', 'int', '8125', named(STATSD)),
  v('EXTRA_TAGS', 'map', '', named('the counters carry no extra labels', (x) => (x as unknown[]).length > 0)),
  v('STATS_FLUSH_INTERVAL', 'duration', '10s', named('the counters are read when scraped')),
  v('DISABLE_STATS', 'bool', 'false', named('the counters are always kept (scraping them is optional)', whenTrue)),
  v('USE_PROMETHEUS', 'bool', 'false', MAPPED),
  v('PROMETHEUS_ADDR', 'string', ':9090', MAPPED),
  v('PROMETHEUS_PATH', 'string', '/metrics', { kind: 'refused', refuse: (x) => (x === '/metrics' ? null : 'the counters are served at /metrics only') }),
  v('PROMETHEUS_MAPPER_YAML', 'string', '', named('the counters are named as its default mapping names them; the file is not read', (x) => x !== '')),
  v('PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS', 'bool', 'false', named('cellgate_rls_request_duration_seconds is in seconds', whenTrue)),
  v('RUNTIME_ROOT', 'string', '/srv/runtime_data/current', MAPPED),
  v('RUNTIME_SUBDIRECTORY', 'string', null, MAPPED),
  v('RUNTIME_APPDIRECTORY', 'string', 'config', MAPPED),
  v('RUNTIME_IGNOREDOTFILES', 'bool', 'false', MAPPED),
  v('RUNTIME_WATCH_ROOT', 'bool', 'true', MAPPED),
  v('EXPIRATION_JITTER_MAX_SECONDS', 'int', '300', named('keys expire when their window ends, without jitter')),
  v('LOCAL_CACHE_SIZE_IN_BYTES', 'int', '0', named('no local over-limit cache of this kind (the backend\'s refusal cache covers the algorithms that refuse)', (x) => x !== 0)),
  v('NEAR_LIMIT_RATIO', 'float', '0.8', named('near_limit counts hits above 80% of a limit', (x) => x !== 0.8)),
  v('CACHE_KEY_PREFIX', 'string', '', MAPPED),
  v('BACKEND_TYPE', 'string', 'redis', MAPPED),
  v('STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', 'bool', 'false', refusedWhenTrue('every limit of a request counts its hits, as envoyproxy/ratelimit does by default')),
  v('LIMIT_RESPONSE_HEADERS_ENABLED', 'bool', 'false', MAPPED),
  v('LIMIT_LIMIT_HEADER', 'string', 'RateLimit-Limit', MAPPED),
  v('LIMIT_REMAINING_HEADER', 'string', 'RateLimit-Remaining', MAPPED),
  v('LIMIT_RESET_HEADER', 'string', 'RateLimit-Reset', MAPPED),
  v('HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED', 'bool', 'false', MAPPED),
  v('REDIS_SOCKET_TYPE', 'string', 'unix', MAPPED),
  v('REDIS_TYPE', 'string', 'SINGLE', MAPPED),
  v('REDIS_URL', 'string', '/var/run/nutcracker/ratelimit.sock', MAPPED),
  v('REDIS_POOL_SIZE', 'int', '10', named(REDIS_TUNING)),
  v('REDIS_AUTH', 'string', '', MAPPED),
  v('REDIS_TLS', 'bool', 'false', MAPPED),
  v('REDIS_TLS_CLIENT_CERT', 'string', '', MAPPED),
  v('REDIS_TLS_CLIENT_KEY', 'string', '', MAPPED),
  v('REDIS_TLS_CACERT', 'string', '', MAPPED),
  v('REDIS_TLS_SKIP_HOSTNAME_VERIFICATION', 'bool', 'false', refusedWhenTrue('the backend\'s certificate is always verified against its host name')),
  v('REDIS_PIPELINE_WINDOW', 'duration', '0', named(REDIS_TUNING)),
  v('REDIS_PIPELINE_LIMIT', 'int', '0', named(REDIS_TUNING)),
  v('REDIS_CLUSTER_PIPELINE_PARALLELISM', 'int', '1', named(REDIS_TUNING)),
  v('REDIS_PERSECOND', 'bool', 'false', refusedWhenTrue(`a second Redis for per-second limits is not supported: ${PER_SECOND}`)),
  v('REDIS_PERSECOND_SOCKET_TYPE', 'string', 'unix', named(PER_SECOND)),
  v('REDIS_PERSECOND_TYPE', 'string', 'SINGLE', named(PER_SECOND)),
  v('REDIS_PERSECOND_URL', 'string', '/var/run/nutcracker/ratelimitpersecond.sock', named(PER_SECOND)),
  v('REDIS_PERSECOND_POOL_SIZE', 'int', '10', named(PER_SECOND)),
  v('REDIS_PERSECOND_AUTH', 'string', '', named(PER_SECOND)),
  v('REDIS_PERSECOND_TLS', 'bool', 'false', named(PER_SECOND)),
  v('REDIS_SENTINEL_AUTH', 'string', '', MAPPED),
  v('REDIS_PERSECOND_SENTINEL_AUTH', 'string', '', named(PER_SECOND)),
  v('REDIS_PERSECOND_PIPELINE_WINDOW', 'duration', '0', named(PER_SECOND)),
  v('REDIS_PERSECOND_PIPELINE_LIMIT', 'int', '0', named(PER_SECOND)),
  v('REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM', 'int', '1', named(PER_SECOND)),
  v('REDIS_HEALTH_CHECK_ACTIVE_CONNECTION', 'bool', 'false', MAPPED),
  v('REDIS_TIMEOUT', 'duration', '10s', named('a limiter call waits backend-timeout (100 ms) for the backend, then backend-unavailable answers')),
  v('REDIS_PERSECOND_TIMEOUT', 'duration', '10s', named(PER_SECOND)),
  v('REDIS_POOL_ON_EMPTY_BEHAVIOR', 'string', 'WAIT', {
    kind: 'refused',
    // As envoyproxy/ratelimit itself: its Redis client refuses CREATE and ERROR at start.
    refuse: (x) => (['CREATE', 'ERROR'].includes(String(x).toUpperCase()) ? `${String(x)} is not supported (envoyproxy/ratelimit refuses it too); remove it or set WAIT` : null),
  }),
  v('REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR', 'string', 'WAIT', named(PER_SECOND)),
  v('REDIS_STARTUP_INITIAL_INTERVAL', 'duration', '1s', named('the backend is retried in the background; /healthcheck says when it is reached')),
  v('REDIS_STARTUP_MAX_INTERVAL', 'duration', '30s', named('the backend is retried in the background; /healthcheck says when it is reached')),
  v('REDIS_STARTUP_MAX_ELAPSED_TIME', 'duration', '0', named('the backend is retried in the background; /healthcheck says when it is reached')),
  v('MEMCACHE_HOST_PORT', 'list', '', named(MEMCACHE)),
  v('MEMCACHE_MAX_IDLE_CONNS', 'int', '2', named(MEMCACHE)),
  v('MEMCACHE_SRV', 'string', '', named(MEMCACHE)),
  v('MEMCACHE_SRV_REFRESH', 'duration', '0', named(MEMCACHE)),
  v('MEMCACHE_TLS', 'bool', 'false', named(MEMCACHE)),
  v('MEMCACHE_TLS_CLIENT_CERT', 'string', '', named(MEMCACHE)),
  v('MEMCACHE_TLS_CLIENT_KEY', 'string', '', named(MEMCACHE)),
  v('MEMCACHE_TLS_CACERT', 'string', '', named(MEMCACHE)),
  v('MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION', 'bool', 'false', named(MEMCACHE)),
  v('SHADOW_MODE', 'bool', 'false', MAPPED),
  v('QUOTA_MODE', 'bool', 'false', refusedWhenTrue('a global quota mode is not supported (quota_mode per descriptor is)')),
  v('RESPONSE_DYNAMIC_METADATA', 'bool', 'false', refusedWhenTrue('answers carry no dynamic metadata')),
  v('MERGE_DOMAIN_CONFIG', 'bool', 'false', refusedWhenTrue('a domain is configured by one file (or one resource) only')),
  v('TRACING_ENABLED', 'bool', 'false', named(TRACING, whenTrue)),
  v('TRACING_SERVICE_NAME', 'string', 'RateLimit', named(TRACING)),
  v('TRACING_SERVICE_NAMESPACE', 'string', '', named(TRACING)),
  v('TRACING_SERVICE_INSTANCE_ID', 'string', '', named(TRACING)),
  v('TRACING_EXPORTER_PROTOCOL', 'string', 'http', named(TRACING)),
  v('TRACING_SAMPLING_RATE', 'float', '1', named(TRACING)),
];

/**
 * Variables envoyproxy/ratelimit itself does not read but its deployers set: named with the others
 * (Envoy Gateway writes GRPC_SERVER_TLS_CA_CERT; OpenTelemetry's exporter reads its own).
 */
export const DEPLOYER_VARIABLES: readonly RatelimitVariable[] = [
  v('GRPC_SERVER_TLS_CA_CERT', 'string', null, named('envoyproxy/ratelimit does not read it either (GRPC_CLIENT_TLS_CACERT is the CA of client certificates)')),
  v('OTEL_EXPORTER_OTLP_ENDPOINT', 'string', null, named(TRACING)),
];
