/**
 * skipFailedRequests / skipSuccessfulRequests against a real cellgate, with real HTTP requests, on
 * Express 5, Express 4, Fastify 5 and node:http: a request is counted on the way in and its units
 * are given back (REFUND) after its response, when the response's result is the skipped one. The
 * refund is not awaited by the response, so the tests wait for the limiter's refund counters (a
 * bounded poll) before the next request.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import express from 'express';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { CellgateClient } from '../../src/client/index.ts';
import type { LimiterStats, RateLimitOptions } from '../../src/http/core.ts';
import { createRateLimiter } from '../../src/http/node.ts';
import { rateLimit as expressLimit } from '../../src/http/express.ts';
import { rateLimit as fastifyLimit } from '../../src/http/fastify.ts';
import { startServer, type RunningServer } from '../helpers/server.ts';
import { waitFor } from '../helpers/wait.js';

const express4 = createRequire(import.meta.url)('express4') as typeof express;

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

type Options = Omit<RateLimitOptions, 'client' | 'policy'> & Partial<Pick<RateLimitOptions, 'policy'>>;

interface App {
  url: string;
  stats: LimiterStats;
  /** Resolves when the handler has received a request sent with `x-hang` (it never answers it). */
  hung: () => Promise<void>;
}

/**
 * An app on `framework` limited by `options`: 500 for a request with `x-fail`, no answer at all for
 * one with `x-hang` (until the client goes away), else 200.
 */
async function app(framework: string, prefix: string, options: Options): Promise<App> {
  const full = { client, timeoutMs: 5000, prefix, policy: { limit: 10, periodMs: 60_000 }, ...options } as RateLimitOptions;
  let arrived: () => void = () => {};
  let arrival = new Promise<void>((resolve) => { arrived = resolve; });
  const hung = (): Promise<void> => arrival;
  const onHang = (): void => {
    arrived();
    arrival = new Promise<void>((resolve) => { arrived = resolve; });
  };
  if (framework === 'Fastify 5') {
    const limiter = fastifyLimit(full);
    const fa = Fastify();
    fa.get('/x', { onRequest: limiter }, async (req, reply) => {
      if (req.headers['x-hang'] !== undefined) {
        onHang();
        return new Promise(() => {});
      }
      if (req.headers['x-fail'] !== undefined) return reply.code(500).send('fail');
      return 'ok';
    });
    await fa.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => fa.close());
    return { url: `http://127.0.0.1:${(fa.server.address() as AddressInfo).port}/x`, stats: limiter.stats, hung };
  }
  let srv: http.Server;
  let stats: LimiterStats;
  if (framework === 'node:http') {
    const limit = createRateLimiter(full);
    stats = limit.stats;
    srv = http.createServer(async (req, res) => {
      if (!(await limit(req, res))) return;
      if (req.headers['x-hang'] !== undefined) return onHang();
      res.statusCode = req.headers['x-fail'] !== undefined ? 500 : 200;
      res.end('done');
    });
    srv.listen(0, '127.0.0.1');
  } else {
    const ex = framework === 'Express 4' ? express4 : express;
    const limiter = expressLimit(full);
    stats = limiter.stats;
    const a = ex();
    a.get('/x', limiter, (req, res) => {
      if (req.headers['x-hang'] !== undefined) return onHang();
      res.status(req.headers['x-fail'] !== undefined ? 500 : 200).send('done');
    });
    srv = a.listen(0, '127.0.0.1');
  }
  await new Promise((resolve) => srv.once('listening', resolve));
  closers.push(() => new Promise((resolve) => { srv.closeAllConnections(); srv.close(resolve); }));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/x`, stats, hung };
}

/** Waits (polls, bounded by test/helpers/wait.ts's limit) until the limiter has settled `n` refunds, ok or failed. */
async function refundsSettled(stats: LimiterStats, n: number): Promise<void> {
  await waitFor(() => stats.refunded + stats.refundErrors >= n, `${n} refunds settled`, undefined, 5);
  expect(stats.refunded + stats.refundErrors).toBe(n);
}

const FRAMEWORKS = ['Express 5', 'Express 4', 'Fastify 5', 'node:http'];

describe('skipFailedRequests', () => {
  for (const [n, framework] of FRAMEWORKS.entries()) {
    it(`${framework}: 10 per window, 15 requests of which 10 fail with 500: the failed ones do not count`, async () => {
      const a = await app(framework, `sf${n}:`, { skipFailedRequests: true });
      const statuses: number[] = [];
      for (let i = 0; i < 15; i++) {
        const failing = i % 3 !== 2; // 10 failures, 5 successes, interleaved
        const r = await fetch(a.url, { headers: failing ? { 'x-fail': '1' } : {} });
        statuses.push(r.status);
        await r.arrayBuffer();
        await refundsSettled(a.stats, statuses.filter((s) => s === 500).length);
      }
      expect(statuses.filter((s) => s === 500)).toHaveLength(10);
      expect(statuses.filter((s) => s === 200)).toHaveLength(5);
      expect(a.stats).toMatchObject({ allowed: 15, limited: 0, refunded: 10, refundErrors: 0 });
      // Only the 5 successes were counted: 5 more pass, the next is refused.
      for (let i = 0; i < 5; i++) expect((await fetch(a.url)).status).toBe(200);
      expect((await fetch(a.url)).status).toBe(429);
      expect(a.stats.refunded).toBe(10);
    });
  }

  for (const [n, framework] of FRAMEWORKS.entries()) {
    it(`${framework}: a response the client abandons (closed before it finished) is given back`, async () => {
      const a = await app(framework, `ab${n}:`, { skipFailedRequests: true, policy: { limit: 1, periodMs: 60_000 } });
      const abort = new AbortController();
      const pending = fetch(a.url, { headers: { 'x-hang': '1' }, signal: abort.signal }).catch((e: unknown) => e);
      await a.hung();
      abort.abort();
      expect(await pending).toBeInstanceOf(Error);
      await refundsSettled(a.stats, 1);
      expect(a.stats.refunded).toBe(1);
      // The one unit is back: one request passes, the next is refused.
      expect((await fetch(a.url)).status).toBe(200);
      expect((await fetch(a.url)).status).toBe(429);
    });
  }
});

describe('several policies', () => {
  it('a failed request is given back on every policy it spent (RL.ALL spends, one REFUND per key)', async () => {
    const a = await app('node:http', 'multi:', {
      skipFailedRequests: true,
      policy: [{ name: 's', algorithm: 'fixedwindow', limit: 3, periodMs: 60_000 }, { name: 'h', algorithm: 'tokenbucket', limit: 5, periodMs: 3_600_000 }],
    });
    for (let i = 0; i < 6; i++) {
      expect((await fetch(a.url, { headers: { 'x-fail': '1' } })).status).toBe(500);
      await refundsSettled(a.stats, i + 1);
    }
    for (let i = 0; i < 3; i++) expect((await fetch(a.url)).status).toBe(200);
    const r = await fetch(a.url);
    expect(r.status).toBe(429);
    // Both policies hold only the 3 successes.
    expect(r.headers.get('ratelimit')).toMatch(/^"s";r=0;t=\d+, "h";r=2;t=\d+$/);
  });
});

describe('skipSuccessfulRequests', () => {
  for (const [n, framework] of FRAMEWORKS.entries()) {
    it(`${framework}: successes are given back, failures count (and a refused request spends nothing to give back)`, async () => {
      const a = await app(framework, `ss${n}:`, { skipSuccessfulRequests: true, policy: { limit: 3, periodMs: 60_000, algorithm: 'slidinglog' } });
      for (let i = 0; i < 6; i++) {
        expect((await fetch(a.url)).status).toBe(200);
        await refundsSettled(a.stats, i + 1);
      }
      for (let i = 0; i < 3; i++) expect((await fetch(a.url, { headers: { 'x-fail': '1' } })).status).toBe(500);
      expect((await fetch(a.url)).status).toBe(429);
      expect(a.stats).toMatchObject({ allowed: 9, limited: 1, refunded: 6, refundErrors: 0 });
    });
  }
});

describe('refund errors', () => {
  it('are counted, never thrown, and never change the response', async () => {
    const limit = createRateLimiter({ client, timeoutMs: 5000, prefix: 're:', skipFailedRequests: true, policy: { limit: 5, periodMs: 60_000 } });
    // The handler replaces the request's key by one of another type before failing: the refund
    // after the response gets WRONGTYPE.
    const srv = http.createServer(async (req, res) => {
      if (!(await limit(req, res))) return;
      await redis.del('re:{ip:127.0.0.1}:default');
      await redis.call('RL.TOKENBUCKET', 're:{ip:127.0.0.1}:default', '5', '60000');
      res.statusCode = 500;
      res.end('fail');
    });
    await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
    closers.push(() => new Promise((resolve) => { srv.closeAllConnections(); srv.close(resolve); }));
    const r = await fetch(`http://127.0.0.1:${(srv.address() as AddressInfo).port}/`);
    expect(r.status).toBe(500);
    expect(await r.text()).toBe('fail');
    await refundsSettled(limit.stats, 1);
    expect(limit.stats).toMatchObject({ refunded: 0, refundErrors: 1, errors: 0 });
  });
});

describe('options', () => {
  it('are booleans', () => {
    for (const name of ['skipFailedRequests', 'skipSuccessfulRequests']) {
      expect(() => createRateLimiter({ client, policy: { limit: 1, periodMs: 1000 }, [name]: 'yes' } as RateLimitOptions)).toThrow(expect.objectContaining({ argument: name }));
    }
  });
});
