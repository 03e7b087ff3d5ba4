/**
 * The middleware's `concurrency` option with real Express and Fastify apps and a plain node:http
 * server, against a real cellgate: at most `limit` handlers run at once (the others get 429 with
 * Retry-After, or wait with `waitMs`), a client that disconnects mid-response frees its slot, a
 * streaming response that lasts longer than `leaseMs` keeps its lease (renewed while it is open),
 * the option beside a rate limit, the typed client's acquire/release/renew, and onUnavailable.
 *
 * Handlers hold until the test lets them go (a gate), so "at once" is a fact of the test, not of
 * timing; the lease's life runs on cellgate's DEBUG CLOCK.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import express from 'express';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { CellgateClient } from '../../src/client/index.ts';
import { createRateLimiter, type HttpRateLimitOptions, type RequestLike } from '../../src/http/node.ts';
import { rateLimit as expressLimit } from '../../src/http/express.ts';
import { rateLimit as fastifyLimit } from '../../src/http/fastify.ts';
import { freePort, startServer, type RunningServer } from '../helpers/server.ts';
import { waitFor } from '../helpers/wait.ts';

let server: RunningServer;
let redis: Redis;
let client: CellgateClient;
const closers: (() => unknown)[] = [];
const T0 = 1_800_000_000_000;

beforeAll(async () => {
  server = await startServer();
  redis = new Redis({ port: server.port, host: '127.0.0.1' });
  await redis.call('DEBUG', 'CLOCK', 'SET', String(T0));
  client = new CellgateClient(redis, { timeoutMs: 5000 });
}, 30_000);
afterAll(async () => {
  for (const close of closers) await close();
  redis?.disconnect();
  await server?.stop();
});

/** The test's client name (x-client header). */
const testKey = (req: RequestLike): string => `cc:${String(req.headers['x-client'] ?? 'anon')}`;

/** Handlers that count how many run at once and hold until released. */
function gatedHandlers() {
  let running = 0;
  let maxRunning = 0;
  const waiting: (() => void)[] = [];
  return {
    get running() { return running; },
    get maxRunning() { return maxRunning; },
    get held() { return waiting.length; },
    /** Runs one request: counts it, waits for the gate, then answers. */
    async enter(): Promise<void> {
      running++;
      maxRunning = Math.max(maxRunning, running);
      await new Promise<void>((resolve) => waiting.push(resolve));
      running--;
    },
    releaseAll(): void {
      for (const r of waiting.splice(0)) r();
    },
  };
}

async function listen(app: http.Server): Promise<string> {
  await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise((resolve) => { app.closeAllConnections(); app.close(resolve); }));
  return `http://127.0.0.1:${(app.address() as AddressInfo).port}`;
}

const get = (url: string, name: string, signal?: AbortSignal) => fetch(url, { headers: { 'x-client': name }, signal });

describe('at most `limit` handlers at once', () => {
  it('Express: 6 requests at once with limit 2 → 2 run, 4 get 429 with Retry-After; the slots come back when they finish', async () => {
    const gate = gatedHandlers();
    const limiter = expressLimit({ client, key: testKey, timeoutMs: 5000, concurrency: { limit: 2, leaseMs: 60_000 } });
    const app = express();
    app.get('/x', limiter, async (req, res) => {
      await gate.enter();
      res.json((req as unknown as { rateLimit: unknown }).rateLimit);
    });
    const url = `${await listen(http.createServer(app))}/x`;
    const pending = Array.from({ length: 2 }, () => get(url, 'ex'));
    await waitFor(() => gate.held === 2, 'two handlers running');
    const refused = await Promise.all(Array.from({ length: 4 }, () => get(url, 'ex')));
    for (const r of refused) {
      expect(r.status).toBe(429);
      expect(r.headers.get('content-type')).toBe('application/problem+json');
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(await r.json()).toMatchObject({ status: 429, detail: 'at most 2 requests at once for this key' });
    }
    expect(limiter.stats.concurrency).toMatchObject({ inUse: 2, acquired: 2, limited: 4 });
    // Another key has its own slots.
    const other = get(url, 'ex-other');
    await waitFor(() => gate.held === 3, 'the other key running');
    gate.releaseAll();
    const done = await Promise.all([...pending, other]);
    expect(done.map((r) => r.status)).toEqual([200, 200, 200]);
    const info = (await done[0].json()) as { concurrency: { limit: number; id: unknown } };
    expect(info.concurrency).toMatchObject({ limit: 2 });
    expect(typeof info.concurrency.id).toBe('string');
    expect(gate.maxRunning).toBe(3);
    await waitFor(() => limiter.stats.concurrency.inUse === 0, 'every lease released');
    // Released on cellgate: both slots free again.
    const lease = await client.acquire('{cc:ex}:concurrency', 2, 1000);
    expect(lease).toMatchObject({ limited: false, remaining: 1 });
    expect(await client.release('{cc:ex}:concurrency', lease.id!)).toBe(true);
  });

  it('Fastify with waitMs: a request waits for the slot (stats.concurrency.waiting), then runs when the first finishes', async () => {
    const gate = gatedHandlers();
    const hook = fastifyLimit({ client, key: testKey, timeoutMs: 5000, concurrency: { limit: 1, leaseMs: 60_000, waitMs: 20_000 } });
    const fa = Fastify();
    fa.get('/x', { onRequest: hook }, async () => {
      await gate.enter();
      return 'ok';
    });
    await fa.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => fa.close());
    const url = `http://127.0.0.1:${(fa.server.address() as AddressInfo).port}/x`;
    const first = get(url, 'fa');
    await waitFor(() => gate.held === 1, 'the first handler running');
    const second = get(url, 'fa');
    await waitFor(() => hook.stats.concurrency.waiting === 1, 'the second request waiting');
    await waitFor(async () => /blocked_clients:1\r/.test(String(await redis.call('INFO', 'clients'))), 'its WAIT parked on cellgate');
    expect(gate.running).toBe(1);
    gate.releaseAll();
    expect((await first).status).toBe(200);
    await waitFor(() => gate.held === 1, 'the second handler running after the first finished');
    expect(gate.maxRunning).toBe(1);
    gate.releaseAll();
    expect((await second).status).toBe(200);
    expect(hook.stats.concurrency).toMatchObject({ waits: 1, waitTimeouts: 0, acquired: 2, limited: 0 });
  });
});

describe('the lease follows the response', () => {
  it('a client that disconnects mid-response frees its slot', async () => {
    const limit = createRateLimiter({ client, key: testKey, timeoutMs: 5000, concurrency: { limit: 1, leaseMs: 60_000 } } as HttpRateLimitOptions);
    const app = http.createServer(async (req, res) => {
      if (!(await limit(req, res))) return;
      res.write('started\n'); // and never ends: the client goes away
    });
    const url = await listen(app);
    const abort = new AbortController();
    const first = await get(url, 'dc', abort.signal);
    expect(first.status).toBe(200);
    expect((await get(url, 'dc')).status).toBe(429);
    abort.abort();
    await waitFor(() => limit.stats.concurrency.inUse === 0, 'the lease released at close');
    const again = await get(url, 'dc');
    expect(again.status).toBe(200);
    await again.body?.cancel();
  });

  it('a streaming response longer than leaseMs keeps its lease (renewed every leaseMs / 2)', async () => {
    const leaseMs = 400;
    const limiter = expressLimit({ client, key: testKey, timeoutMs: 5000, concurrency: { limit: 1, leaseMs } });
    let finish: () => void = () => {};
    const app = express();
    app.get('/stream', limiter, (_req, res) => {
      res.write('chunk\n');
      finish = () => res.end('end\n');
    });
    const url = `${await listen(http.createServer(app))}/stream`;
    const key = '{cc:st}:concurrency';
    const streaming = await get(url, 'st');
    expect(streaming.status).toBe(200);
    // cellgate's clock moves on by less than a lease, a renewal happens, and again: the original
    // lease (ending at T + leaseMs) would be over by now; the renewed one is live.
    for (let step = 1; step <= 3; step++) {
      const renewals = limiter.stats.concurrency.renewals;
      await redis.call('DEBUG', 'CLOCK', 'SET', String(T0 + step * 300));
      await waitFor(() => limiter.stats.concurrency.renewals > renewals + 1, 'a renewal at the new time');
    }
    const probe = await client.acquire(key, 1, 1000);
    expect(probe.limited).toBe(true);
    expect(limiter.stats.concurrency.lost).toBe(0);
    finish();
    await streaming.text();
    await waitFor(() => limiter.stats.concurrency.inUse === 0, 'released at finish');
    const after = await client.acquire(key, 1, 1000);
    expect(after.limited).toBe(false);
    await client.release(key, after.id!);
  });
});

describe('beside a rate limit, and the typed client', () => {
  it('node:http with a policy and a concurrency limit: both apply, req.rateLimit.concurrency is set', async () => {
    const limit = createRateLimiter({ client, key: testKey, timeoutMs: 5000, policy: { limit: 3, periodMs: 60_000 }, concurrency: { limit: 1, leaseMs: 60_000 } } as HttpRateLimitOptions);
    const seen: unknown[] = [];
    const app = http.createServer(async (req, res) => {
      if (!(await limit(req, res))) return;
      seen.push((req as unknown as { rateLimit: unknown }).rateLimit);
      res.end('ok');
    });
    const url = await listen(app);
    for (let i = 0; i < 3; i++) expect((await get(url, 'both')).status).toBe(200);
    const fourth = await get(url, 'both');
    expect(fourth.status).toBe(429); // the rate limit's refusal
    expect(fourth.headers.get('ratelimit')).toMatch(/^"default";r=0;t=\d+$/);
    expect(seen[0]).toMatchObject({ limit: 3, remaining: 2, concurrency: { limit: 1, remaining: 0 } });
    expect(limit.stats).toMatchObject({ allowed: 3, limited: 1 });
    await waitFor(() => limit.stats.concurrency.inUse === 0, 'released');
  });

  it('acquire / renew / release with ID and WAIT', async () => {
    const key = 'typed:{k}';
    const a = await client.acquire(key, 1, 5000, { id: 'mine' });
    expect(a).toEqual({ limited: false, limit: 1, remaining: 0, retryAfterMs: -1, resetAfterMs: 5000, id: 'mine' });
    const b = await client.acquire(key, 1, 5000);
    expect(b).toMatchObject({ limited: true, id: null, remaining: 0 });
    expect(await client.renew(key, 'mine', 9000)).toBe(true);
    // The WAIT blocks its connection (as BLPOP does): a connection of its own.
    const blocking = client.duplicate()!;
    closers.push(() => blocking.close());
    const waiting = blocking.acquire(key, 1, 5000, { waitMs: 20_000 });
    // Parked on cellgate (refused at first) before the slot frees.
    await waitFor(async () => /blocked_clients:1\r/.test(String(await redis.call('INFO', 'clients'))), 'the acquire waiting');
    expect(await client.release(key, 'mine')).toBe(true);
    const w = await waiting;
    expect(w.limited).toBe(false);
    expect(await client.renew(key, 'mine', 1000)).toBe(false);
    expect(await client.release(key, w.id!)).toBe(true);
    expect(await redis.exists(key)).toBe(0);
    await expect(client.acquire(key, 0, 10)).rejects.toThrow(/limit/);
  });
});

describe('onUnavailable', () => {
  it("'deny' answers 503; 'insurance' counts slots in this process; 'allow' lets through without a lease", async () => {
    const down = `redis://127.0.0.1:${await freePort()}`;
    const make = (onUnavailable: 'deny' | 'insurance' | 'allow') => {
      const gate = gatedHandlers();
      const limit = createRateLimiter({ client: down, key: testKey, timeoutMs: 200, onUnavailable, concurrency: { limit: 1, leaseMs: 60_000 } } as HttpRateLimitOptions);
      closers.push(() => limit.close());
      const app = http.createServer(async (req, res) => {
        if (!(await limit(req, res))) return;
        await gate.enter();
        res.end('ok');
      });
      return { limit, gate, app };
    };
    const deny = make('deny');
    expect((await get(await listen(deny.app), 'u')).status).toBe(503);
    const ins = make('insurance');
    const insUrl = await listen(ins.app);
    const held = get(insUrl, 'u');
    await waitFor(() => ins.gate.held === 1, 'the insured request running');
    expect((await get(insUrl, 'u')).status).toBe(429);
    ins.gate.releaseAll();
    expect((await held).status).toBe(200);
    await waitFor(() => ins.limit.stats.concurrency.inUse === 0, 'the insured slot back');
    const again = get(insUrl, 'u');
    await waitFor(() => ins.gate.held === 1, 'the next insured request running');
    ins.gate.releaseAll();
    expect((await again).status).toBe(200);
    const allow = make('allow');
    const allowUrl = await listen(allow.app);
    const both = [get(allowUrl, 'u'), get(allowUrl, 'u')];
    await waitFor(() => allow.gate.held === 2, 'both let through');
    allow.gate.releaseAll();
    expect((await Promise.all(both)).map((r) => r.status)).toEqual([200, 200]);
    expect(allow.limit.stats.concurrency.inUse).toBe(0);
  });
});

describe('bounds and mistakes', () => {
  it('at most 64 requests wait at once per middleware (each on a connection of its own); the next is refused at once', async () => {
    const gate = gatedHandlers();
    const limiter = expressLimit({ client, key: testKey, timeoutMs: 5000, concurrency: { limit: 1, leaseMs: 60_000, waitMs: 60_000 } });
    closers.push(() => limiter.close());
    const app = express();
    app.get('/x', limiter, async (_req, res) => {
      await gate.enter();
      res.end('ok');
    });
    const url = `${await listen(http.createServer(app))}/x`;
    const first = get(url, 'flood');
    await waitFor(() => gate.held === 1, 'the first running');
    const waiting = Array.from({ length: 64 }, () => get(url, 'flood'));
    await waitFor(() => limiter.stats.concurrency.waiting === 64, '64 waiting');
    await waitFor(async () => /blocked_clients:64\r/.test(String(await redis.call('INFO', 'clients'))), 'their WAITs parked on cellgate');
    const over = await get(url, 'flood');
    expect(over.status).toBe(429);
    expect(limiter.stats.concurrency.waiting).toBe(64);
    // One by one, each waiter gets the slot as the one before finishes: never two at once.
    const all = [first, ...waiting];
    for (let i = 0; i < all.length; i++) {
      await waitFor(() => gate.held === 1, `handler ${i} running`);
      gate.releaseAll();
    }
    const statuses = (await Promise.all(all)).map((r) => r.status);
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(gate.maxRunning).toBe(1);
    expect(limiter.stats.concurrency).toMatchObject({ waits: 64, waitTimeouts: 0, waiting: 0 });
  }, 120_000);

  it('options are checked when the middleware is made', () => {
    const bad: [unknown, RegExp][] = [
      [{ limit: 0, leaseMs: 1000 }, /concurrency.limit must be an integer >= 1/],
      [{ limit: 1.5, leaseMs: 1000 }, /concurrency.limit/],
      [{ limit: 1, leaseMs: 1 }, /concurrency.leaseMs must be an integer >= 2/],
      [{ limit: 1, leaseMs: 1000, waitMs: 0 }, /concurrency.waitMs/],
      [{ limit: 1, leaseMs: 1000, key: 'k' }, /concurrency.key must be a function/],
      [{ limit: 1, leaseMs: 1000, max: 3 }, /unknown concurrency option 'max'/],
      ['4', /concurrency must be an object/],
    ];
    for (const [concurrency, message] of bad) {
      expect(() => expressLimit({ client, concurrency } as never)).toThrow(message);
    }
    expect(() => expressLimit({ client } as never)).toThrow(/a policy or a concurrency limit is needed/);
  });
});
