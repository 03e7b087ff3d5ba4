/**
 * The service through the limiter store on a shared backend: three cellgate instances on one real
 * Redis, and on a Redis Cluster, enforce one limit exactly (each request to the next instance).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisCluster, RedisNode, stopAllRedis } from '../helpers/redis.js';
import { startRls, until, type Rls } from './helpers.js';

const CONFIG = {
  'app.yaml': `domain: app
descriptors:
  - key: fw
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: tb
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: token_bucket }
  - key: sw
    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: sliding_window }
`,
};

/** Starts three instances into `into` (so that a failure part way still stops those started). */
async function three(backend: string, into: Rls[]): Promise<void> {
  // A busy machine can take longer than the default 100 ms to answer; a timed-out call would be
  // decided by the local policy and the counts would not be the backend's.
  // allSettled, not all: when one start fails, the others still in progress are kept for afterAll to stop
  // (with Promise.all they finished after the hook had run, and stayed running).
  const started = await Promise.allSettled([0, 1, 2].map(() => startRls(CONFIG, ['--backend', backend, '--backend-timeout', '5000'])));
  for (const r of started) if (r.status === 'fulfilled') into.push(r.value);
  const failed = started.find((r) => r.status === 'rejected');
  if (failed !== undefined) throw failed.reason;
  // A Cluster's first connection can take a while on a loaded machine.
  for (const r of into) await until(async () => /backend_state:up/.test(String(await r.redis.info('backend'))), 'the backend up', 60_000);
}

async function exact(instances: Rls[], key: string, value: string): Promise<void> {
  const codes: string[] = [];
  for (let i = 0; i < 12; i++) codes.push((await instances[i % 3].should('app', [{ entries: [{ key, value }] }])).overall_code);
  expect(codes.filter((c) => c === 'OK').length).toBe(5);
  expect(codes.slice(0, 5)).toEqual(['OK', 'OK', 'OK', 'OK', 'OK']);
}

describe('three instances on one Redis', () => {
  let node: RedisNode;
  const instances: Rls[] = [];
  beforeAll(async () => {
    node = await RedisNode.start();
    await three(`redis://127.0.0.1:${node.port}`, instances);
  });
  afterAll(async () => {
    for (const r of instances) await r.stop();
    await node?.destroy();
  });
  for (const key of ['fw', 'tb', 'sw']) it(`${key}: 5 of 12 allowed across the three`, () => exact(instances, key, 'one'));
  it('a request of several descriptors (one unit on the backend): each limit exact on its own', async () => {
    const d = [{ entries: [{ key: 'fw', value: 'multi' }] }, { entries: [{ key: 'tb', value: 'multi' }] }, { entries: [{ key: 'sw', value: 'multi' }] }];
    const ok = [0, 0, 0];
    for (let i = 0; i < 12; i++) {
      const r = await instances[i % 3].should('app', d);
      r.statuses.forEach((s, n) => { if (s.code === 'OK') ok[n]++; });
    }
    expect(ok).toEqual([5, 5, 5]);
  });
  it('the fixed window key is envoyproxy/ratelimit\'s, on the backend', async () => {
    const keys = await node.client().keys('*app_fw_one_*');
    expect(keys.length).toBe(1);
  });
  it('the backend down: backend-unavailable deny answers OVER_LIMIT, allow answers OK', async () => {
    await node.kill();
    const r = instances[0];
    await until(async () => !/backend_state:up/.test(String(await r.redis.info('backend'))), 'the backend seen down');
    await r.redis.call('CONFIG', 'SET', 'backend-unavailable', 'deny');
    for (const key of ['fw', 'tb']) expect((await r.should('app', [{ entries: [{ key, value: 'down' }] }])).overall_code).toBe('OVER_LIMIT');
    await r.redis.call('CONFIG', 'SET', 'backend-unavailable', 'allow');
    for (const key of ['fw', 'tb']) expect((await r.should('app', [{ entries: [{ key, value: 'down' }] }])).overall_code).toBe('OK');
  });
});

describe('three instances on a Redis Cluster', () => {
  let cluster: RedisCluster;
  const instances: Rls[] = [];
  beforeAll(async () => {
    cluster = await RedisCluster.start();
    await three(`redis-cluster://127.0.0.1:${cluster.nodes[0].port}`, instances);
  }, 120_000);
  afterAll(async () => {
    for (const r of instances) await r.stop();
    await stopAllRedis();
  });
  for (const key of ['fw', 'tb', 'sw']) it(`${key}: 5 of 12 allowed across the three`, () => exact(instances, key, 'two'));
});
