/**
 * The first request after start: a client over a connection that is still being opened, `connect()`
 * resolving on a ready connection, a middleware given a URL answering its first requests by the
 * policy (not 503, not an unlimited pass), `ready()`, and an app that closes its server and its
 * limiter exiting by itself. Real cellgate, real connections, real HTTP; the apps that must exit run
 * as child processes.
 */
import { spawn } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import express from 'express';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { CellgateClient, CellgateUnavailableError, connect } from '../../src/client/index.ts';
import { rateLimit as expressLimit } from '../../src/http/express.ts';
import { freePort, startServer, type RunningServer } from '../helpers/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let server: RunningServer;
let url: string;
const closers: (() => unknown)[] = [];

beforeAll(async () => {
  server = await startServer();
  url = `redis://127.0.0.1:${server.port}`;
  const admin = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
  await admin.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
  admin.disconnect();
});
afterAll(async () => {
  for (const close of closers) await close();
  await server?.stop();
});

describe('the client', () => {
  it("answers a call made at once on an ioredis connection created with enableOfflineQueue: false", async () => {
    const redis = new Redis({ port: server.port, host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    closers.push(() => redis.disconnect());
    expect(redis.status).toBe('connecting');
    const cellgate = new CellgateClient(redis, { timeoutMs: 5000 });
    const d = await cellgate.throttle('startup:io', 5, 10, 60);
    expect(d).toMatchObject({ limited: false, remaining: 5 });
  });

  it('answers a call made at once on a node-redis connection still connecting', async () => {
    const nr = createClient({ url, disableOfflineQueue: true });
    const connecting = nr.connect();
    closers.push(async () => { await connecting; nr.destroy(); });
    const cellgate = new CellgateClient(nr, { timeoutMs: 5000 });
    expect(await cellgate.rl('gcra', 'startup:nr', 5, 1000)).toMatchObject({ limited: false, remaining: 4 });
  });

  it('connect() resolves on a ready connection, and rejects (without hanging) when nothing listens', async () => {
    const c = await connect(url, { connectTimeoutMs: 5000 });
    closers.push(() => c.close());
    await expect(c.ready()).resolves.toBeUndefined();
    expect((await c.rl('gcra', 'startup:connect', 5, 1000)).remaining).toBe(4);
    const dead = await freePort();
    await expect(connect(`redis://127.0.0.1:${dead}`, { connectTimeoutMs: 5000 })).rejects.toBeInstanceOf(CellgateUnavailableError);
  });

  it('connect() resolves for an ACL user that may not PING (the server answered)', async () => {
    const admin = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
    await admin.call('ACL', 'SETUSER', 'noping', 'on', '>pw', '~*', '+@limiter', '+@connection', '-ping', '+info');
    admin.disconnect();
    const c = await connect(`redis://noping:pw@127.0.0.1:${server.port}`, { connectTimeoutMs: 5000 });
    closers.push(() => c.close());
    expect((await c.rl('gcra', 'startup:noping', 5, 1000)).remaining).toBe(4);
  });

  it('a call on a connection that failed to open fails at once as unavailable, not after waiting', async () => {
    const dead = await freePort();
    const redis = new Redis({ port: dead, host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
    redis.on('error', () => {});
    closers.push(() => redis.disconnect());
    const cellgate = new CellgateClient(redis, { timeoutMs: 60_000 });
    // The timeout is a minute: an unavailable error (not a timeout) shows the call did not wait for it.
    await expect(cellgate.rl('gcra', 'startup:dead', 5, 1000)).rejects.toBeInstanceOf(CellgateUnavailableError);
  });
});

describe('the middleware given a URL', () => {
  for (const onUnavailable of ['deny', 'allow'] as const) {
    it(`answers the first requests right after listen by the policy (onUnavailable: ${onUnavailable})`, async () => {
      const limiter = expressLimit({ client: url, policy: { name: `first-${onUnavailable}`, limit: 10, periodMs: 10_000 }, onUnavailable, timeoutMs: 5000 });
      closers.push(() => limiter.close());
      const app = express();
      app.get('/x', limiter, (_req, res) => { res.send('ok'); });
      const srv = app.listen(0, '127.0.0.1');
      closers.push(() => new Promise((resolve) => srv.close(resolve)));
      await new Promise((resolve) => srv.once('listening', resolve));
      const base = `http://127.0.0.1:${(srv.address() as AddressInfo).port}/x`;
      const first = await Promise.all([0, 1, 2, 3].map(() => fetch(base)));
      expect(first.map((r) => r.status)).toEqual([200, 200, 200, 200]);
      expect(first.every((r) => /^"first-\w+";r=[5-9];t=\d+$/.test(r.headers.get('ratelimit') ?? ''))).toBe(true);
      expect(limiter.stats).toMatchObject({ allowed: 4, unavailable: 0 });
      await expect(limiter.ready()).resolves.toBeUndefined();
    });
  }

  it('ready() rejects when cellgate does not answer', async () => {
    const dead = await freePort();
    const limiter = expressLimit({ client: `redis://127.0.0.1:${dead}`, policy: { limit: 1, periodMs: 1000 } });
    closers.push(() => limiter.close());
    await expect(limiter.ready(2000)).rejects.toBeInstanceOf(CellgateUnavailableError);
  });
});

/** Runs an app as a child process; resolves with its exit code and output (SIGKILL after 30 s: a hang). */
function runApp(source: string): Promise<{ code: number | null; signal: string | null; out: string }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, ['--input-type=module', '-e', source], { cwd: ROOT, env: { ...process.env, CELLGATE_URL: url }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout.on('data', (c: Buffer) => (out += c.toString('utf8')));
    proc.stderr.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const killer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
    proc.on('exit', (code, signal) => { clearTimeout(killer); resolve({ code, signal, out }); });
  });
}

describe('closing', () => {
  it('an Express app that closes its server and its limiter exits by itself', async () => {
    const r = await runApp(`
      import express from 'express';
      import { rateLimit } from 'cellgate/express';
      const limiter = rateLimit({ client: process.env.CELLGATE_URL, policy: { name: 'exit', limit: 5, periodMs: 1000 }, timeoutMs: 5000 });
      const app = express();
      app.get('/', limiter, (req, res) => res.send('ok'));
      const server = app.listen(0, '127.0.0.1', async () => {
        const res = await fetch('http://127.0.0.1:' + server.address().port + '/', { headers: { connection: 'close' } });
        console.log(res.status, res.headers.get('ratelimit'));
        server.close(() => limiter.close());
      });
    `);
    expect(r).toMatchObject({ code: 0, signal: null });
    expect(r.out).toMatch(/^200 "exit";r=4;t=1$/m);
  });

  it('a Fastify app with the plugin exits by itself after app.close()', async () => {
    const r = await runApp(`
      import Fastify from 'fastify';
      import { cellgatePlugin } from 'cellgate/fastify';
      const app = Fastify();
      await app.register(cellgatePlugin, { client: process.env.CELLGATE_URL, policy: { name: 'exitf', limit: 5, periodMs: 1000 }, timeoutMs: 5000 });
      app.get('/', async () => 'ok');
      const res = await app.inject({ method: 'GET', url: '/' });
      console.log(res.statusCode, res.headers['ratelimit']);
      await app.close();
    `);
    expect(r).toMatchObject({ code: 0, signal: null });
    expect(r.out).toMatch(/^200 "exitf";r=4;t=1$/m);
  });
});
