/**
 * cellgate/client over a real cellgate: the same named fields whatever the library and protocol
 * (ioredis 6 with its RESP3 default and "legacy" reply mapping, ioredis RESP2, node-redis RESP2 and
 * RESP3), typed errors naming the argument, a bounded wait, and a package whose main is a library.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis, ReplyError } from 'ioredis';
import { createClient } from 'redis';
import {
  CellgateArgumentError,
  CellgateClient,
  CellgateReplyError,
  CellgateTimeoutError,
  CellgateUnavailableError,
  connect,
  open,
  type Decision,
} from '../../src/client/index.ts';
import { toCellgateError } from '../../src/client/errors.ts';
import { freePort, startServer, type RunningServer } from '../helpers/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

let server: RunningServer;
const closers: (() => unknown)[] = [];

beforeAll(async () => {
  server = await startServer();
  const admin = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
  await admin.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
  admin.disconnect();
});
afterAll(async () => {
  for (const close of closers) await close();
  await server?.stop();
});

async function variants(): Promise<[string, CellgateClient][]> {
  const io3 = new Redis({ port: server.port, host: '127.0.0.1' }); // ioredis 6 default: RESP3, legacy mapping
  const io2 = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
  const nr2 = createClient({ url: `redis://127.0.0.1:${server.port}` });
  const nr3 = createClient({ url: `redis://127.0.0.1:${server.port}`, RESP: 3 });
  await Promise.all([nr2.connect(), nr3.connect()]);
  closers.push(() => io3.disconnect(), () => io2.disconnect(), () => nr2.destroy(), () => nr3.destroy());
  return [
    ['ioredis RESP3', new CellgateClient(io3)],
    ['ioredis RESP2', new CellgateClient(io2)],
    ['node-redis RESP2', new CellgateClient(nr2)],
    ['node-redis RESP3', new CellgateClient(nr3)],
  ];
}

/** The same sequence of calls, on keys of the variant's own: with the clock frozen, replies must be equal. */
async function script(c: CellgateClient, p: string): Promise<unknown[]> {
  const out: unknown[] = [];
  for (let i = 0; i < 3; i++) out.push(await c.throttle(`${p}:cl`, 1, 1, 60));
  out.push(await c.throttle(`${p}:cl2`, 5, 5, 1, 10)); // can never fit
  out.push(await c.gcra(`${p}:g`, 5, 10, 60, 2));
  for (const algo of ['tokenBucket', 'leakyBucket', 'fixedWindow', 'slidingLog', 'slidingWindow', 'gcraMs'] as const) {
    for (let i = 0; i < 3; i++) out.push(await c[algo](`${p}:${algo}`, 2, 1000));
  }
  out.push(await c.leakyBucket(`${p}:lb`, 5, 1000, { burst: 6, cost: 2 }));
  out.push(await c.all([
    { key: `${p}:s`, algorithm: 'slidinglog', limit: 3, periodMs: 1000 },
    { key: `${p}:3h`, algorithm: 'tokenbucket', limit: 300, periodMs: 10_800_000 },
  ]));
  return out;
}

describe('named fields over every library and protocol', () => {
  it('returns identical decisions over ioredis RESP3 (default), ioredis RESP2, node-redis RESP2 and RESP3', async () => {
    const results: [string, unknown[]][] = [];
    for (const [name, c] of await variants()) results.push([name, await script(c, name.replace(/\W/g, ''))]);
    const reference = results[1][1]; // ioredis RESP2: plain arrays
    for (const [, r] of results) expect(r).toEqual(reference);

    const cl = reference.slice(0, 3) as Decision[];
    expect(cl[0]).toEqual({ limited: false, limit: 2, remaining: 1, retryAfterMs: -1, resetAfterMs: 60_000, delayMs: 0 });
    expect(cl[2]).toMatchObject({ limited: true, remaining: 0, retryAfterMs: 60_000 });
    expect(reference[3]).toMatchObject({ limited: true, retryAfterMs: -1 });
    const tb = reference.slice(5, 8) as Decision[];
    expect(tb.map((d) => d.limited)).toEqual([false, false, true]);
    expect(tb[2]).toMatchObject({ limit: 2, remaining: 0, retryAfterMs: 500 });
    const lb = reference[23] as Decision;
    expect(lb).toMatchObject({ limited: false, limit: 6, remaining: 4, delayMs: 0 });
    const queue = reference.slice(8, 11) as Decision[];
    expect(queue.map((d) => [d.limited, d.delayMs])).toEqual([[false, 0], [false, 500], [true, 0]]);
    const all = reference[24] as { limited: boolean; results: Decision[] };
    expect(all.limited).toBe(false);
    expect(all.results.map((d) => [d.limit, d.remaining])).toEqual([[3, 2], [300, 299]]);
  });
});

describe('errors', () => {
  it('names the argument the server refused, and the one the client refuses before sending', async () => {
    const io = new Redis({ port: server.port, host: '127.0.0.1' });
    closers.push(() => io.disconnect());
    const c = new CellgateClient(io);
    // A period beyond what the server accepts: only the server knows this bound.
    const err = await c.tokenBucket('e:1', 1, 2 ** 50).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CellgateArgumentError);
    expect((err as CellgateArgumentError).argument).toBe('period_ms');
    const local = await c.slidingLog('e:2', 0, 1000).catch((e: unknown) => e);
    expect(local).toBeInstanceOf(CellgateArgumentError);
    expect((local as CellgateArgumentError).argument).toBe('limit');
    const burst = await c.fixedWindow('e:3', 5, 1000, { burst: 2 }).catch((e: unknown) => e);
    expect((burst as CellgateArgumentError).argument).toBe('BURST');
  });

  it('rejects with CellgateTimeoutError when the server does not answer in time', async () => {
    const blocker = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
    const io = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
    closers.push(() => blocker.disconnect(), () => io.disconnect());
    await io.ping();
    const c = new CellgateClient(io, { timeoutMs: 50 });
    const sleeping = blocker.call('DEBUG', 'SLEEP', '0.5');
    const err = await c.gcraMs('t:1', 10, 1000).catch((e: unknown) => e);
    await sleeping;
    expect(err).toBeInstanceOf(CellgateTimeoutError);
  });

  it('connect() to a server that is not there rejects, never hangs; open() gives a client whose calls fail', async () => {
    const port = await freePort();
    await expect(connect(`redis://127.0.0.1:${port}`, { timeoutMs: 2000 })).rejects.toBeInstanceOf(CellgateUnavailableError);
    const c = await open(`redis://127.0.0.1:${port}`, { timeoutMs: 2000 });
    try {
      for (let i = 0; i < 3; i++) {
        const err = await c.throttle('u:1', 5, 10, 60).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(CellgateUnavailableError);
      }
    } finally {
      await c.close();
    }
  });

  it('get() peeks without spending or creating; reset() forgets the key', async () => {
    const c = await connect(`redis://127.0.0.1:${server.port}`);
    closers.push(() => c.close());
    expect(await c.get('tokenbucket', 'peek:1', 5, 1000)).toMatchObject({ limited: false, remaining: 5, resetAfterMs: 0 });
    expect(await c.reset('peek:1')).toBe(false); // the peek created nothing
    await c.tokenBucket('peek:1', 5, 1000, { cost: 3 });
    expect(await c.get('tokenbucket', 'peek:1', 5, 1000)).toMatchObject({ limited: false, remaining: 2 });
    expect(await c.get('tokenbucket', 'peek:1', 5, 1000)).toMatchObject({ remaining: 2 });
    expect(await c.reset('peek:1')).toBe(true);
    expect(await c.get('tokenbucket', 'peek:1', 5, 1000)).toMatchObject({ remaining: 5 });
  });
});

describe('reward() and penalty()', () => {
  it('reward() gives units back on every algorithm and never makes a key fuller than fresh; penalty() spends up to the limit', async () => {
    for (const [name, c] of await variants()) {
      for (const algorithm of ['tokenbucket', 'leakybucket', 'fixedwindow', 'slidinglog', 'slidingwindow', 'gcra'] as const) {
        const key = `rw:${name}:${algorithm}`;
        const params = { algorithm, limit: 5, periodMs: 60_000 };
        // An absent key: nothing to give back, nothing created.
        expect(await c.reward(key, 2, params), `${name} ${algorithm}`).toMatchObject({ limited: false, remaining: 5, resetAfterMs: 0 });
        expect(await c.reset(key)).toBe(false);
        await c.rl(algorithm, key, 5, 60_000, { cost: 4 });
        expect(await c.reward(key, 2, params), `${name} ${algorithm}`).toMatchObject({ limited: false, remaining: 3 });
        expect(await c.reward(key, 50, params), `${name} ${algorithm}`).toMatchObject({ remaining: 5, resetAfterMs: 0 });
        expect(await c.reset(key)).toBe(false); // full again: the refund deleted it
        // penalty: 3 fit; then 4 asked with 2 left: the 2 left are spent; then at the limit nothing is.
        expect(await c.penalty(key, 3, params)).toMatchObject({ limited: false, remaining: 2 });
        expect(await c.penalty(key, 4, params)).toMatchObject({ limited: false, remaining: 0 });
        expect(await c.penalty(key, 1, params)).toMatchObject({ limited: true, remaining: 0 });
      }
    }
  });

  it('reward() and penalty() refuse a count below 1 before sending', async () => {
    const [[, c]] = await variants();
    const err = await c.reward('rw:e', 0, { algorithm: 'gcra', limit: 1, periodMs: 1000 }).catch((e: unknown) => e);
    expect((err as CellgateArgumentError).argument).toBe('REFUND');
    const pen = await c.penalty('rw:e', 0, { algorithm: 'gcra', limit: 1, periodMs: 1000 }).catch((e: unknown) => e);
    expect((pen as CellgateArgumentError).argument).toBe('COST');
  });
});

describe('block()', () => {
  it('refuses every algorithm on the key for ms, with the time left, then the key is fresh; reset() lifts it', async () => {
    const admin = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
    closers.push(() => admin.disconnect());
    try {
      for (const [name, c] of await variants()) {
        const key = `blk:${name}`;
        await c.rl('fixedwindow', key, 5, 60_000, { cost: 3 });
        expect(await c.block(key, 1500)).toBeUndefined();
        await admin.call('DEBUG', 'CLOCK', 'SET', '1800000000500');
        for (const algorithm of ['tokenbucket', 'leakybucket', 'fixedwindow', 'slidinglog', 'slidingwindow', 'gcra'] as const) {
          expect(await c.rl(algorithm, key, 5, 60_000), `${name} ${algorithm}`).toEqual({ limited: true, limit: 5, remaining: 0, retryAfterMs: 1000, resetAfterMs: 1000, delayMs: 0 });
        }
        expect(await c.get('gcra', key, 5, 60_000)).toMatchObject({ limited: true, retryAfterMs: 1000 });
        expect(await c.throttle(key, 4, 5, 60)).toMatchObject({ limited: true, limit: 5, remaining: 0, retryAfterMs: 1000, resetAfterMs: 1000 });
        expect(await c.all([{ key, algorithm: 'slidinglog', limit: 5, periodMs: 1000 }, { key: `${key}:2`, algorithm: 'gcra', limit: 5, periodMs: 1000 }]))
          .toMatchObject({ limited: true, results: [{ limited: true, retryAfterMs: 1000 }, { limited: false, remaining: 4 }] });
        // Fresh at its end: the 3 spent before the block are gone.
        await admin.call('DEBUG', 'CLOCK', 'SET', '1800000001500');
        expect(await c.rl('fixedwindow', key, 5, 60_000)).toMatchObject({ limited: false, remaining: 4 });
        await c.block(key, 60_000);
        expect(await c.reset(key)).toBe(true);
        expect(await c.rl('fixedwindow', key, 5, 60_000)).toMatchObject({ limited: false, remaining: 4 });
        await admin.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
      }
    } finally {
      await admin.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
    }
  });

  it('refuses a bad key or ms before sending; the server\'s refusal names the argument', async () => {
    const [[, c]] = await variants();
    for (const ms of [0, -1, 1.5, Number.NaN, '10' as unknown as number]) {
      const err = await c.block('blk:e', ms).catch((e: unknown) => e);
      expect(err, String(ms)).toBeInstanceOf(CellgateArgumentError);
      expect((err as CellgateArgumentError).argument).toBe('ms');
    }
    expect(((await c.block('', 10).catch((e: unknown) => e)) as CellgateArgumentError).argument).toBe('key');
    const tooLong = await c.block('blk:e', 1e12 + 1).catch((e: unknown) => e);
    expect(tooLong).toBeInstanceOf(CellgateArgumentError);
    expect((tooLong as CellgateArgumentError).argument).toBe('ms');
    expect((tooLong as Error).message).toMatch(/invalid ms '1000000000001': must be <= 1000000000000/);
  });
});

describe('which replies are an outage', () => {
  it('LOADING, BUSY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, NOREPLICAS and maxclients are unavailability; WRONGTYPE, NOPERM, CROSSSLOT are not', () => {
    for (const text of ['LOADING Redis is loading the dataset in memory', 'BUSY Redis is busy running a script', 'TRYAGAIN Multiple keys request during rehashing of slot',
      'CLUSTERDOWN The cluster is down', 'MASTERDOWN Link with MASTER is down', 'NOREPLICAS Not enough good replicas to write.', 'ERR max number of clients reached']) {
      expect(toCellgateError(new ReplyError(text)), text).toBeInstanceOf(CellgateUnavailableError);
    }
    for (const text of ['WRONGTYPE Operation against a key holding the wrong kind of value', "NOPERM User app has no permissions to run the 'rl.gcra' command", "CROSSSLOT Keys in request don't hash to the same slot"]) {
      const e = toCellgateError(new ReplyError(text));
      expect(e, text).toBeInstanceOf(CellgateReplyError);
      expect(e).not.toBeInstanceOf(CellgateUnavailableError);
    }
  });
});

describe('the package', () => {
  it('importing it by name gives the client and starts no server', () => {
    // `cellgate` is the workspace package packages/cellgate (linked by npm ci), resolved through its
    // package.json "exports", as for a user.
    const r = spawnSync(process.execPath, ['--input-type=module', '-e',
      "const m = await import('cellgate'); const c = await import('cellgate/client'); const e = await import('cellgate/express');" +
      "const f = await import('cellgate/fastify'); const h = await import('cellgate/http'); const s = await import('cellgate/express-rate-limit');" +
      "console.log(typeof m.CellgateClient, m.CellgateClient === c.CellgateClient, typeof e.rateLimit, typeof f.rateLimit, typeof h.createRateLimiter, typeof s.CellgateStore)"],
      { cwd: ROOT, encoding: 'utf8', timeout: 20_000 });
    expect(r.signal).toBeNull(); // a server would keep the process alive until the timeout kills it
    expect(r.stdout.trim()).toBe('function true function function function function');
    expect(r.status).toBe(0);
  });

  /** The files `npm pack` would publish from `dir`, and the manifest it would publish. */
  function packed(dir: string): { files: string[]; manifest: Record<string, unknown> } {
    const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: join(ROOT, dir), encoding: 'utf8', timeout: 60_000 });
    expect(r.status).toBe(0);
    const files = (JSON.parse(r.stdout) as { files: { path: string }[] }[])[0].files.map((f) => f.path);
    return { files, manifest: JSON.parse(readFileSync(join(ROOT, dir, 'package.json'), 'utf8')) as Record<string, unknown> };
  }

  it('npm pack of the server (cellgate-server) ships the server, its docs and changelog, not the application package, src/ or test/', () => {
    const { files, manifest } = packed('.');
    expect(manifest.name).toBe('cellgate-server');
    expect(files).toContain('dist/main.js');
    expect(files).toContain('CHANGELOG.md');
    expect(files).toContain('README.md');
    expect(files).toContain('LICENSE');
    expect(files.filter((f) => /^(src|test|bench|scripts|examples|packages|dist\/client|dist\/http)\//.test(f) || f.endsWith('.map'))).toEqual([]);
  });

  it('npm pack of the application package (cellgate) ships the client and middleware with their types, no server, no dependency and no install script', () => {
    const { files, manifest } = packed('packages/cellgate');
    expect(manifest.name).toBe('cellgate');
    for (const f of ['dist/client/index.js', 'dist/client/index.d.ts', 'dist/http/express.d.ts', 'dist/http/fastify.js', 'dist/http/node.js', 'dist/http/express-rate-limit.js', 'README.md', 'LICENSE', 'package.json']) expect(files).toContain(f);
    expect(files.filter((f) => !/^dist\/(client|http)\/[\w.-]+\.(js|d\.ts)$/.test(f) && !['README.md', 'LICENSE', 'package.json'].includes(f))).toEqual([]);
    expect(manifest.dependencies).toBeUndefined();
    expect(Object.keys(manifest.scripts as object).filter((s) => /^(pre|post)?(install|prepare)$/.test(s))).toEqual([]);
    // Released together: one version for both packages, and the same license text.
    expect(manifest.version).toBe((JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version);
    expect(readFileSync(join(ROOT, 'packages/cellgate/LICENSE'), 'utf8')).toBe(readFileSync(join(ROOT, 'LICENSE'), 'utf8'));
  });
});
