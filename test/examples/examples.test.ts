/**
 * The Express and Fastify examples as a user runs them: real processes (cellgate, the example app)
 * and real HTTP requests. One API key gets 10 x 200 then 429s, another is unaffected; with cellgate
 * stopped the app keeps answering by its CELLGATE_UNAVAILABLE policy (allow: its handler still reads
 * req.rateLimit; deny: 503; insurance: the limit kept in-process); when a cellgate comes back on the
 * same port the limits apply again.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { freePort, startServer, type RunningServer } from '../helpers/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const running: ChildProcess[] = [];
const servers: RunningServer[] = [];

afterAll(async () => {
  for (const p of running) if (p.exitCode === null) p.kill('SIGKILL');
  for (const s of servers) await s.stop();
});

async function cellgate(port: number): Promise<RunningServer> {
  const s = await startServer({ args: ['--port', String(port)] });
  servers.push(s);
  const admin = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
  await admin.call('DEBUG', 'CLOCK', 'SET', '1800000000000'); // no refill while the test runs
  admin.disconnect();
  return s;
}

/** Starts an example with PORT=0 and returns its base URL once it says where it listens. */
function example(framework: string, cellgatePort: number, unavailable: 'allow' | 'deny' | 'insurance'): Promise<string> {
  const proc = spawn(process.execPath, [`examples/${framework}/server.mjs`], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', CELLGATE_URL: `redis://127.0.0.1:${cellgatePort}`, CELLGATE_UNAVAILABLE: unavailable, API_KEYS: 'warmup, key-a,key-b,key-c',
      // Generous, so a loaded test machine never turns a slow answer into "unavailable"; a stopped
      // cellgate fails at once (refused connection), not after the timeout.
      CELLGATE_TIMEOUT_MS: '2000' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.push(proc);
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`${framework} example did not start: ${out}`)), 20_000);
    const onData = (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const m = /"port":(\d+)/.exec(out);
      if (m) { clearTimeout(timer); resolve(`http://127.0.0.1:${m[1]}`); }
    };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', (c: Buffer) => { out += c.toString('utf8'); });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`${framework} example exited with ${code}: ${out}`)); });
  });
}

const hello = (base: string, key?: string) => fetch(`${base}/api/hello`, { headers: key ? { 'x-api-key': key } : {}, signal: AbortSignal.timeout(10_000) });

/** Polls until `check` holds (bounded: 100 tries, 100 ms apart), for a reconnection in the background. */
async function eventually(check: () => Promise<boolean>): Promise<boolean> {
  for (let i = 0; i < 100; i++) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return false;
}

for (const framework of ['express', 'fastify']) {
  describe(`examples/${framework}`, () => {
    it('limits a listed API key to 10 per 10 s, leaves another alone, counts unlisted keys by IP, rides out a cellgate outage by its policy, and recovers', async () => {
      const port = await freePort();
      let cg = await cellgate(port);
      const allow = await example(framework, port, 'allow');
      const deny = await example(framework, port, 'deny');
      const insured = await example(framework, port, 'insurance');
      await eventually(async () => (await hello(allow, 'warmup')).headers.get('ratelimit') !== null);
      await eventually(async () => (await hello(deny, 'warmup')).status === 200);
      await eventually(async () => (await hello(insured, 'warmup')).headers.get('ratelimit') !== null);

      for (let i = 0; i < 10; i++) {
        const r = await hello(allow, 'key-a');
        expect(r.status).toBe(200);
        expect(await r.json()).toEqual({ hello: 'world', remaining: 9 - i });
        expect(r.headers.get('ratelimit-policy')).toBe('"default";q=10;w=10');
        expect(r.headers.get('ratelimit')).toMatch(new RegExp(`^"default";r=${9 - i};t=\\d+$`));
      }
      for (let i = 0; i < 3; i++) {
        const r = await hello(allow, 'key-a');
        expect(r.status).toBe(429);
        expect(r.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
        expect(r.headers.get('ratelimit')).toBe('"default";r=0;t=10');
        expect(await r.json()).toEqual({ type: 'about:blank', title: 'Too Many Requests', status: 429, detail: 'limit is 10 requests per 10 seconds for this key' });
      }
      const other = await hello(allow, 'key-b');
      expect(other.status).toBe(200);
      expect(other.headers.get('ratelimit')).toBe('"default";r=9;t=1');
      // An unlisted key buys no bucket of its own: every unlisted or absent key is the client IP's.
      for (let i = 0; i < 10; i++) expect((await hello(allow, i % 2 === 0 ? `forged-${i}` : undefined)).status).toBe(200);
      const forged = await hello(allow, 'forged-new');
      expect(forged.status).toBe(429);
      expect((await hello(allow, 'key-b')).status).toBe(200);

      await cg.stop();
      for (let i = 0; i < 5; i++) {
        const a = await hello(allow, 'key-a'); // answered (by the policy), not hung, not 500
        expect(a.status).toBe(200);
        expect(a.headers.get('ratelimit')).toBeNull();
        expect(await a.json()).toEqual({ hello: 'world', remaining: 10 }); // the quota: nothing is known of what was spent
        const d = await hello(deny, 'key-a');
        expect(d.status).toBe(503);
        expect(d.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      }
      const stats = (await (await fetch(`${allow}/stats`)).json()) as { unavailable: number };
      expect(stats.unavailable).toBeGreaterThanOrEqual(5);
      // insurance: the app itself keeps 10 per 10 s for each client while cellgate is away.
      // (GCRA: one unit back per second, so a slow machine may see one more 200 per second elapsed.)
      const started = Date.now();
      const insured12 = await Promise.all(Array.from({ length: 12 }, () => hello(insured, 'key-d')));
      const passed = insured12.filter((r) => r.status === 200).length;
      expect(passed).toBeGreaterThanOrEqual(10);
      expect(passed).toBeLessThanOrEqual(10 + Math.floor((Date.now() - started) / 1000));
      expect(insured12.filter((r) => r.status === 429).length).toBe(12 - passed);
      expect(((await (await fetch(`${insured}/stats`)).json()) as { insurance: number }).insurance).toBe(12);

      cg = await cellgate(port); // a fresh cellgate: empty keyspace, same port
      expect(await eventually(async () => (await hello(allow, 'key-c')).headers.get('ratelimit') !== null)).toBe(true);
      expect(await eventually(async () => (await hello(deny, 'key-c')).status === 200)).toBe(true);
      const back = await hello(allow, 'key-a');
      expect(back.status).toBe(200);
      expect(back.headers.get('ratelimit')).toBe('"default";r=9;t=1');
    });
  });
}
