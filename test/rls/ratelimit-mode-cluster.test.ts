/**
 * `cellgate-server ratelimit` with REDIS_TYPE=cluster against a real Redis Cluster (three masters,
 * three replicas): two instances started from the same environment share one limit exactly, as two
 * replicas of Envoy Gateway's rate limit Deployment do.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/server.js';
import { useCluster } from '../helpers/redis.js';
import { eventually, httpGet, plainUserCall as call, runMode, type ModeProcess } from './ratelimit-helpers.js';

const fixture = useCluster();
const root = mkdtempSync(join(tmpdir(), 'cellgate-ratelimit-cluster-'));
const running: ModeProcess[] = [];
afterAll(async () => {
  for (const m of running) await m.destroy();
  rmSync(root, { recursive: true, force: true });
});

describe('the ratelimit mode on a Redis Cluster', () => {
  it('REDIS_TYPE=cluster with the seed nodes in REDIS_URL: two instances share one limit', async () => {
    mkdirSync(join(root, 'ratelimit', 'config'), { recursive: true });
    writeFileSync(join(root, 'ratelimit', 'config', 'edge.yaml'), 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n');
    const instances: { m: ModeProcess; port: number; grpcPort: number }[] = [];
    for (let i = 0; i < 2; i++) {
      const port = await freePort();
      const grpcPort = await freePort();
      const m = runMode({
        RUNTIME_ROOT: root, RUNTIME_SUBDIRECTORY: 'ratelimit', RUNTIME_WATCH_ROOT: 'false', USE_STATSD: 'false', LOG_LEVEL: 'info',
        REDIS_SOCKET_TYPE: 'tcp', REDIS_TYPE: 'cluster', REDIS_URL: fixture.cluster.nodes.slice(0, 3).map((n) => `127.0.0.1:${n.port}`).join(','),
        PORT: String(port), GRPC_PORT: String(grpcPort),
      });
      running.push(m);
      instances.push({ m, port, grpcPort });
    }
    for (const { m, port } of instances) await eventually(async () => (await httpGet(port, '/healthcheck'))?.status === 200, '/healthcheck 200', m);
    const [a, b] = instances;
    const codes = [await call(a.grpcPort, 'u1'), await call(b.grpcPort, 'u1'), await call(a.grpcPort, 'u1'), await call(b.grpcPort, 'u1')];
    expect(codes).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    // The count lives in the Cluster, on the master of its slot.
    const keys: string[] = [];
    for (const master of await fixture.cluster.masters()) keys.push(...((await master.call('KEYS', 'cellgate:edge_user_u1_*')) as string[]));
    expect(keys).toHaveLength(1);
  });
});
