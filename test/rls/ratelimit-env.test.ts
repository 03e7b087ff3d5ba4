/**
 * envoyproxy/ratelimit's environment onto cellgate's settings (src/rls/ratelimit-mode.ts,
 * ratelimit-env.ts, go-values.ts), in process: the table covers exactly the variables its
 * settings.go reads; values parse as envconfig parses them; Envoy Gateway's and Envoy AI Gateway's
 * environments (fixtures from their source) map onto the settings they mean; the variables with no
 * counterpart are named; the values that cannot be honoured refuse the start, naming the variable.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseBackendUrl } from '../../src/backend/backend-url.js';
import { Config } from '../../src/config.js';
import { GoValueError, parseGoBool, parseGoDuration, parseGoFloat, parseGoInt, parseGoMap } from '../../src/rls/go-values.js';
import { RATELIMIT_VARIABLES } from '../../src/rls/ratelimit-env.js';
import { ratelimitConfig, RatelimitEnvError, type RatelimitStart } from '../../src/rls/ratelimit-mode.js';

const fixture = (path: string) => new URL(`../fixtures/${path}`, import.meta.url);

/** A Deployment fixture's environment as a process would see it. */
function deploymentEnv(path: string): Record<string, string> {
  const doc = parse(readFileSync(fixture(path), 'utf8')) as { env: { name: string; value: string }[] };
  return Object.fromEntries(doc.env.map((e) => [e.name, e.value]));
}
const EG = deploymentEnv('envoy-gateway/ratelimit-deployment.yaml');
const AIGW = deploymentEnv('envoy-ai-gateway/quota-ratelimit-deployment.yaml');
/** The one change until configuration over xDS is in this build: the files instead. */
const FILES = { CONFIG_TYPE: 'FILE' };

function start(env: Record<string, string>, args: string[] = []): RatelimitStart {
  return ratelimitConfig(env, args);
}
function refusal(env: Record<string, string>): string {
  try {
    start(env);
  } catch (e) {
    expect(e).toBeInstanceOf(RatelimitEnvError);
    return (e as Error).message;
  }
  throw new Error('started, expected a refusal');
}
function settings(s: RatelimitStart, names: string[]): Record<string, string> {
  return Object.fromEntries(names.map((n) => [n, s.config.get(n)]));
}

describe('the table', () => {
  it("covers exactly the variables of envoyproxy/ratelimit's settings.go, in its order", () => {
    const names = readFileSync(fixture('envoyproxy-ratelimit/settings-variables.txt'), 'utf8').split('\n').filter((l) => l !== '' && !l.startsWith('#'));
    expect(RATELIMIT_VARIABLES.map((x) => x.name)).toEqual(names);
  });

  it('every default parses as its type (RUNTIME_SUBDIRECTORY has none: without it no file is read at all)', () => {
    expect(() => start({ RUNTIME_SUBDIRECTORY: 'rl' })).not.toThrow();
    expect(refusal({})).toMatch(/^RUNTIME_SUBDIRECTORY is empty/);
  });
});

describe('values as envconfig reads them', () => {
  it('bool: strconv.ParseBool', () => {
    for (const t of ['1', 't', 'T', 'TRUE', 'true', 'True']) expect(parseGoBool(t)).toBe(true);
    for (const f of ['0', 'f', 'F', 'FALSE', 'false', 'False']) expect(parseGoBool(f)).toBe(false);
    for (const bad of ['yes', 'TrUe', '', ' true']) expect(() => parseGoBool(bad)).toThrow(GoValueError);
  });
  it('int: strconv.ParseInt with base 0', () => {
    expect([parseGoInt('8080'), parseGoInt('0x1F90'), parseGoInt('017'), parseGoInt('0o17'), parseGoInt('0b11'), parseGoInt('1_000'), parseGoInt('-5'), parseGoInt('+5'), parseGoInt('0')]).toEqual([8080, 8080, 15, 15, 3, 1000, -5, 5, 0]);
    for (const bad of ['08', '', '1e3', '80 80', '_1', '1__0', '1_', '0x', '9223372036854775808']) expect(() => parseGoInt(bad), bad).toThrow(GoValueError);
  });
  it('duration: time.ParseDuration, in ms', () => {
    expect([parseGoDuration('10s'), parseGoDuration('1h30m'), parseGoDuration('300ms'), parseGoDuration('1.5h'), parseGoDuration('0'), parseGoDuration('-2s'), parseGoDuration('.5s')]).toEqual([10_000, 5_400_000, 300, 5_400_000, 0, -2000, 500]);
    expect(parseGoDuration('1500us')).toBeCloseTo(1.5);
    for (const bad of ['10', '', 's', '1d', '1.s.', '--1s']) expect(() => parseGoDuration(bad), bad).toThrow(GoValueError);
  });
  it('float and map', () => {
    expect([parseGoFloat('0.8'), parseGoFloat('1'), parseGoFloat('1e-1'), parseGoFloat('.5')]).toEqual([0.8, 1, 0.1, 0.5]);
    expect(() => parseGoFloat('0,8')).toThrow(GoValueError);
    expect(parseGoMap('a:1,b:2')).toEqual([['a', '1'], ['b', '2']]);
    expect(parseGoMap('')).toEqual([]);
    expect(() => parseGoMap('a:1:2')).toThrow('invalid map item: "a:1:2"');
  });
  it('a value envoyproxy/ratelimit would refuse refuses the start, naming the variable', () => {
    expect(refusal({ GRPC_PORT: 'abc' })).toBe("GRPC_PORT=abc: 'abc' is not an integer");
    expect(refusal({ SHADOW_MODE: 'yes' })).toContain('SHADOW_MODE=yes');
    expect(refusal({ REDIS_TIMEOUT: '10' })).toContain('REDIS_TIMEOUT=10');
    // Set but empty is not unset: envconfig parses '' and ParseBool refuses it.
    expect(refusal({ USE_STATSD: '' })).toContain('USE_STATSD=');
  });
});

describe("Envoy Gateway's Deployment", () => {
  it('as written (CONFIG_TYPE=GRPC_XDS_SOTW): refused, naming CONFIG_TYPE, until xDS is in the build', () => {
    if (new Config().has('rls-xds-server')) return;
    expect(refusal(EG)).toMatch(/^CONFIG_TYPE=GRPC_XDS_SOTW: configuration over xDS is not in this build/);
  });

  it('with CONFIG_TYPE=FILE: every variable onto its setting', () => {
    const s = start({ ...EG, ...FILES });
    expect(settings(s, [
      'metrics-port', 'metrics-bind', 'rls-port', 'rls-bind', 'loglevel', 'log-format', 'rls-config', 'rls-config-ignore-dotfiles',
      'rls-force-start', 'rls-tls', 'backend', 'rls-prometheus-addr', 'rls-health-backend', 'rls-shadow-mode', 'rls-response-headers',
      'rls-header-names', 'rls-key-prefix', 'save', 'appendonly', 'port', 'bind',
    ])).toEqual({
      'metrics-port': '8080', 'metrics-bind': '0.0.0.0', 'rls-port': '8081', 'rls-bind': '0.0.0.0 -::', loglevel: 'notice', 'log-format': 'human',
      'rls-config': '/data/ratelimit/config', 'rls-config-ignore-dotfiles': 'yes', 'rls-force-start': 'yes', 'rls-tls': 'yes',
      backend: 'redis://redis.redis.svc:6379', 'rls-prometheus-addr': ':19001', 'rls-health-backend': 'first-contact', 'rls-shadow-mode': 'no',
      'rls-response-headers': 'no', 'rls-header-names': 'RateLimit-Limit RateLimit-Remaining RateLimit-Reset', 'rls-key-prefix': '',
      save: '', appendonly: 'no', port: '0', bind: '127.0.0.1',
    });
    // The server's certificate; no client certificate asked for: GRPC_SERVER_TLS_CA_CERT is not read there either.
    const tls = s.config.has('rls-tls-cert-file')
      ? settings(s, ['rls-tls-cert-file', 'rls-tls-key-file', 'rls-tls-ca-cert-file'])
      : settings(s, ['tls-cert-file', 'tls-key-file', 'tls-ca-cert-file', 'tls-auth-clients']);
    expect(Object.values(tls).slice(0, 3)).toEqual(['/certs/tls.crt', '/certs/tls.key', '']);
    expect(s.named).toEqual([
      'PROMETHEUS_MAPPER_YAML (the counters are named as its default mapping names them; the file is not read)',
      'GRPC_SERVER_TLS_CA_CERT (envoyproxy/ratelimit does not read it either (GRPC_CLIENT_TLS_CACERT is the CA of client certificates))',
    ]);
    expect(s.notes).toEqual([]);
  });
});

describe("Envoy AI Gateway's quota Deployment", () => {
  it('with CONFIG_TYPE=FILE: its arguments ignored and named, its level debug, the runtime layout with RUNTIME_WATCH_ROOT', () => {
    const s = start({ ...AIGW, ...FILES }, ['--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system']);
    expect(settings(s, ['loglevel', 'rls-port', 'rls-config', 'rls-config-ignore-dotfiles', 'backend', 'rls-tls', 'rls-prometheus-addr'])).toEqual({
      loglevel: 'debug', 'rls-port': '8081', 'rls-config': '/data/ratelimit/config', 'rls-config-ignore-dotfiles': 'no',
      backend: 'redis://redis.redis-system.svc.cluster.local:6379', 'rls-tls': 'no', 'rls-prometheus-addr': '',
    });
    expect(s.ignoredArgs).toEqual(['--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system']);
  });
});

describe('Redis', () => {
  const base = { REDIS_SOCKET_TYPE: 'tcp', RUNTIME_SUBDIRECTORY: 'rl' };
  const backendOf = (env: Record<string, string>) => start({ ...base, ...env }).config.get('backend');

  it('single: host:port; a redis:// URL with its user, password and db; REDIS_AUTH wins over the URL\'s password; REDIS_TLS → rediss', () => {
    expect(backendOf({ REDIS_URL: 'r:6379' })).toBe('redis://r:6379');
    expect(backendOf({ REDIS_URL: 'redis://u:p%40ss@r:6380/2' })).toBe('redis://u:p%40ss@r:6380/2');
    expect(backendOf({ REDIS_URL: 'redis://u:p@r:6380', REDIS_AUTH: 'admin:s3cr:et' })).toBe('redis://admin:s3cr%3Aet@r:6380');
    expect(backendOf({ REDIS_URL: 'r:6379', REDIS_AUTH: 'only-password' })).toBe('redis://:only-password@r:6379');
    expect(backendOf({ REDIS_URL: 'r:6379', REDIS_TLS: 'true' })).toBe('rediss://r:6379');
    expect(backendOf({ REDIS_URL: '[::1]:6379', REDIS_TYPE: 'SINGLE' })).toBe('redis://[::1]:6379');
  });

  it('cluster: the seed nodes; REDIS_TLS → rediss-cluster://', () => {
    expect(backendOf({ REDIS_TYPE: 'cluster', REDIS_URL: 'a:7000,b:7001,c:7002', REDIS_AUTH: 'pw' })).toBe('redis-cluster://:pw@a:7000,b:7001,c:7002');
    expect(backendOf({ REDIS_TYPE: 'cluster', REDIS_URL: 'a:7000,b:7001', REDIS_TLS: 'true' })).toBe('rediss-cluster://a:7000,b:7001');
  });

  it('sentinel: <master>,<sentinels...> onto redis-sentinel://, REDIS_SENTINEL_AUTH onto backend-sentinel-password; with TLS refused', () => {
    const url = 'redis-sentinel://:pw@s1:26379,s2:26379/mymaster';
    expect(parseBackendUrl(url).mode).toBe('sentinel');
    const env = { ...base, REDIS_TYPE: 'sentinel', REDIS_URL: 'mymaster,s1:26379,s2:26379', REDIS_AUTH: 'pw' };
    expect(backendOf(env)).toBe(url);
    expect(settings(start({ ...env, REDIS_SENTINEL_AUTH: 's3nt' }), ['backend-sentinel-password'])).toEqual({ 'backend-sentinel-password': 's3nt' });
    expect(refusal({ ...env, REDIS_URL: 'mymaster' })).toMatch(/^REDIS_URL: with REDIS_TYPE=sentinel/);
    expect(refusal({ ...env, REDIS_TLS: 'true' })).toMatch(/^REDIS_TLS=true with REDIS_TYPE=sentinel/);
  });

  it('TLS client files onto backend-tls-*, or refused naming the variable while the backend has none', () => {
    const env = { ...base, REDIS_URL: 'r:6379', REDIS_TLS: 'true', REDIS_TLS_CLIENT_CERT: '/redis-certs/tls.crt', REDIS_TLS_CLIENT_KEY: '/redis-certs/tls.key' };
    if (new Config().has('backend-tls-cert-file')) {
      expect(settings(start(env), ['backend-tls-cert-file', 'backend-tls-key-file'])).toEqual({ 'backend-tls-cert-file': '/redis-certs/tls.crt', 'backend-tls-key-file': '/redis-certs/tls.key' });
    } else {
      expect(refusal(env)).toBe("REDIS_TLS_CLIENT_CERT: this build of cellgate has no 'backend-tls-cert-file' setting to honour it");
    }
  });

  it('refused: a unix socket (REDIS_SOCKET_TYPE\'s default), rediss://, memcache, a type of neither', () => {
    expect(refusal({ REDIS_URL: 'r:6379', RUNTIME_SUBDIRECTORY: 'rl' })).toBe('REDIS_SOCKET_TYPE=unix (its default): cellgate reaches Redis over TCP only; set REDIS_SOCKET_TYPE=tcp');
    expect(refusal({ ...base, REDIS_URL: 'rediss://r:6379' })).toMatch(/^REDIS_URL=rediss:\/\/r:6379: envoyproxy\/ratelimit does not read rediss/);
    expect(refusal({ ...base, BACKEND_TYPE: 'memcache' })).toMatch(/^BACKEND_TYPE=memcache/);
    expect(refusal({ ...base, REDIS_URL: 'r:1', REDIS_TYPE: 'ring' })).toBe('REDIS_TYPE=ring: single, cluster or sentinel');
  });

  it('no REDIS_URL: the counts in this process, said in a note', () => {
    const s = start({ RUNTIME_SUBDIRECTORY: 'rl' });
    expect(s.config.get('backend')).toBe('');
    expect(s.notes[0]).toMatch(/^REDIS_URL is not set: the counts are kept in this process/);
  });

  it('REDIS_HEALTH_CHECK_ACTIVE_CONNECTION true: the health check needs the backend always', () => {
    expect(start({ REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: 'true', RUNTIME_SUBDIRECTORY: 'rl' }).config.get('rls-health-backend')).toBe('always');
  });
});

describe('the rest of the mapping', () => {
  const base = { RUNTIME_SUBDIRECTORY: 'rl' };
  it('the runtime directory, its rules, force start and the health rule', () => {
    const s = start({ RUNTIME_ROOT: '/srv/current', RUNTIME_SUBDIRECTORY: 'rl', RUNTIME_APPDIRECTORY: 'limits', RUNTIME_WATCH_ROOT: 'false' });
    expect(s.config.get('rls-config')).toBe('/srv/current/rl/limits');
    expect(start({ ...base, RUNTIME_WATCH_ROOT: 'false', RUNTIME_SUBDIRECTORY: '' }).config.get('rls-config')).toBe('/srv/runtime_data/current/config');
    expect(refusal({ RUNTIME_ROOT: '/x' })).toMatch(/^RUNTIME_SUBDIRECTORY is empty: envoyproxy\/ratelimit would then read no configuration file/);
    expect(start({ ...base, FORCE_START_WITHOUT_INITIAL_CONFIG: 'true' }).config.get('rls-force-start')).toBe('yes');
    const both = start({ ...base, FORCE_START_WITHOUT_INITIAL_CONFIG: 'true', HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: 'true' }).config;
    expect([both.get('rls-force-start'), both.get('rls-ready-needs-limits')]).toEqual(['yes', 'yes']);
    expect(start(base).config.get('rls-ready-needs-limits')).toBe('no');
  });

  it('headers, shadow mode, the key prefix, log level and format, hosts', () => {
    const s = start({
      ...base, LIMIT_RESPONSE_HEADERS_ENABLED: 'true', LIMIT_LIMIT_HEADER: 'X-RateLimit-Limit', LIMIT_REMAINING_HEADER: 'X-RateLimit-Remaining',
      LIMIT_RESET_HEADER: 'X-RateLimit-Reset', SHADOW_MODE: '1', CACHE_KEY_PREFIX: 'rl_', LOG_LEVEL: 'ERROR', LOG_FORMAT: 'JSON', HOST: '127.0.0.1', GRPC_HOST: '::', PORT: '0x1F90',
    });
    expect(settings(s, ['rls-response-headers', 'rls-header-names', 'rls-shadow-mode', 'rls-key-prefix', 'loglevel', 'log-format', 'metrics-bind', 'rls-bind', 'metrics-port'])).toEqual({
      'rls-response-headers': 'yes', 'rls-header-names': 'X-RateLimit-Limit X-RateLimit-Remaining X-RateLimit-Reset', 'rls-shadow-mode': 'yes',
      'rls-key-prefix': 'rl_', loglevel: 'warning', 'log-format': 'json', 'metrics-bind': '127.0.0.1', 'rls-bind': '-0.0.0.0 ::', 'metrics-port': '8080',
    });
    expect(refusal({ ...base, LIMIT_LIMIT_HEADER: 'Rate Limit' })).toBe('LIMIT_LIMIT_HEADER=Rate Limit: not an HTTP header name');
    expect(refusal({ ...base, LOG_LEVEL: 'loud' })).toMatch(/^LOG_LEVEL=loud: not a level/);
  });

  it('gRPC TLS: client certificates required exactly when GRPC_CLIENT_TLS_CACERT is set; a SAN needs rls-tls-client-san', () => {
    const env = { ...base, GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: '/c/tls.crt', GRPC_SERVER_TLS_KEY: '/c/tls.key', GRPC_CLIENT_TLS_CACERT: '/c/ca.crt' };
    const s = start(env);
    if (s.config.has('rls-tls-ca-cert-file')) expect(s.config.get('rls-tls-ca-cert-file')).toBe('/c/ca.crt');
    else expect(settings(s, ['tls-ca-cert-file', 'tls-auth-clients'])).toEqual({ 'tls-ca-cert-file': '/c/ca.crt', 'tls-auth-clients': 'yes' });
    if (!new Config().has('rls-tls-client-san')) {
      expect(refusal({ ...env, GRPC_CLIENT_TLS_SAN: 'envoy' })).toBe("GRPC_CLIENT_TLS_SAN: this build of cellgate has no 'rls-tls-client-san' setting to honour it");
    }
    expect(refusal({ ...base, GRPC_SERVER_USE_TLS: 'true' })).toMatch(/^GRPC_SERVER_TLS_CERT is empty/);
    // Without GRPC_SERVER_USE_TLS the files are not read, as there.
    expect(start({ ...base, GRPC_SERVER_TLS_CERT: '/nope' }).config.get('rls-tls')).toBe('no');
  });

  it('statsd and Prometheus: one sink, as there; Prometheus on its address', () => {
    expect(refusal({ ...base, USE_PROMETHEUS: 'true' })).toMatch(/^USE_STATSD, USE_PROMETHEUS: more than one stats sink/);
    expect(start({ ...base, USE_PROMETHEUS: 'true', USE_STATSD: 'false' }).config.get('rls-prometheus-addr')).toBe(':9090');
    expect(refusal({ ...base, USE_STATSD: 'false', USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: '9090' })).toBe('PROMETHEUS_ADDR=9090: expected host:port or :port');
    expect(refusal({ ...base, PROMETHEUS_PATH: '/stats' })).toBe('PROMETHEUS_PATH=/stats: the counters are served at /metrics only');
  });

  it('named when set to what cellgate does not do; not named when set to what it does', () => {
    const s = start({ ...base, USE_STATSD: 'true', STATSD_HOST: 'statsd', LOCAL_CACHE_SIZE_IN_BYTES: '1048576', NEAR_LIMIT_RATIO: '0.8', DISABLE_STATS: 'false', TRACING_ENABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel:4318' });
    expect(s.named.map((n) => n.split(' ')[0])).toEqual(['USE_STATSD', 'STATSD_HOST', 'LOCAL_CACHE_SIZE_IN_BYTES', 'TRACING_ENABLED', 'OTEL_EXPORTER_OTLP_ENDPOINT']);
    expect(start({ ...base, USE_STATSD: 'false', NEAR_LIMIT_RATIO: '0.8' }).named).toEqual([]);
  });

  it('refused: values that would change what is decided or where the state lives', () => {
    for (const [name, value] of [
      ['STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', 'true'], ['MERGE_DOMAIN_CONFIG', 'true'], ['QUOTA_MODE', 'true'],
      ['RESPONSE_DYNAMIC_METADATA', 'true'], ['REDIS_PERSECOND', 'true'], ['GRPC_UDS', '/tmp/rl.sock'],
      ['REDIS_POOL_ON_EMPTY_BEHAVIOR', 'CREATE'], ['REDIS_TLS_SKIP_HOSTNAME_VERIFICATION', 'true'], ['CONFIG_TYPE', 'file'],
    ]) {
      expect(refusal({ ...base, [name]: value }), name).toMatch(new RegExp(`^${name}=${value.replace(/[/.]/g, '\\$&')}: `));
    }
    for (const [name, value] of [['STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT', 'false'], ['REDIS_POOL_ON_EMPTY_BEHAVIOR', 'wait']]) {
      expect(() => start({ ...base, [name]: value })).not.toThrow();
    }
  });
});
