/**
 * `cellgate/express-rate-limit` under express-rate-limit itself (the npm package, a dev dependency)
 * and a real cellgate: express-rate-limit's own store expectations where they apply (its external
 * store test: limit 3 → 200, 200, 200, 429; its memory store's tests: increment counts 1, 2..., get,
 * decrement never below 0, resetKey, a new window starts at 1), its skipFailedRequests through
 * `decrement`, the count shared by two apps (the point of a shared store), and a cellgate that is
 * down answered by express-rate-limit's own `passOnStoreError`. Time is cellgate's `DEBUG CLOCK`.
 */
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import express from 'express';
import { rateLimit, type Store } from 'express-rate-limit';
import { Redis } from 'ioredis';
import { CellgateUnavailableError } from '../../src/client/index.ts';
import { CellgateStore } from '../../src/http/express-rate-limit.ts';
import { freePort, startServer, type RunningServer } from '../helpers/server.ts';

const NOW = 1_800_000_000_000; // a multiple of a minute: a window starts here
let server: RunningServer;
let admin: Redis;
let url: string;
const closers: (() => unknown)[] = [];

beforeAll(async () => {
  server = await startServer();
  url = `redis://127.0.0.1:${server.port}`;
  admin = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
  await admin.call('DEBUG', 'CLOCK', 'SET', String(NOW));
});
afterAll(async () => {
  for (const close of closers) await close();
  admin?.disconnect();
  await server?.stop();
});

function store(prefix: string, options: Partial<ConstructorParameters<typeof CellgateStore>[0]> = {}): CellgateStore {
  const s = new CellgateStore({ client: url, prefix, timeoutMs: 5000, ...options });
  closers.push(() => s.shutdown());
  return s;
}

async function app(limiter: express.RequestHandler): Promise<string> {
  const a = express();
  a.get('/', limiter, (_req, res) => { res.send('ok'); });
  a.get('/fail', limiter, (_req, res) => { res.status(500).send('failed'); });
  const srv = a.listen(0, '127.0.0.1');
  await new Promise((resolve) => srv.once('listening', resolve));
  closers.push(() => new Promise((resolve) => srv.close(resolve)));
  return `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
}

describe('CellgateStore under express-rate-limit', () => {
  it('is express-rate-limit\'s Store (its type), and a limit of 3 answers 200, 200, 200, 429 (its own store test)', async () => {
    const typed: Store = store('erl-basic:');
    const base = await app(rateLimit({ windowMs: 60_000, limit: 3, store: typed, standardHeaders: 'draft-7', legacyHeaders: false }));
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await fetch(base)).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
    const last = await fetch(base);
    expect(last.status).toBe(429);
    // express-rate-limit's fields from the store's totalHits and resetTime: the window's end, a minute away.
    expect(last.headers.get('ratelimit')).toMatch(/^limit=3, remaining=0, reset=(59|60)$/);
  });

  it('counts one limit across two apps with the same prefix, as a shared store does', async () => {
    const a = await app(rateLimit({ windowMs: 60_000, limit: 3, store: store('erl-shared:') }));
    const b = await app(rateLimit({ windowMs: 60_000, limit: 3, store: store('erl-shared:') }));
    expect([(await fetch(a)).status, (await fetch(b)).status, (await fetch(a)).status, (await fetch(b)).status]).toEqual([200, 200, 200, 429]);
  });

  it('skipFailedRequests gives a failed request back through decrement', async () => {
    const base = await app(rateLimit({ windowMs: 60_000, limit: 2, store: store('erl-skip:'), skipFailedRequests: true, keyGenerator: () => 'client' }));
    for (let i = 0; i < 5; i++) expect((await fetch(`${base}/fail`)).status).toBe(500);
    // The decrements run after each response: wait until they are all in.
    const s = store('erl-skip:');
    s.init({ windowMs: 60_000 });
    for (let i = 0; i < 100 && (await s.get('client')) !== undefined; i++) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await s.get('client')).toBeUndefined();
    expect([(await fetch(base)).status, (await fetch(base)).status, (await fetch(base)).status]).toEqual([200, 200, 429]);
  });

  it('cellgate down: the store rejects with cellgate\'s error, and passOnStoreError decides (true: through; default: 500)', async () => {
    const dead = `redis://127.0.0.1:${await freePort()}`;
    const errors: unknown[] = [];
    const logger = { error: (e: unknown) => { errors.push(e); }, warn: () => {} };
    const pass = await app(rateLimit({ windowMs: 60_000, limit: 1, store: store('erl-down:', { client: dead }), passOnStoreError: true, logger } as Parameters<typeof rateLimit>[0]));
    const strict = await app(rateLimit({ windowMs: 60_000, limit: 1, store: store('erl-down:', { client: dead }) }));
    expect([(await fetch(pass)).status, (await fetch(pass)).status]).toEqual([200, 200]);
    expect(errors[0]).toBeInstanceOf(CellgateUnavailableError);
    expect((errors[0] as Error).message).toMatch(/^cellgate unavailable: /);
    expect((await fetch(strict)).status).toBe(500);
  });
});

describe('CellgateStore alone (express-rate-limit\'s memory-store expectations that apply)', () => {
  it('increment counts 1, 2...; get returns the count and a Date; decrement; resetKey forgets the key', async () => {
    const s = store('erl-unit:');
    s.init({ windowMs: 60_000 });
    expect(await s.get('k')).toBeUndefined();
    expect(await s.increment('k')).toEqual({ totalHits: 1, resetTime: expect.any(Date) });
    expect((await s.increment('k')).totalHits).toBe(2);
    const got = await s.get('k');
    expect(got?.totalHits).toBe(2);
    expect(Math.abs(got!.resetTime!.getTime() - (Date.now() + 60_000))).toBeLessThan(5000);
    await s.decrement('k');
    expect((await s.increment('k')).totalHits).toBe(2);
    await s.resetKey('k');
    expect(await s.get('k')).toBeUndefined();
    expect((await s.increment('k')).totalHits).toBe(1);
  });

  it('decrement never takes a count below 0', async () => {
    const s = store('erl-floor:');
    s.init({ windowMs: 60_000 });
    await s.increment('k');
    await s.decrement('k');
    await s.decrement('k');
    expect(await s.get('k')).toBeUndefined();
    expect((await s.increment('k')).totalHits).toBe(1);
  });

  it('counts past any limit (express-rate-limit compares), and a new window starts at 1', async () => {
    const s = store('erl-window:');
    s.init({ windowMs: 1000 });
    for (let i = 1; i <= 50; i++) expect((await s.increment('k')).totalHits).toBe(i);
    await admin.call('DEBUG', 'CLOCK', 'ADVANCE', '1000');
    try {
      expect((await s.increment('k')).totalHits).toBe(1);
    } finally {
      await admin.call('DEBUG', 'CLOCK', 'SET', String(NOW));
    }
  });

  it('two stores with other prefixes keep other counts; options are checked', async () => {
    const a = store('erl-a:');
    const b = store('erl-b:');
    a.init({ windowMs: 60_000 });
    b.init({ windowMs: 60_000 });
    await a.increment('k');
    await a.increment('k');
    expect((await b.increment('k')).totalHits).toBe(1);
    expect(() => new CellgateStore({ client: url, max: 3 } as never)).toThrow(/unknown option 'max'/);
    expect(() => a.init({ windowMs: 0 })).toThrow(/windowMs must be an integer/);
  });
});
