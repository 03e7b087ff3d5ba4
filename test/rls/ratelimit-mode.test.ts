/**
 * `cellgate-server ratelimit` as a process with exactly Envoy Gateway's environment (from its
 * source: test/fixtures/envoy-gateway), a real redis-server as REDIS_URL, free ports and the
 * certificates made here: what changes is only what must (the paths of the files, the ports, the
 * Redis address, and CONFIG_TYPE=FILE where a test reads files; the xDS one keeps CONFIG_TYPE). It answers
 * /healthcheck as envoyproxy/ratelimit does, gRPC over TLS with the file's limits counted in Redis,
 * /rlconfig, /json and the metrics on PROMETHEUS_ADDR; names what it ignores in one line; writes no
 * file; and its health follows the backend and the configuration.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { freePort } from '../helpers/server.js';
import { randomFreePort } from '../helpers/ports.js';
import { RedisNode, stopAllRedis } from '../helpers/redis.js';
import { RateLimitServiceClient } from './helpers.js';
import { resource, TYPE_URL, XdsTestServer } from './xds-server.js';
import { deploymentEnv, eventually, httpGet, makeCerts, runMode, type ModeProcess } from './ratelimit-helpers.js';

const EG = deploymentEnv('envoy-gateway/ratelimit-deployment.yaml');
const AIGW = deploymentEnv('envoy-ai-gateway/quota-ratelimit-deployment.yaml');
const root = mkdtempSync(join(tmpdir(), 'cellgate-ratelimit-mode-'));
const certs = join(root, 'certs');
const running: ModeProcess[] = [];
let redis: RedisNode;

beforeAll(async () => {
  makeCerts(certs);
  redis = await RedisNode.start();
});
afterAll(async () => {
  for (const m of running) await m.destroy();
  await stopAllRedis();
  rmSync(root, { recursive: true, force: true });
});

const LIMITS = 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n';

/** A runtime tree as RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, with `files`. */
function runtimeRoot(files: Record<string, string>): string {
  const data = mkdtempSync(join(root, 'data-'));
  mkdirSync(join(data, 'ratelimit', 'config'), { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(data, 'ratelimit', 'config', name), text);
  return data;
}

/** Envoy Gateway's environment with what must change: file paths, ports, the Redis address, CONFIG_TYPE. */
async function egEnv(data: string, redisUrl: string): Promise<{ env: Record<string, string>; port: number; grpcPort: number; promPort: number }> {
  const port = await freePort();
  const grpcPort = await freePort();
  const promPort = await freePort();
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(EG)) env[k] = v.startsWith('/certs/') ? join(certs, v.slice('/certs/'.length)) : v;
  Object.assign(env, { RUNTIME_ROOT: data, REDIS_URL: redisUrl, CONFIG_TYPE: 'FILE', PORT: String(port), GRPC_PORT: String(grpcPort), PROMETHEUS_ADDR: `:${promPort}` });
  return { env, port, grpcPort, promPort };
}

function start(env: Record<string, string>, args: string[] = []): ModeProcess {
  const m = runMode(env, args);
  running.push(m);
  return m;
}

function shouldRateLimit(port: number, value: string): Promise<{ overall_code: string; statuses: { current_limit: { requests_per_unit: number } | null }[] }> {
  const client = new RateLimitServiceClient(`127.0.0.1:${port}`, grpc.credentials.createSsl(readFileSync(join(certs, 'ca.crt'))));
  return new Promise((resolve, reject) => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    (client as any).ShouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value }] }] }, { deadline: Date.now() + 20_000 }, (e: Error | null, r: never) => {
      client.close();
      if (e) reject(e);
      else resolve(r);
    });
  });
}

describe("the ratelimit mode with Envoy Gateway's environment", () => {
  it('as written: configured over xDS with TLS both ways, subscribes as envoy-ratelimit and serves what is pushed', async () => {
    const xds = new XdsTestServer({ cert: join(certs, 'tls.crt'), key: join(certs, 'tls.key'), ca: join(certs, 'ca.crt') });
    await xds.start();
    try {
      const data = runtimeRoot({});
      const { env, port, grpcPort } = await egEnv(data, `127.0.0.1:${redis.port}`);
      // Only the xDS server's address changes from what Envoy Gateway writes.
      const m = start({ ...env, CONFIG_TYPE: EG.CONFIG_TYPE!, CONFIG_GRPC_XDS_SERVER_URL: `127.0.0.1:${xds.port}`, XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: '65536' });
      // FORCE_START_WITHOUT_INITIAL_CONFIG true: healthy while the first snapshot is awaited.
      await eventually(async () => (await httpGet(port, '/healthcheck'))?.status === 200, '/healthcheck 200 before any snapshot', m);
      await eventually(() => Promise.resolve(xds.requests.length > 0), 'the first DiscoveryRequest over mutual TLS', m);
      const first = xds.requests[0] as unknown as { node: { id: string }; type_url: string };
      expect(first.node.id).toBe('envoy-ratelimit');
      expect(first.type_url).toBe(TYPE_URL);
      xds.push('v1', [resource({ name: 'edge', domain: 'edge', descriptors: [{ key: 'remote_address', rate_limit: { unit: 'MINUTE', requests_per_unit: 2 } }] })]);
      await eventually(async () => (await httpGet(port, '/rlconfig'))?.body !== '', 'the pushed configuration in force', m);
      expect((await httpGet(port, '/rlconfig'))!.body).toBe('edge.remote_address: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n');
      const codes = [];
      for (let i = 0; i < 3; i++) codes.push((await shouldRateLimit(grpcPort, '10.7.7.7')).overall_code);
      expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
      expect(m.logs.join('\n')).not.toMatch(/XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES/);
    } finally {
      xds.stop();
    }
  });

  it('XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES below what cellgate allows: refused at start, naming it', async () => {
    const data = runtimeRoot({});
    const { env } = await egEnv(data, `127.0.0.1:${redis.port}`);
    const m = start({ ...env, CONFIG_TYPE: 'GRPC_XDS_SOTW', XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: '100' });
    expect(await m.exited).toBe(1);
    expect(m.logs.join('\n')).toContain('XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES');
  });

  it('serves /healthcheck, gRPC over TLS counted in Redis, /rlconfig, /json and the metrics; names what it ignores; writes no file', async () => {
    const data = runtimeRoot({ 'edge.yaml': LIMITS });
    const { env, port, grpcPort, promPort } = await egEnv(data, `127.0.0.1:${redis.port}`);
    const m = start(env);
    await eventually(async () => (await httpGet(port, '/healthcheck'))?.status === 200, '/healthcheck 200', m);
    expect(await httpGet(port, '/healthcheck')).toEqual({ status: 200, body: 'OK', type: 'text/plain; charset=utf-8' });

    // Two a minute per address, decided on the backend.
    const codes = [];
    for (let i = 0; i < 3; i++) codes.push((await shouldRateLimit(grpcPort, '10.0.0.1')).overall_code);
    expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    const keys = (await redis.call('KEYS', 'cellgate:*')) as string[];
    expect(keys.some((k) => k.startsWith('cellgate:edge_remote_address_10.0.0.1_'))).toBe(true);

    expect((await httpGet(port, '/rlconfig'))!.body).toBe('edge.remote_address: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n');
    const json = await fetch(`http://127.0.0.1:${port}/json`, { method: 'POST', body: JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value: '10.0.0.1' }] }] }) });
    expect(json.status).toBe(429);
    const prom = await httpGet(promPort, '/metrics');
    expect(prom!.status).toBe(200);
    // Over: the third gRPC call and the /json one.
    expect(prom!.body).toMatch(/ratelimit_service_rate_limit_over_limit\{domain="edge",key1="remote_address"\} 2\n/);

    const named = m.logs.filter((l) => l.includes('envoyproxy/ratelimit settings with no counterpart in cellgate, ignored'));
    expect(named).toHaveLength(1);
    expect(named[0]).toContain('PROMETHEUS_MAPPER_YAML (');
    expect(named[0]).toContain('GRPC_SERVER_TLS_CA_CERT (');

    expect(await m.stop()).toBe(0);
    // Nothing written: not in its working directory, not in the runtime tree.
    expect(readdirSync(m.cwd)).toEqual([]);
    expect(readdirSync(join(data, 'ratelimit', 'config'))).toEqual(['edge.yaml']);
  });

  it('Redis not reachable: /healthcheck 500 with an empty body; 200 once reached, and it stays 200 when Redis goes away (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION false) but not with true', async () => {
    const redisPort = await randomFreePort();
    const data = runtimeRoot({ 'edge.yaml': LIMITS });
    const a = await egEnv(data, `127.0.0.1:${redisPort}`);
    const b = await egEnv(data, `127.0.0.1:${redisPort}`);
    const lenient = start(a.env);
    const strict = start({ ...b.env, REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: 'true' });
    for (const [m, port] of [[lenient, a.port], [strict, b.port]] as const) {
      await eventually(async () => (await httpGet(port, '/healthcheck')) !== null, 'the HTTP port', m);
      expect(await httpGet(port, '/healthcheck')).toEqual({ status: 500, body: '', type: null });
    }
    const node = await RedisNode.start({ port: redisPort });
    for (const [m, port] of [[lenient, a.port], [strict, b.port]] as const) {
      await eventually(async () => (await httpGet(port, '/healthcheck'))?.status === 200, '/healthcheck 200 with Redis up', m);
    }
    await node.stop();
    await eventually(async () => /cellgate_backend_up 0/.test((await httpGet(b.port, '/metrics'))?.body ?? ''), 'the backend marked down', strict);
    await eventually(async () => (await httpGet(b.port, '/healthcheck'))?.status === 500, 'strict: /healthcheck 500', strict);
    await eventually(async () => /cellgate_backend_up 0/.test((await httpGet(a.port, '/metrics'))?.body ?? ''), 'the backend marked down', lenient);
    expect((await httpGet(a.port, '/healthcheck'))?.status).toBe(200);
    // Still deciding (backend-unavailable local): the service can answer.
    expect((await shouldRateLimit(a.grpcPort, '10.9.9.9')).overall_code).toBe('OK');
  });

  it('an empty directory is a configuration (healthy, as envoyproxy/ratelimit); HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: /healthcheck 500 until a file appears', async () => {
    const empty = await egEnv(runtimeRoot({}), `127.0.0.1:${redis.port}`);
    const plain = start({ ...empty.env, FORCE_START_WITHOUT_INITIAL_CONFIG: 'false' });
    await eventually(async () => (await httpGet(empty.port, '/healthcheck'))?.status === 200, 'an empty configuration is healthy', plain);

    const data = runtimeRoot({});
    const { env, port } = await egEnv(data, `127.0.0.1:${redis.port}`);
    const m = start({ ...env, FORCE_START_WITHOUT_INITIAL_CONFIG: 'true', HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: 'true' });
    await eventually(async () => (await httpGet(port, '/healthcheck')) !== null, 'the HTTP port', m);
    // Loaded (the empty directory) but without a domain: not healthy, whatever FORCE_START says.
    await eventually(async () => /cellgate_rls_config_loaded 1/.test((await httpGet(port, '/metrics'))?.body ?? ''), 'the empty configuration loaded', m);
    expect((await httpGet(port, '/healthcheck'))?.status).toBe(500);
    expect((await httpGet(port, '/readyz'))?.body).toMatch(/has no domain/);
    writeFileSync(join(data, 'ratelimit', 'config', 'edge.yaml'), LIMITS);
    await eventually(async () => (await httpGet(port, '/healthcheck'))?.status === 200, '/healthcheck 200 once loaded', m);
  });

  it('FORCE_START_WITHOUT_INITIAL_CONFIG true (as Envoy Gateway sets it): healthy before any configuration', async () => {
    const data = runtimeRoot({});
    const { env, port } = await egEnv(data, `127.0.0.1:${redis.port}`);
    const m = start(env);
    await eventually(async () => (await httpGet(port, '/healthcheck'))?.status === 200, '/healthcheck 200 without a configuration', m);
    expect((await httpGet(port, '/readyz'))?.status).toBe(200);
  });
});

describe("the ratelimit mode with Envoy AI Gateway's quota Deployment", () => {
  it('its environment and arguments (CONFIG_TYPE=FILE): the arguments named in the one line, plaintext gRPC decides', async () => {
    const data = runtimeRoot({ 'edge.yaml': LIMITS });
    const grpcPort = await freePort();
    const port = await freePort();
    const env = { ...AIGW, RUNTIME_ROOT: data, REDIS_URL: `127.0.0.1:${redis.port}`, CONFIG_TYPE: 'FILE', GRPC_PORT: String(grpcPort), PORT: String(port) };
    const m = start(env, ['--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system']);
    await eventually(async () => (await httpGet(port, '/healthcheck'))?.status === 200, '/healthcheck 200', m);
    const client = new RateLimitServiceClient(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure());
    const r = await new Promise<{ overall_code: string }>((resolve, reject) => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      (client as any).ShouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value: 'ai' }] }], hits_addend: 2 }, { deadline: Date.now() + 20_000 }, (e: Error | null, x: never) => (e ? reject(e) : resolve(x)));
    });
    client.close();
    expect(r.overall_code).toBe('OK');
    const named = m.logs.filter((l) => l.includes('no counterpart in cellgate, ignored'));
    expect(named).toHaveLength(1);
    expect(named[0]).toContain('the arguments --quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system (envoyproxy/ratelimit reads none)');
  });
});
