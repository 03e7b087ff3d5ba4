/**
 * The HTTP middleware against a real cellgate, with real HTTP requests: the response a refusal
 * gets, the RateLimit fields on every response, several policies in one call, the key order, the
 * cost that can never fit, skip rules, and what happens when cellgate is unreachable.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRequire } from 'node:module';
import express from 'express';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { CellgateClient } from '../../src/client/index.ts';
import { createRateLimiter, defaultKey, ipKey, type HttpRateLimitOptions, type RateLimitOptions, type RequestLike } from '../../src/http/node.ts';
import { rateLimit as expressLimit } from '../../src/http/express.ts';
import { cellgatePlugin, rateLimit as fastifyLimit } from '../../src/http/fastify.ts';
import { freePort, startServer, type RunningServer } from '../helpers/server.ts';

// Express 4 beside 5 (the dev dependency `express4` is express@4): the middleware supports both.
const express4 = createRequire(import.meta.url)('express4') as typeof express;
const EXPRESSES: [string, typeof express][] = [['Express 5', express], ['Express 4', express4]];

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
async function nodeApp(options: Omit<HttpRateLimitOptions, 'client'> & { client?: RateLimitOptions['client'] }) {
  // A generous timeout: a loaded test machine must not turn a slow answer into "unavailable". The
  // tests' requests all come from 127.0.0.1: a header they send names the client (the application's
  // choice, as with a checked API key).
  const limit = createRateLimiter({ client, timeoutMs: 5000, key: testKey, ...options } as HttpRateLimitOptions);
  const app = http.createServer(async (req, res) => {
    if (!(await limit(req, res))) return;
    res.end('ok');
  });
  await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise((resolve) => app.close(resolve)));
  return { url: `http://127.0.0.1:${(app.address() as AddressInfo).port}`, stats: limit.stats };
}

/** The test's client name (x-client), else the default key. */
function testKey(req: RequestLike): string {
  const name = req.headers['x-client'];
  return typeof name === 'string' ? `test:${name}` : defaultKey(req);
}

const get = (url: string, headers: Record<string, string> = {}) => fetch(url, { headers });

describe('refusal and fields', () => {
  it('answers 10 x 200 then 429 with Retry-After, problem+json and RateLimit fields; another key is unaffected', async () => {
    const { url } = await nodeApp({ policy: { limit: 10, periodMs: 10_000 } });
    for (let i = 0; i < 10; i++) {
      const r = await get(url, { 'x-client': 'alpha' });
      expect(r.status).toBe(200);
      expect(r.headers.get('ratelimit-policy')).toBe('"default";q=10;w=10');
      expect(r.headers.get('ratelimit')).toMatch(new RegExp(`^"default";r=${9 - i};t=\\d+$`));
      expect(r.headers.get('retry-after')).toBeNull();
    }
    const refused = await get(url, { 'x-client': 'alpha' });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('content-type')).toBe('application/problem+json');
    expect(refused.headers.get('retry-after')).toBe('1'); // GCRA: one request back every second
    expect(refused.headers.get('ratelimit')).toBe('"default";r=0;t=10');
    expect(await refused.json()).toEqual({ type: 'about:blank', title: 'Too Many Requests', status: 429, detail: 'limit is 10 requests per 10 seconds for this key' });
    expect((await get(url, { 'x-client': 'beta' })).status).toBe(200);
  });

  it('gives one member per policy when several are checked together (3 per second and 300 per 3 hours)', async () => {
    const { url } = await nodeApp({
      policy: [
        { name: 'second', algorithm: 'slidinglog', limit: 3, periodMs: 1000 },
        { name: '3h', algorithm: 'tokenbucket', limit: 300, periodMs: 10_800_000 },
      ],
    });
    for (let i = 0; i < 3; i++) {
      const r = await get(url, { 'x-client': 'multi' });
      expect(r.status).toBe(200);
      expect(r.headers.get('ratelimit-policy')).toBe('"second";q=3;w=1, "3h";q=300;w=10800');
      expect(r.headers.get('ratelimit')).toMatch(new RegExp(`^"second";r=${2 - i};t=1, "3h";r=${299 - i};t=\\d+$`));
    }
    const refused = await get(url, { 'x-client': 'multi' });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.headers.get('ratelimit')).toMatch(/^"second";r=0;t=1, "3h";r=297;t=\d+$/); // all-or-nothing: nothing spent
    expect(((await refused.json()) as { detail: string }).detail).toBe('limit is 3 requests per second for this key');
  });

  it('sends no Retry-After when the cost can never fit, and says so', async () => {
    const { url } = await nodeApp({ policy: { limit: 5, periodMs: 60_000 }, cost: (req) => Number(req.headers['x-cost'] ?? 1) });
    const r = await get(url, { 'x-client': 'big', 'x-cost': '6' });
    expect(r.status).toBe(429);
    expect(r.headers.get('retry-after')).toBeNull();
    expect(((await r.json()) as { detail: string }).detail).toBe('this request costs 6, and the limit of 5 requests per minute never allows more than 5 at once');
    expect((await get(url, { 'x-client': 'big', 'x-cost': '5' })).status).toBe(200);
  });

  it('sends the legacy X-RateLimit fields when asked, and skips what the skip rule says', async () => {
    const { url, stats } = await nodeApp({ policy: { limit: 2, periodMs: 2000 }, legacyHeaders: true, skip: (req) => (req as { url?: string }).url === '/health' });
    // Read before the request: however long a loaded machine takes to answer, the reset is later.
    const before = Math.floor(Date.now() / 1000);
    const r = await get(url, { 'x-client': 'legacy' });
    expect([r.headers.get('x-ratelimit-limit'), r.headers.get('x-ratelimit-remaining')]).toEqual(['2', '1']);
    // A time in epoch seconds, as express-rate-limit sends it: now + the 1 s until the key is fresh.
    const reset = Number(r.headers.get('x-ratelimit-reset'));
    expect(reset).toBeGreaterThanOrEqual(before + 1);
    expect(reset).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + 1);
    const skipped = await get(`${url}/health`, { 'x-client': 'legacy' });
    expect(skipped.status).toBe(200);
    expect(skipped.headers.get('ratelimit')).toBeNull();
    expect(stats.skipped).toBe(1);
  });
});

describe('keys', () => {
  it('counts the authenticated user, then the IP (never a header the client chose), never "undefined"', () => {
    const socket = { remoteAddress: '127.0.0.9' };
    expect(defaultKey({ headers: { 'x-api-key': 'k' }, user: { id: 42 }, socket })).toBe('user:42');
    expect(defaultKey({ headers: { 'x-api-key': 'k' }, user: { id: undefined }, socket })).toBe('ip:127.0.0.9');
    expect(defaultKey({ headers: {}, user: null, socket })).toBe('ip:127.0.0.9');
    expect(defaultKey({ headers: {}, ip: '10.1.2.3', socket })).toBe('ip:10.1.2.3');
    expect(defaultKey({ headers: {} })).toBe('ip:unknown');
  });

  it('keys anonymous callers by IP in a real request, so two IPs never share "user:undefined"', async () => {
    const { url } = await nodeApp({ policy: { name: 'anon', limit: 1, periodMs: 60_000 }, key: undefined });
    expect((await get(url)).status).toBe(200);
    expect((await get(url)).status).toBe(429);
    const keys = (await redis.call('KEYS', '*:anon')) as string[];
    expect(keys).toEqual(['{ip:127.0.0.1}:anon']);
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
    expect((await get(url, { 'x-client': 'slow' })).headers.get('ratelimit')).toBe('"slow";r=4;t=1');
    const blocker = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
    closers.push(() => blocker.disconnect());
    await blocker.ping();
    const sleeping = blocker.call('DEBUG', 'SLEEP', '2');
    // Requests sent before the server takes the SLEEP are counted; the first one after is not.
    let answered: Response | undefined;
    for (let i = 0; i < 4 && answered === undefined; i++) {
      const r = await get(url, { 'x-client': 'slow' });
      expect(r.status).toBe(200);
      if (r.headers.get('ratelimit') === null) answered = r;
    }
    expect(answered).toBeDefined();
    expect(stats.unavailable).toBe(1);
    expect(stats.lastError?.name).toBe('CellgateTimeoutError');
    await sleeping;
    expect((await get(url, { 'x-client': 'slow' })).headers.get('ratelimit')).toMatch(/^"slow";r=[0-3];t=1$/);
  });
});

describe('frameworks', () => {
  it('Express 5, Express 4 and Fastify answer the same refusal', async () => {
    const policy = { limit: 1, periodMs: 10_000 };
    const app = express();
    app.get('/x', expressLimit({ client, policy, prefix: 'ex:', timeoutMs: 5000 }), (_req, res) => { res.send('ok'); });
    const ex = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => ex.once('listening', resolve));
    closers.push(() => new Promise((resolve) => ex.close(resolve)));
    const app4 = express4();
    app4.get('/x', expressLimit({ client, policy, prefix: 'ex4:', timeoutMs: 5000 }), (_req, res) => { res.send('ok'); });
    const ex4 = app4.listen(0, '127.0.0.1');
    await new Promise((resolve) => ex4.once('listening', resolve));
    closers.push(() => new Promise((resolve) => ex4.close(resolve)));
    const fa = Fastify();
    fa.get('/x', { onRequest: fastifyLimit({ client, policy, prefix: 'fa:', timeoutMs: 5000 }) }, async () => 'ok');
    await fa.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => fa.close());
    for (const port of [(ex.address() as AddressInfo).port, (ex4.address() as AddressInfo).port, (fa.server.address() as AddressInfo).port]) {
      const url = `http://127.0.0.1:${port}/x`;
      expect((await get(url, { 'x-client': 'fw' })).status).toBe(200);
      const r = await get(url, { 'x-client': 'fw' });
      expect(r.status).toBe(429);
      expect(r.headers.get('content-type')).toBe('application/problem+json');
      expect(r.headers.get('retry-after')).toBe('10');
      expect(r.headers.get('ratelimit-policy')).toBe('"default";q=1;w=10');
      expect(r.headers.get('ratelimit')).toBe('"default";r=0;t=10');
      expect(await r.json()).toMatchObject({ title: 'Too Many Requests', status: 429, detail: 'limit is 1 request per 10 seconds for this key' });
    }
  });
});

/** An Express app on a free port, with a JSON error handler that records what reached it. */
async function expressApp(limiter: ReturnType<typeof expressLimit>, setup?: (app: express.Express) => void, ex: typeof express = express) {
  const app = ex();
  const errors: unknown[] = [];
  setup?.(app);
  app.get('/x', limiter, (req, res) => { res.json({ rateLimit: (req as { rateLimit?: unknown }).rateLimit }); });
  app.use((err: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    errors.push(err);
    res.status(500).json({ error: (err as Error).message });
  });
  const srv = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => srv.once('listening', resolve));
  closers.push(() => new Promise((resolve) => srv.close(resolve)));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/x`, errors };
}

describe('keys a client cannot choose', () => {
  it('one IP sending a new X-API-Key each time is still one client: 10 x 200, then 429', async () => {
    const { url } = await nodeApp({ policy: { name: 'hdr', limit: 10, periodMs: 10_000 }, key: undefined });
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) statuses.push((await get(url, { 'x-api-key': `random-${i}-${Math.random()}` })).status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.slice(10).every((s) => s === 429)).toBe(true);
  });

  it('groups IPv6 clients by /56 (an option), and an IPv4-mapped address is its IPv4 one', () => {
    expect(ipKey('2001:db8:1:abcd:1:2:3:4', 56)).toBe('2001:db8:1:ab00:0:0:0:0/56');
    expect(ipKey('2001:db8:1:abff::9', 56)).toBe('2001:db8:1:ab00:0:0:0:0/56');
    expect(ipKey('2001:db8:1:ab00::1', 64)).toBe('2001:db8:1:ab00:0:0:0:0/64');
    expect(ipKey('fe80::1%eth0', 56)).toBe('fe80:0:0:0:0:0:0:0/56');
    expect(ipKey('::ffff:10.0.0.7', 56)).toBe('10.0.0.7');
    expect(ipKey('2001:db8::1', false)).toBe('2001:db8::1');
    expect(defaultKey({ headers: {}, ip: '2001:db8:1:ab12::5' })).toBe('ip:2001:db8:1:ab00:0:0:0:0/56');
    expect(defaultKey({ headers: {}, ip: '2001:db8:1:ab12::5' }, 48)).toBe('ip:2001:db8:1:0:0:0:0:0/48');
  });

  for (const [version, ex] of EXPRESSES) {
  it(`${version}: trust proxy decides which address is the client's`, async () => {
    const policy = { name: 'tp', limit: 1, periodMs: 60_000 };
    const trusting = await expressApp(expressLimit({ client, policy, prefix: `trust${version.at(-1)}:`, timeoutMs: 5000 }), (app) => app.set('trust proxy', true), ex);
    const plain = await expressApp(expressLimit({ client, policy, prefix: `plain${version.at(-1)}:`, timeoutMs: 5000 }), undefined, ex);
    // Behind a trusted proxy, two forwarded addresses are two clients; without trust, one (the socket's).
    expect((await get(trusting.url, { 'x-forwarded-for': '198.51.100.1' })).status).toBe(200);
    expect((await get(trusting.url, { 'x-forwarded-for': '198.51.100.2' })).status).toBe(200);
    expect((await get(trusting.url, { 'x-forwarded-for': '198.51.100.1' })).status).toBe(429);
    expect((await get(plain.url, { 'x-forwarded-for': '198.51.100.1' })).status).toBe(200);
    expect((await get(plain.url, { 'x-forwarded-for': '198.51.100.2' })).status).toBe(429);
  });

  }

  it("Fastify's trustProxy decides which address is the client's", async () => {
    const fa = Fastify({ trustProxy: true });
    fa.addHook('onRequest', fastifyLimit({ client, policy: { name: 'ftp', limit: 1, periodMs: 60_000 }, timeoutMs: 5000 }));
    fa.get('/x', async () => 'ok');
    await fa.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => fa.close());
    const url = `http://127.0.0.1:${(fa.server.address() as AddressInfo).port}/x`;
    expect((await get(url, { 'x-forwarded-for': '2001:db8:7:100::1' })).status).toBe(200);
    expect((await get(url, { 'x-forwarded-for': '2001:db8:7:1ff::2' })).status).toBe(429); // same /56
    expect((await get(url, { 'x-forwarded-for': '2001:db8:7:200::1' })).status).toBe(200); // another /56
  });
});

describe('misuse is loud and the same everywhere', () => {
  it('throws at creation for invalid options', () => {
    const bad: [string, Partial<HttpRateLimitOptions>][] = [
      ['policy', { policy: { limit: 0, periodMs: 1000 } }],
      ['policy', { policy: [] }],
      ['cost', { cost: -1 }],
      ['timeoutMs', { timeoutMs: 0 }],
      ['onUnavailable', { onUnavailable: 'maybe' as 'allow' }],
      ['standardHeaders', { standardHeaders: 'draft-5' as 'draft-6' }],
      ['statusCode', { statusCode: 200 }],
      ['ipv6Subnet', { ipv6Subnet: 129 }],
      ['prefix', { prefix: '{x}' }],
      ['key', { key: 'ip' as unknown as () => string }],
      // Options of other limiters are not silently ignored.
      ['max', { max: 10 } as Partial<HttpRateLimitOptions>],
      ['skipFailedRequests', { skipFailedRequests: 1 } as unknown as Partial<HttpRateLimitOptions>],
    ];
    for (const [argument, opts] of bad) {
      expect(() => createRateLimiter({ client, policy: { limit: 1, periodMs: 1000 }, ...opts } as HttpRateLimitOptions), argument).toThrow(expect.objectContaining({ argument }));
    }
  });

  for (const [version, ex] of EXPRESSES) {
  it(`${version}: a cost of -1, a throwing key, a non-string key and a throwing policy function go to next(err) with one log line, never a silent pass`, async () => {
    const lines: string[] = [];
    const cases: [string, Partial<RateLimitOptions>, RegExp][] = [
      ['cost', { cost: () => -1 }, /cost must be an integer >= 0, not -1/],
      ['key', { key: () => { throw new Error('no session'); } }, /the key function threw: no session/],
      ['key', { key: () => undefined as unknown as string }, /the key function must return a non-empty string, not undefined/],
      ['policy', { policy: () => { throw new Error('plan lookup failed'); } }, /the policy function threw: plan lookup failed/],
    ];
    for (const [argument, opts, text] of cases) {
      const limiter = expressLimit({ client, policy: { limit: 5, periodMs: 1000 }, timeoutMs: 5000, log: (l) => lines.push(l), ...opts } as RateLimitOptions);
      const app = await expressApp(limiter, undefined, ex);
      const r = await get(app.url);
      expect(r.status, argument).toBe(500);
      expect(r.headers.get('ratelimit')).toBeNull();
      expect(app.errors).toHaveLength(1);
      expect(app.errors[0]).toMatchObject({ argument });
      expect(limiter.stats).toMatchObject({ errors: 1, unavailable: 0, allowed: 0 });
      expect(lines.pop()).toMatch(text);
    }
    expect(lines).toHaveLength(0); // exactly one line per failed request
  });

  }

  it('Fastify and node:http answer the same bug with 500', async () => {
    const lines: string[] = [];
    const fa = Fastify();
    fa.get('/x', { onRequest: fastifyLimit({ client, policy: { limit: 5, periodMs: 1000 }, cost: () => -1, log: (l) => lines.push(l), timeoutMs: 5000 }) }, async () => 'ok');
    await fa.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => fa.close());
    const r = await get(`http://127.0.0.1:${(fa.server.address() as AddressInfo).port}/x`);
    expect(r.status).toBe(500);
    const n = await nodeApp({ policy: { limit: 5, periodMs: 1000 }, key: () => { throw new Error('boom'); }, log: (l) => lines.push(l) });
    const r2 = await get(n.url);
    expect(r2.status).toBe(500);
    expect(r2.headers.get('content-type')).toBe('application/problem+json');
    expect(n.stats).toMatchObject({ errors: 1, unavailable: 0 });
    expect(lines).toHaveLength(2);
  });

  it('a refusal for a wrong setup (a key of another type: WRONGTYPE) is an error, not an outage', async () => {
    await redis.call('RL.FIXEDWINDOW', '{test:typed}:default', '5', '1000');
    const lines: string[] = [];
    const n = await nodeApp({ policy: { limit: 5, periodMs: 1000 }, log: (l) => lines.push(l) });
    const r = await get(n.url, { 'x-client': 'typed' });
    expect(r.status).toBe(500);
    expect(n.stats).toMatchObject({ errors: 1, unavailable: 0 });
    expect(lines[0]).toMatch(/WRONGTYPE/);
  });
});

describe('truthful fields', () => {
  it('a refused multi-policy request reports each member as it is: the non-limiting one unspent', async () => {
    const { url } = await nodeApp({
      policy: [
        { name: 's', algorithm: 'fixedwindow', limit: 2, periodMs: 1000 },
        { name: 'h', algorithm: 'gcra', limit: 100, periodMs: 3_600_000 },
      ],
    });
    await get(url, { 'x-client': 'truth' });
    const second = await get(url, { 'x-client': 'truth' });
    expect(second.status).toBe(200);
    const hAfterTwo = /"h";r=(\d+);t=(\d+)/.exec(second.headers.get('ratelimit')!)!;
    const refused = await get(url, { 'x-client': 'truth' });
    expect(refused.status).toBe(429);
    // Nothing was spent on "h": the same r and t as after the second request (the clock is frozen).
    expect(refused.headers.get('ratelimit')).toBe(`"s";r=0;t=1, "h";r=${hAfterTwo[1]};t=${hAfterTwo[2]}`);
  });

  it('names the draft: draft-11 by default, draft-7 and draft-6 on request', async () => {
    const policy = { name: 'd', limit: 4, periodMs: 4000 };
    const d11 = await nodeApp({ policy });
    const d7 = await nodeApp({ policy, standardHeaders: 'draft-7', prefix: 'd7:' });
    const d6 = await nodeApp({ policy, standardHeaders: 'draft-6', prefix: 'd6:' });
    const none = await nodeApp({ policy, standardHeaders: false, prefix: 'none:' });
    const r11 = await get(d11.url, { 'x-client': 'draft' });
    expect([r11.headers.get('ratelimit-policy'), r11.headers.get('ratelimit')]).toEqual(['"d";q=4;w=4', '"d";r=3;t=1']);
    const r7 = await get(d7.url, { 'x-client': 'draft' });
    expect([r7.headers.get('ratelimit-policy'), r7.headers.get('ratelimit')]).toEqual(['4;w=4', 'limit=4, remaining=3, reset=1']);
    const r6 = await get(d6.url, { 'x-client': 'draft' });
    expect([r6.headers.get('ratelimit-policy'), r6.headers.get('ratelimit-limit'), r6.headers.get('ratelimit-remaining'), r6.headers.get('ratelimit-reset'), r6.headers.get('ratelimit')])
      .toEqual(['4;w=4', '4', '3', '1', null]);
    const rn = await get(none.url, { 'x-client': 'draft' });
    expect([rn.status, rn.headers.get('ratelimit'), rn.headers.get('ratelimit-policy')]).toEqual([200, null, null]);
  });

  it('applies the prefix once: <prefix>{<key>}:<policy>', async () => {
    const { url } = await nodeApp({ policy: { name: 'pfx', limit: 3, periodMs: 1000 }, prefix: 'shop:' });
    await get(url, { 'x-client': 'once' });
    expect(await redis.call('KEYS', 'shop:*')).toEqual(['shop:{test:once}:pfx']);
  });
});

describe('what users reach for', () => {
  it('policy as a function of the request (plans), statusCode, message, and req.rateLimit downstream', async () => {
    const free = { name: 'free', limit: 1, periodMs: 60_000 };
    const pro = { name: 'pro', limit: 3, periodMs: 60_000 };
    const limiter = expressLimit({
      client, timeoutMs: 5000, key: testKey,
      policy: (req) => (req.headers['x-plan'] === 'pro' ? pro : free),
      statusCode: 503, message: 'slow down',
    });
    const app = await expressApp(limiter);
    const ok = await get(app.url, { 'x-client': 'plan-a', 'x-plan': 'pro' });
    expect(ok.headers.get('ratelimit-policy')).toBe('"pro";q=3;w=60');
    expect(((await ok.json()) as { rateLimit: unknown }).rateLimit).toMatchObject({ key: 'test:plan-a', limited: false, limit: 3, remaining: 2, policies: [{ name: 'pro', remaining: 2 }] });
    expect((await get(app.url, { 'x-client': 'plan-b' })).status).toBe(200);
    const refused = await get(app.url, { 'x-client': 'plan-b' });
    expect(refused.status).toBe(503);
    expect(await refused.json()).toMatchObject({ status: 503, detail: 'slow down' });
  });

  for (const [version, ex] of EXPRESSES) {
  it(`${version}: a handler answers the refusal with the figures`, async () => {
    const limiter = expressLimit({
      client, timeoutMs: 5000, key: testKey, policy: { name: `hd${version.at(-1)}`, limit: 1, periodMs: 60_000 },
      handler: (_req, res, _next, info) => { res.statusCode = 429; res.end(`wait ${info.retryAfterMs} ms`); },
    });
    const app = await expressApp(limiter, undefined, ex);
    await get(app.url, { 'x-client': 'handler' });
    const r = await get(app.url, { 'x-client': 'handler' });
    expect([r.status, await r.text(), r.headers.get('ratelimit')]).toEqual([429, 'wait 60000 ms', `"hd${version.at(-1)}";r=0;t=60`]);
  });

  }

  it('Fastify: app.register(rateLimit({...})) limits the routes beside it and closes with the app', async () => {
    const fa = Fastify();
    const hook = fastifyLimit({ client, key: testKey, timeoutMs: 5000, prefix: 'reg:', policy: { name: 'reg', limit: 1, periodMs: 60_000 } });
    await fa.register(hook);
    fa.get('/r', async () => 'r');
    await fa.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => fa.close());
    const url = `http://127.0.0.1:${(fa.server.address() as AddressInfo).port}/r`;
    const first = await get(url, { 'x-client': 'registered' });
    expect([first.status, first.headers.get('ratelimit')]).toEqual([200, '"reg";r=0;t=60']);
    expect((await get(url, { 'x-client': 'registered' })).status).toBe(429);
    expect(hook.stats).toMatchObject({ allowed: 1, limited: 1 });
  });

  it("Fastify plugin: app.register, the instance's policy, a route's own config, a route left out", async () => {
    const fa = Fastify();
    await fa.register(cellgatePlugin, { client, key: testKey, timeoutMs: 5000, prefix: 'plug:', policy: { name: 'all', limit: 2, periodMs: 60_000 } });
    fa.get('/a', async (request) => ({ remaining: (request as { rateLimit?: { remaining: number } }).rateLimit?.remaining }));
    fa.get('/b', { config: { rateLimit: { policy: { name: 'own', limit: 1, periodMs: 60_000 } } } }, async () => 'b');
    fa.get('/c', { config: { rateLimit: false } }, async () => 'c');
    await fa.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => fa.close());
    const base = `http://127.0.0.1:${(fa.server.address() as AddressInfo).port}`;
    const h = { 'x-client': 'plugin' };
    const a1 = await get(`${base}/a`, h);
    expect([a1.status, a1.headers.get('ratelimit')]).toEqual([200, '"all";r=1;t=30']);
    expect(await a1.json()).toEqual({ remaining: 1 });
    expect((await get(`${base}/a`, h)).status).toBe(200);
    expect((await get(`${base}/a`, h)).status).toBe(429);
    expect((await get(`${base}/b`, h)).headers.get('ratelimit')).toBe('"own";r=0;t=60');
    expect((await get(`${base}/b`, h)).status).toBe(429);
    const c = await get(`${base}/c`, h);
    expect([c.status, c.headers.get('ratelimit')]).toEqual([200, null]);
    expect((fa as unknown as { cellgate: { stats: { allowed: number; limited: number } } }).cellgate.stats).toMatchObject({ allowed: 2, limited: 1 });
  });
});
