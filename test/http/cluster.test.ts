/**
 * The middleware on a cellgate whose backend is a real Redis Cluster (3 masters, 3 replicas): a
 * request's policies share a hash tag, so RL.ALL reaches one slot and every request is decided (no
 * CROSSSLOT, no fail-open), and the backend keys carry the backend prefix once.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { CellgateClient } from '../../src/client/index.ts';
import { createRateLimiter, type HttpRateLimitOptions } from '../../src/http/node.ts';
import { keySlot, useCluster } from '../helpers/redis.ts';
import { startSidecar, stopSidecars, type Sidecar } from '../backend/helpers.ts';

const env = useCluster();
let sidecar: Sidecar;
let conn: Redis;
const closers: (() => unknown)[] = [];

beforeAll(async () => {
  sidecar = await startSidecar(env.cluster.url);
  await sidecar.admin.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
  conn = new Redis({ port: sidecar.server.port, host: '127.0.0.1', protocol: 2 });
}, 60_000);
afterAll(async () => {
  for (const close of closers) await close();
  conn?.disconnect();
  await stopSidecars([sidecar]);
});

async function nodeApp(options: Omit<HttpRateLimitOptions, 'client'>) {
  const lines: string[] = [];
  const limit = createRateLimiter({ client: new CellgateClient(conn), timeoutMs: 5000, onUnavailable: 'deny', log: (l) => lines.push(l), ...options });
  const app = http.createServer(async (req, res) => {
    if (!(await limit(req, res))) return;
    res.end('ok');
  });
  await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise((resolve) => app.close(resolve)));
  return { url: `http://127.0.0.1:${(app.address() as AddressInfo).port}`, stats: limit.stats, lines };
}

describe('several policies on a Cluster backend', () => {
  it('decides every request (10 x 200 then 429 with fields), its keys in one slot, the prefix once', async () => {
    const { url, stats, lines } = await nodeApp({
      policy: [
        { name: 's', algorithm: 'slidingwindow', limit: 10, periodMs: 10_000 },
        { name: 'h', algorithm: 'tokenbucket', limit: 300, periodMs: 3_600_000 },
      ],
    });
    const statuses: number[] = [];
    for (let i = 0; i < 11; i++) {
      const r = await fetch(url);
      statuses.push(r.status);
      expect(r.headers.get('ratelimit')).toMatch(/^"s";r=\d+;t=\d+, "h";r=\d+;t=\d+$/);
    }
    expect(statuses).toEqual([...Array<number>(10).fill(200), 429]);
    expect(stats).toMatchObject({ allowed: 10, limited: 1, unavailable: 0, errors: 0 });
    expect(lines).toEqual([]);
    const keys: string[] = [];
    for (const node of env.cluster.liveNodes) {
      const c = new Redis({ port: node.port, host: '127.0.0.1', protocol: 2 });
      keys.push(...((await c.keys('cellgate:*')) as string[]));
      c.disconnect();
    }
    // Masters and replicas both hold them: one set of names, each read from a master and its replica.
    const names = [...new Set(keys)].sort();
    expect(names).toEqual(['cellgate:{ip:127.0.0.1}:h', 'cellgate:{ip:127.0.0.1}:s']);
    expect(keySlot(names[0])).toBe(keySlot(names[1]));
  });
});
