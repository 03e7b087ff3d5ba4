/**
 * The HTTP middleware against a real cellgate, with real HTTP requests: the response a refusal
 * gets, the RateLimit fields on every response, several policies in one call, the key order, the
 * cost that can never fit, skip rules, and what happens when cellgate is unreachable.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import express from 'express';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { CellgateClient } from '../../src/client/index.ts';
import { createRateLimiter, defaultKey, type RateLimitOptions } from '../../src/http/node.ts';
import { rateLimit as expressLimit } from '../../src/http/express.ts';
import { rateLimit as fastifyLimit } from '../../src/http/fastify.ts';
import { freePort, startServer, type RunningServer } from '../helpers/server.ts';

let server: RunningServer;
let redis: Redis;
let client: CellgateClient;
const closers: (() => unknown)[] = [];

beforeAll(async () => {
  server = await startServer();
  redis = new Redis({ port: server.port, host: '127.0.0.1' });
  await redis.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
  client = new CellgateClient(redis);
});
afterAll(async () => {
  for (const close of closers) await close();
  redis?.disconnect();
  await server?.stop();
});

/** A node:http server limited by `options`, answering 200 "ok" to what passes. */
async function nodeApp(options: Omit<RateLimitOptions, 'client'> & { client?: RateLimitOptions['client'] }) {
  // A generous timeout: a loaded test machine must not turn a slow answer into "unavailable".
  const limit = createRateLimiter({ client, timeoutMs: 5000, ...options } as RateLimitOptions);
  const app = http.createServer(async (req, res) => {
    if (!(await limit(req, res))) return;
    res.end('ok');
  });
  await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise((resolve) => app.close(resolve)));
  return { url: `http://127.0.0.1:${(app.address() as AddressInfo).port}`, stats: limit.stats };
}

const get = (url: string, headers: Record<string, string> = {}) => fetch(url, { headers });

describe('refusal and fields', () => {
  it('answers 10 x 200 then 429 with Retry-After, problem+json and RateLimit fields; another key is unaffected', async () => {
    const { url } = await nodeApp({ policy: { limit: 10, periodMs: 10_000 } });
    for (let i = 0; i < 10; i++) {
      const r = await get(url, { 'x-api-key': 'alpha' });
      expect(r.status).toBe(200);
      expect(r.headers.get('ratelimit-policy')).toBe('"default";q=10;w=10');
      expect(r.headers.get('ratelimit')).toMatch(new RegExp(`^"default";r=${9 - i};t=\\d+$`));
      expect(r.headers.get('retry-after')).toBeNull();
    }
    const refused = await get(url, { 'x-api-key': 'alpha' });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('content-type')).toBe('application/problem+json');
    expect(refused.headers.get('retry-after')).toBe('1'); // GCRA: one request back every second
    expect(refused.headers.get('ratelimit')).toBe('"default";r=0;t=10');
    expect(await refused.json()).toEqual({ type: 'about:blank', title: 'Too Many Requests', status: 429, detail: 'limit is 10 requests per 10 seconds for this key' });
    expect((await get(url, { 'x-api-key': 'beta' })).status).toBe(200);
  });

  it('gives one member per policy when several are checked together (3 per second and 300 per 3 hours)', async () => {
    const { url } = await nodeApp({
      policy: [
        { name: 'second', algorithm: 'slidinglog', limit: 3, periodMs: 1000 },
        { name: '3h', algorithm: 'tokenbucket', limit: 300, periodMs: 10_800_000 },
      ],
    });
    for (let i = 0; i < 3; i++) {
      const r = await get(url, { 'x-api-key': 'multi' });
      expect(r.status).toBe(200);
      expect(r.headers.get('ratelimit-policy')).toBe('"second";q=3;w=1, "3h";q=300;w=10800');
      expect(r.headers.get('ratelimit')).toMatch(new RegExp(`^"second";r=${2 - i};t=1, "3h";r=${299 - i};t=\\d+$`));
    }
    const refused = await get(url, { 'x-api-key': 'multi' });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.headers.get('ratelimit')).toMatch(/^"second";r=0;t=1, "3h";r=297;t=\d+$/); // all-or-nothing: nothing spent
    expect(((await refused.json()) as { detail: string }).detail).toBe('limit is 3 requests per second for this key');
  });

  it('sends no Retry-After when the cost can never fit, and says so', async () => {
    const { url } = await nodeApp({ policy: { limit: 5, periodMs: 60_000 }, cost: (req) => Number(req.headers['x-cost'] ?? 1) });
    const r = await get(url, { 'x-api-key': 'big', 'x-cost': '6' });
    expect(r.status).toBe(429);
    expect(r.headers.get('retry-after')).toBeNull();
    expect(((await r.json()) as { detail: string }).detail).toBe('this request costs 6, more than limit is 5 requests per minute can ever allow');
    expect((await get(url, { 'x-api-key': 'big', 'x-cost': '5' })).status).toBe(200);
  });

  it('sends the legacy X-RateLimit fields when asked, and skips what the skip rule says', async () => {
    const { url, stats } = await nodeApp({ policy: { limit: 2, periodMs: 2000 }, legacyHeaders: true, skip: (req) => (req as { url?: string }).url === '/health' });
    const r = await get(url, { 'x-api-key': 'legacy' });
    expect([r.headers.get('x-ratelimit-limit'), r.headers.get('x-ratelimit-remaining'), r.headers.get('x-ratelimit-reset')]).toEqual(['2', '1', '1']);
    const skipped = await get(`${url}/health`, { 'x-api-key': 'legacy' });
    expect(skipped.status).toBe(200);
    expect(skipped.headers.get('ratelimit')).toBeNull();
    expect(stats.skipped).toBe(1);
  });
});

describe('keys', () => {
  it('counts the authenticated user, then the API key, then the IP, never "undefined"', () => {
    const socket = { remoteAddress: '127.0.0.9' };
    expect(defaultKey({ headers: { 'x-api-key': 'k' }, user: { id: 42 }, socket })).toBe('user:42');
    expect(defaultKey({ headers: { 'x-api-key': 'k' }, user: { id: undefined }, socket })).toMatch(/^apikey:[0-9a-f]{32}$/);
    expect(defaultKey({ headers: {}, user: null, socket })).toBe('ip:127.0.0.9');
    expect(defaultKey({ headers: {}, ip: '10.1.2.3', socket })).toBe('ip:10.1.2.3');
    expect(defaultKey({ headers: {} })).toBe('ip:unknown');
  });

  it('keys anonymous callers by IP in a real request, so two IPs never share "user:undefined"', async () => {
    const { url } = await nodeApp({ policy: { name: 'anon', limit: 1, periodMs: 60_000 } });
    expect((await get(url)).status).toBe(200);
    expect((await get(url)).status).toBe(429);
    const keys = (await redis.call('KEYS', 'cellgate:anon:*')) as string[];
    expect(keys).toEqual(['cellgate:anon:ip:127.0.0.1']);
  });
});

describe('cellgate unavailable', () => {
  it("'allow' lets requests through without fields and counts them; 'deny' answers 503 problem+json", async () => {
    const port = await freePort(); // nothing listens there
    const allow = await nodeApp({ client: `redis://127.0.0.1:${port}`, policy: { limit: 1, periodMs: 1000 } });
    const deny = await nodeApp({ client: `redis://127.0.0.1:${port}`, policy: { limit: 1, periodMs: 1000 }, onUnavailable: 'deny' });
    for (let i = 0; i < 3; i++) {
      const a = await get(allow.url);
      expect(a.status).toBe(200);
      expect(a.headers.get('ratelimit')).toBeNull();
      const d = await get(deny.url);
      expect(d.status).toBe(503);
      expect(d.headers.get('content-type')).toBe('application/problem+json');
      expect(((await d.json()) as { title: string }).title).toBe('Service Unavailable');
    }
    expect(allow.stats.unavailable).toBe(3);
    expect(deny.stats.unavailable).toBe(3);
  });
});

describe('cellgate slow', () => {
  it('answers by the policy after the timeout when cellgate does not answer, then counts again', async () => {
    const { url, stats } = await nodeApp({ policy: { name: 'slow', limit: 5, periodMs: 1000 }, timeoutMs: 50 });
    expect((await get(url, { 'x-api-key': 'slow' })).headers.get('ratelimit')).toBe('"slow";r=4;t=1');
    const blocker = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
    closers.push(() => blocker.disconnect());
    await blocker.ping();
    const sleeping = blocker.call('DEBUG', 'SLEEP', '2');
    // Requests sent before the server takes the SLEEP are counted; the first one after is not.
    let answered: Response | undefined;
    for (let i = 0; i < 4 && answered === undefined; i++) {
      const r = await get(url, { 'x-api-key': 'slow' });
      expect(r.status).toBe(200);
      if (r.headers.get('ratelimit') === null) answered = r;
    }
    expect(answered).toBeDefined();
    expect(stats.unavailable).toBe(1);
    expect(stats.lastError?.name).toBe('CellgateTimeoutError');
    await sleeping;
    expect((await get(url, { 'x-api-key': 'slow' })).headers.get('ratelimit')).toMatch(/^"slow";r=[0-3];t=1$/);
  });
});

describe('frameworks', () => {
  it('Express and Fastify answer the same refusal', async () => {
    const policy = { limit: 1, periodMs: 10_000 };
    const app = express();
    app.get('/x', expressLimit({ client, policy, prefix: 'ex:', timeoutMs: 5000 }), (_req, res) => { res.send('ok'); });
    const ex = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => ex.once('listening', resolve));
    closers.push(() => new Promise((resolve) => ex.close(resolve)));
    const fa = Fastify();
    fa.get('/x', { onRequest: fastifyLimit({ client, policy, prefix: 'fa:', timeoutMs: 5000 }) }, async () => 'ok');
    await fa.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => fa.close());
    for (const port of [(ex.address() as AddressInfo).port, (fa.server.address() as AddressInfo).port]) {
      const url = `http://127.0.0.1:${port}/x`;
      expect((await get(url, { 'x-api-key': 'fw' })).status).toBe(200);
      const r = await get(url, { 'x-api-key': 'fw' });
      expect(r.status).toBe(429);
      expect(r.headers.get('content-type')).toBe('application/problem+json');
      expect(r.headers.get('retry-after')).toBe('10');
      expect(r.headers.get('ratelimit-policy')).toBe('"default";q=1;w=10');
      expect(r.headers.get('ratelimit')).toBe('"default";r=0;t=10');
      expect(await r.json()).toMatchObject({ title: 'Too Many Requests', status: 429, detail: 'limit is 1 request per 10 seconds for this key' });
    }
  });
});
