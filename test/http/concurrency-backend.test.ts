/**
 * The middleware's concurrency limit across replicas: three Express apps, each with its own cellgate
 * sidecar, the sidecars sharing one real redis-server (`--backend`). Requests spread over the three
 * apps never run more than `limit` at once in all, a slot freed in one app is taken in another, and a
 * waiting request in one app is served when a request finishes in another.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import express from 'express';
import { rateLimit as expressLimit, type ExpressRateLimit } from '../../src/http/express.ts';
import { RedisNode } from '../helpers/redis.ts';
import { waitFor } from '../helpers/wait.ts';
import { startSidecars, stopSidecars, type Sidecar } from '../backend/helpers.ts';

let node: RedisNode;
let sidecars: Sidecar[] = [];
const closers: (() => unknown)[] = [];

beforeAll(async () => {
  node = await RedisNode.start();
  sidecars = await startSidecars(3, node.url, { conns: 0, args: ['--backend-timeout', '10000'] });
}, 60_000);

afterAll(async () => {
  for (const close of closers) await close();
  await stopSidecars(sidecars);
  await node?.destroy();
});

describe('three replicas, one limit', () => {
  it('9 requests over 3 apps with limit 2 (waitMs): never more than 2 handlers at once in all, every request served', async () => {
    let running = 0;
    let maxRunning = 0;
    const waiting: (() => void)[] = [];
    const urls: string[] = [];
    const limiters: ExpressRateLimit[] = [];
    for (const s of sidecars) {
      const limiter = expressLimit({
        client: `redis://127.0.0.1:${s.server.port}`, key: () => 'tenant-7', timeoutMs: 10_000,
        concurrency: { limit: 2, leaseMs: 60_000, waitMs: 60_000 },
      });
      limiters.push(limiter);
      closers.push(() => limiter.close());
      const app = express();
      app.get('/x', limiter, async (_req, res) => {
        running++;
        maxRunning = Math.max(maxRunning, running);
        await new Promise<void>((resolve) => waiting.push(resolve));
        running--;
        res.end('ok');
      });
      const server = http.createServer(app);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      closers.push(() => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }));
      urls.push(`http://127.0.0.1:${(server.address() as AddressInfo).port}/x`);
    }
    const requests = Array.from({ length: 9 }, (_, i) => fetch(urls[i % 3]));
    // Two run; the other seven wait (in whichever apps they came to).
    await waitFor(() => waiting.length === 2 && limiters.reduce((n, l) => n + l.stats.concurrency.waiting, 0) === 7, '2 running, 7 waiting');
    const blocked = async () => (await Promise.all(sidecars.map(async (s) => Number(/blocked_clients:(\d+)/.exec(String(await s.admin.call('INFO', 'clients')))?.[1])))).reduce((a, b) => a + b, 0);
    await waitFor(async () => (await blocked()) === 7, 'the 7 WAITs parked on their sidecars');
    for (let done = 0; done < 9; done++) {
      await waitFor(() => waiting.length >= 1, `a handler running (${done} done)`);
      expect(running).toBeLessThanOrEqual(2);
      waiting.shift()!();
    }
    const statuses = (await Promise.all(requests)).map((r) => r.status);
    expect(statuses).toEqual(Array(9).fill(200));
    expect(maxRunning).toBe(2);
    // Waiters in each app were served by slots freed in the others (each app ran 3 requests, 2 slots in all).
    expect(limiters.reduce((n, l) => n + l.stats.concurrency.waits, 0)).toBe(7);
    expect(limiters.reduce((n, l) => n + l.stats.concurrency.acquired, 0)).toBe(9);
    await waitFor(() => limiters.every((l) => l.stats.concurrency.inUse === 0), 'every lease released');
    // The releases go out after the responses end: the last one reaches Redis a moment later.
    await waitFor(async () => (await node.call('EXISTS', 'cellgate:{tenant-7}:concurrency')) === 0, 'the key gone with its last lease');
  }, 120_000);
});
