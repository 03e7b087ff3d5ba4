/**
 * The middleware under a real Express 5 and a real Fastify 5 app while a real cellgate process is
 * late, killed or paused (SIGSTOP): the application's handler, which reads `req.rateLimit` as the
 * README's does, never sees it undefined (no 500), `source` says who decided, 'insurance' keeps
 * enforcing the limit in-process, each outage is logged once when it starts and once when it ends,
 * and `ready()` waits its stated time for a cellgate that is still starting.
 */
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import express from 'express';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { CellgateUnavailableError } from '../../src/client/index.ts';
import { rateLimit as expressLimit } from '../../src/http/express.ts';
import { cellgatePlugin } from '../../src/http/fastify.ts';
import type { LimiterStats, RateLimitOptions } from '../../src/http/core.ts';
import { freePort, startServer, type RunningServer } from '../helpers/server.ts';
import { waitFor } from '../helpers/wait.ts';

const closers: (() => unknown)[] = [];
afterAll(async () => {
  for (const close of closers.reverse()) await close();
});

async function cellgate(port: number): Promise<RunningServer> {
  const s = await startServer({ args: ['--port', String(port)] });
  closers.push(() => s.stop('SIGKILL'));
  const admin = new Redis({ port, host: '127.0.0.1', protocol: 2 });
  await admin.call('DEBUG', 'CLOCK', 'SET', '1800000000000'); // nothing refills while the test runs
  admin.disconnect();
  return s;
}

type Options = Omit<RateLimitOptions, 'client' | 'policy'>;
interface App { url: string; stats: LimiterStats; logs: string[]; ready(waitMs?: number): Promise<void> }

/** The README's handler: it reads req.rateLimit without a guard. */
const body = (info: { remaining: number; source: string }) => ({ remaining: info.remaining, source: info.source });

const FRAMEWORKS: [string, (url: string, options: Options) => Promise<App>][] = [
  ['Express', async (url, options) => {
    const logs: string[] = [];
    const limiter = expressLimit({ client: url, policy: { limit: 3, periodMs: 3_600_000 }, log: (l) => logs.push(l), ...options });
    const app = express();
    app.get('/api', limiter, (req, res) => { res.json(body((req as unknown as { rateLimit: { remaining: number; source: string } }).rateLimit)); });
    const srv = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => srv.once('listening', resolve));
    closers.push(() => new Promise((resolve) => srv.close(() => resolve(limiter.close()))));
    return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/api`, stats: limiter.stats, logs, ready: limiter.ready };
  }],
  ['Fastify', async (url, options) => {
    const logs: string[] = [];
    const app = Fastify();
    await app.register(cellgatePlugin, { client: url, policy: { limit: 3, periodMs: 3_600_000 }, log: (l) => logs.push(l), ...options });
    app.get('/api', async (request) => body((request as unknown as { rateLimit: { remaining: number; source: string } }).rateLimit));
    await app.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => app.close());
    const handle = (app as unknown as { cellgate: { stats: LimiterStats; ready(waitMs?: number): Promise<void> } }).cellgate;
    return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/api`, stats: handle.stats, logs, ready: handle.ready };
  }],
];

async function get(url: string, client: string): Promise<{ status: number; retryAfter: string | null; ratelimit: string | null; json: { remaining?: number; source?: string; title?: string } }> {
  const r = await fetch(url, { headers: { 'x-client': client }, signal: AbortSignal.timeout(20_000) });
  return { status: r.status, retryAfter: r.headers.get('retry-after'), ratelimit: r.headers.get('ratelimit'), json: await r.json() as { remaining?: number } };
}

const byHeader = (req: { headers: Record<string, unknown> }) => String(req.headers['x-client']);

for (const [framework, start] of FRAMEWORKS) {
  describe(`${framework}: cellgate killed and started again`, () => {
    it("'allow' lets requests through with req.rateLimit set (source onUnavailable, the quota as figures); 'deny' answers 503; both log the outage once and its end once", async () => {
      const port = await freePort();
      let cg = await cellgate(port);
      const url = `redis://127.0.0.1:${port}`;
      const allow = await start(url, { onUnavailable: 'allow', key: byHeader, timeoutMs: 5000 });
      const deny = await start(url, { onUnavailable: 'deny', key: byHeader, timeoutMs: 5000 });
      expect(await get(allow.url, 'a')).toMatchObject({ status: 200, json: { remaining: 2, source: 'cellgate' } });
      expect(await get(deny.url, 'a')).toMatchObject({ status: 200, json: { remaining: 1, source: 'cellgate' } });

      await cg.stop('SIGKILL');
      for (let i = 0; i < 3; i++) {
        // Before: req.rateLimit undefined, and this handler's TypeError answered 500.
        expect(await get(allow.url, 'a')).toMatchObject({ status: 200, ratelimit: null, json: { remaining: 3, source: 'onUnavailable' } });
        expect(await get(deny.url, 'a')).toMatchObject({ status: 503, retryAfter: '1', json: { title: 'Service Unavailable' } });
      }
      expect(allow.stats).toMatchObject({ unavailable: 3, insurance: 0, errors: 0 });
      expect(allow.stats.lastError).toBeInstanceOf(CellgateUnavailableError);
      expect(allow.logs).toHaveLength(1);
      expect(allow.logs[0]).toMatch(/^cellgate rate limiter: cellgate unavailable: .*; requests are let through \(onUnavailable: 'allow'\) until cellgate answers again$/);
      expect(deny.logs[0]).toMatch(/requests are refused with 503 \(onUnavailable: 'deny'\)/);

      cg = await cellgate(port);
      await waitFor(async () => (await get(allow.url, 'b')).json.source === 'cellgate', 'the allow app back on cellgate');
      await waitFor(async () => (await get(deny.url, 'b')).status === 200, 'the deny app back on cellgate');
      expect(allow.logs).toEqual([allow.logs[0], 'cellgate rate limiter: cellgate answers again']);
      expect(deny.logs[1]).toBe('cellgate rate limiter: cellgate answers again');
      // A fresh cellgate: the state of before the outage is gone with the killed process.
      expect(await get(allow.url, 'a')).toMatchObject({ status: 200, json: { remaining: 2, source: 'cellgate' } });
    });

    it("'insurance' keeps the limit in this process while cellgate is down (429 with Retry-After after the quota), and cellgate decides again once back", async () => {
      const port = await freePort();
      let cg = await cellgate(port);
      const app = await start(`redis://127.0.0.1:${port}`, { onUnavailable: 'insurance', insurance: { maxKeys: 100 }, key: byHeader, timeoutMs: 5000 });
      expect(await get(app.url, 'a')).toMatchObject({ status: 200, json: { source: 'cellgate' } });

      await cg.stop('SIGKILL');
      for (let i = 0; i < 3; i++) {
        const r = await get(app.url, 'a');
        expect(r).toMatchObject({ status: 200, json: { remaining: 2 - i, source: 'insurance' } });
        expect(r.ratelimit).toMatch(new RegExp(`^"default";r=${2 - i};t=\\d+$`));
      }
      const refused = await get(app.url, 'a');
      expect(refused.status).toBe(429);
      expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(1);
      // Another client has its own budget in the insurance limiter too.
      expect(await get(app.url, 'b')).toMatchObject({ status: 200, json: { remaining: 2, source: 'insurance' } });
      expect(app.stats).toMatchObject({ unavailable: 5, insurance: 5, limited: 1, errors: 0 });
      expect(app.logs).toHaveLength(1);
      expect(app.logs[0]).toMatch(/the insurance limiter decides in this process \(onUnavailable: 'insurance'\)/);

      cg = await cellgate(port);
      await waitFor(async () => (await get(app.url, 'c')).json.source === 'cellgate', 'back on cellgate');
      expect(app.logs[1]).toBe('cellgate rate limiter: cellgate answers again');
      // A fresh cellgate decides 'a' from its own (empty) state: insurance's spends are not carried over.
      expect(await get(app.url, 'a')).toMatchObject({ status: 200, json: { remaining: 2, source: 'cellgate' } });
    });
  });

  describe(`${framework}: cellgate paused (SIGSTOP)`, () => {
    it("a request waits timeoutMs, then insurance decides it; after SIGCONT cellgate decides again", async () => {
      const port = await freePort();
      const cg = await cellgate(port);
      // A second long enough for a busy machine's answers, short enough for the paused ones.
      const app = await start(`redis://127.0.0.1:${port}`, { onUnavailable: 'insurance', key: byHeader, timeoutMs: 1000 });
      await waitFor(async () => (await get(app.url, 'warm')).json.source === 'cellgate', 'cellgate answers');
      cg.proc.kill('SIGSTOP');
      try {
        const r = await get(app.url, 'p');
        expect(r).toMatchObject({ status: 200, json: { remaining: 2, source: 'insurance' } });
        expect(app.stats.lastError?.name).toBe('CellgateTimeoutError');
        expect(app.logs[0]).toMatch(/^cellgate rate limiter: cellgate did not answer RL\.GCRA within 1000 ms; the insurance limiter decides/);
      } finally {
        cg.proc.kill('SIGCONT');
      }
      await waitFor(async () => (await get(app.url, 'q')).json.source === 'cellgate', 'cellgate answers after SIGCONT');
      expect(app.logs).toContain('cellgate rate limiter: cellgate answers again');
    });
  });

  describe(`${framework}: ready() and a cellgate that starts late`, () => {
    it('ready(waitMs) waits for a cellgate that starts after the app, and the first request is decided by it', async () => {
      const port = await freePort();
      const app = await start(`redis://127.0.0.1:${port}`, { key: byHeader, timeoutMs: 5000 });
      const started = Date.now();
      let settled = false;
      const ready = app.ready(60_000).finally(() => { settled = true; });
      // Before: ready() rejected here, after ~0.2 s, with ioredis's "Stream isn't writeable ...".
      await new Promise((resolve) => setTimeout(resolve, 1500));
      expect(settled).toBe(false);
      await cellgate(port);
      await ready;
      expect(Date.now() - started).toBeGreaterThanOrEqual(1500);
      expect(await get(app.url, 'late')).toMatchObject({ status: 200, json: { remaining: 2, source: 'cellgate' } });
    });

    it('ready(waitMs) with nothing listening rejects after waitMs, in cellgate\'s words', async () => {
      const port = await freePort();
      const app = await start(`redis://127.0.0.1:${port}`, { key: byHeader });
      const started = Date.now();
      const err = await app.ready(1000).then(() => undefined, (e: unknown) => e);
      expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
      expect(err).toBeInstanceOf(CellgateUnavailableError);
      const message = (err as Error).message;
      expect(message).toMatch(/^cellgate unavailable: /);
      expect(message).toContain(`cellgate refused the connection (nothing listens there): connect ECONNREFUSED 127.0.0.1:${port}`);
      expect(message).toContain('waited 1000 ms');
      expect(message).not.toMatch(/enableOfflineQueue|Stream isn't writeable/);
    });
  });
}
