/**
 * examples/replicas as a user runs it, without docker: the compose file is read with the `yaml`
 * package and checked (two app replicas, each reaching only its own sidecar on loopback, both sidecars
 * on one Redis), then the same topology is started on loopback from the compose file's own arguments
 * (ports rewritten): one redis-server, two cellgate processes, two instances of examples/express.
 * Twice the limit of requests, alternated over both apps, get exactly `limit` 200s, counted down across
 * the two apps; the same two replicas without `--backend` let twice the limit through.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { parse } from 'yaml';
import { startServer, type RunningServer } from '../helpers/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const EXAMPLE = join(ROOT, 'examples', 'replicas');
const LIMIT = 10; // examples/express: 10 requests per 10 s per listed API key (API_KEYS in the compose file)

interface Service {
  image?: string;
  build?: { context: string; dockerfile?: string };
  command?: string[];
  environment?: Record<string, string>;
  network_mode?: string;
  networks?: string[];
  ports?: string[];
  depends_on?: Record<string, { condition: string }>;
}
const compose = parse(readFileSync(join(EXAMPLE, 'docker-compose.yml'), 'utf8')) as { services: Record<string, Service> };
const services = compose.services;

const running: ChildProcess[] = [];
const servers: RunningServer[] = [];
const dirs: string[] = [];

afterAll(async () => {
  for (const p of running) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  for (const s of servers) await s.stop('SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** The value after `flag` in an argument list. */
function flag(args: string[], name: string): string {
  const i = args.indexOf(name);
  expect(i, `${name} in ${args.join(' ')}`).toBeGreaterThanOrEqual(0);
  return args[i + 1];
}

function canListen(port: number): Promise<boolean> {
  return new Promise((done) => {
    const s = net.createServer();
    s.once('error', () => done(false));
    s.listen(port, '127.0.0.1', () => s.close(() => done(true)));
  });
}

/** A redis-server on a random free loopback port with its own temp dir (retried if the port is taken meanwhile). */
async function startRedis(): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'cellgate-replicas-redis-'));
  dirs.push(dir);
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = 20000 + Math.floor(Math.random() * 40000);
    if (!(await canListen(port))) continue;
    const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
    running.push(proc);
    for (let i = 0; i < 100 && proc.exitCode === null; i++) {
      const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      probe.on('error', () => {});
      try {
        await probe.connect();
        if ((await probe.ping()) === 'PONG') return port;
      } catch {
        /* not up yet */
      } finally {
        probe.disconnect();
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    proc.kill('SIGKILL'); // exited (port taken after all) or never answered: another port
  }
  throw new Error('redis-server did not start');
}

/** A sidecar with the compose file's command: its port and its backend's address rewritten to loopback ones (no backend flags at all for `null`). */
async function sidecar(service: Service, redisPort: number | null): Promise<RunningServer> {
  let args = [...service.command!];
  args[args.indexOf('--port') + 1] = '0'; // startServer reads the port from the ready line
  if (redisPort === null) args = args.filter((a, i) => !a.startsWith('--backend') && !args[i - 1]?.startsWith('--backend'));
  else args[args.indexOf('--backend') + 1] = flag(args, '--backend').replace('redis:6379', `127.0.0.1:${redisPort}`);
  const s = await startServer({ args });
  servers.push(s);
  return s;
}

/** One example app with the compose service's command and environment, listening on loopback, asking `sidecarPort`. */
function app(service: Service, sidecarPort: number): Promise<string> {
  const [node, ...args] = service.command!;
  expect(node).toBe('node');
  const proc = spawn(process.execPath, args, {
    cwd: ROOT,
    env: {
      ...process.env,
      ...service.environment,
      HOST: '127.0.0.1',
      PORT: '0',
      CELLGATE_URL: service.environment!.CELLGATE_URL.replace(/:\d+$/, `:${sidecarPort}`),
      // Generous, so a loaded test machine never turns a slow answer into "unavailable" (which the
      // example's policy would let through).
      CELLGATE_TIMEOUT_MS: '5000',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.push(proc);
  return new Promise((done, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`example app did not start: ${out}`)), 20_000);
    proc.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const m = /"port":(\d+)/.exec(out);
      if (m) { clearTimeout(timer); done(`http://127.0.0.1:${m[1]}`); }
    });
    proc.stderr!.on('data', (c: Buffer) => { out += c.toString('utf8'); });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`example app exited with ${code}: ${out}`)); });
  });
}

async function admin<T>(port: number, fn: (c: Redis) => Promise<T>): Promise<T> {
  const c = new Redis({ port, host: '127.0.0.1', protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0 });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    c.disconnect();
  }
}

const info = async (port: number): Promise<Record<string, string>> =>
  Object.fromEntries(String(await admin(port, (c) => c.call('INFO', 'backend'))).split('\r\n').filter((l) => l.includes(':')).map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1)]));

/** Polls until `check` holds (bounded: 100 tries, 100 ms apart). */
async function eventually(check: () => Promise<boolean>): Promise<boolean> {
  for (let i = 0; i < 100; i++) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

const hello = (base: string, key: string) => fetch(`${base}/api/hello`, { headers: { 'x-api-key': key }, signal: AbortSignal.timeout(10_000) });

/**
 * Two sidecars (frozen at the same instant, so nothing refills while the test runs) and the two apps,
 * then 2 × LIMIT requests alternated over the apps: the statuses in order and the RateLimit fields.
 */
async function replicas(redisPort: number | null): Promise<{ statuses: number[]; remaining: (string | null)[]; sidecars: RunningServer[] }> {
  const sidecars = [await sidecar(services['cellgate-1'], redisPort), await sidecar(services['cellgate-2'], redisPort)];
  for (const s of sidecars) {
    // Up, and subscribed to the invalidations (the refusal cache is on only then).
    if (redisPort !== null) expect(await eventually(async () => { const i = await info(s.port); return i.backend_state === 'up' && i.backend_cache_enabled === '1'; })).toBe(true);
    await admin(s.port, (c) => c.call('DEBUG', 'CLOCK', 'SET', '1800000000000'));
  }
  const apps = [await app(services['app-1'], sidecars[0].port), await app(services['app-2'], sidecars[1].port)];
  // The middleware connects on first use: wait until each app answers with cellgate's fields.
  for (const base of apps) expect(await eventually(async () => (await hello(base, 'other')).headers.get('ratelimit') !== null)).toBe(true);
  const statuses: number[] = [];
  const remaining: (string | null)[] = [];
  for (let i = 0; i < 2 * LIMIT; i++) {
    const r = await hello(apps[i % 2], 'demo');
    statuses.push(r.status);
    remaining.push(r.headers.get('ratelimit'));
    await r.arrayBuffer();
  }
  return { statuses, remaining, sidecars };
}

describe('examples/replicas', () => {
  it('the compose file: two app replicas, each asking only its own sidecar on loopback, both sidecars on one Redis', () => {
    expect(Object.keys(services).sort()).toEqual(['app-1', 'app-2', 'cellgate-1', 'cellgate-2', 'redis']);
    expect(services.redis.image).toMatch(/^redis:/);
    const published = new Set<string>();
    for (const n of [1, 2]) {
      const cg = services[`cellgate-${n}`];
      const ap = services[`app-${n}`];
      // The sidecar: cellgate's image (the repository's Dockerfile), loopback only, on the shared Redis.
      expect(resolve(EXAMPLE, cg.build!.context)).toBe(resolve(ROOT));
      expect(existsSync(join(ROOT, cg.build!.dockerfile ?? 'Dockerfile'))).toBe(true);
      expect(flag(cg.command!, '--backend')).toBe('redis://redis:6379');
      expect(flag(cg.command!, '--bind')).toBe('127.0.0.1');
      expect(cg.depends_on?.redis?.condition).toBe('service_healthy');
      expect(cg.networks).toEqual(['limits']);
      // The app joins its sidecar's network namespace, starts once the sidecar is healthy, and asks it on loopback.
      expect(ap.network_mode).toBe(`service:cellgate-${n}`);
      expect(ap.depends_on?.[`cellgate-${n}`]?.condition).toBe('service_healthy');
      expect(ap.environment!.CELLGATE_URL).toBe(`redis://127.0.0.1:${flag(cg.command!, '--port')}`);
      expect(ap.command).toEqual(['node', 'examples/express/server.mjs']);
      const dockerfile = join(resolve(EXAMPLE, ap.build!.context), ap.build!.dockerfile!);
      expect(readFileSync(dockerfile, 'utf8')).toContain('COPY examples/express ./examples/express');
      expect(readFileSync(`${dockerfile}.dockerignore`, 'utf8')).toContain('!examples/express/');
      // The app's port is published (on loopback) by the namespace's owner, the sidecar.
      expect(cg.ports).toEqual([`127.0.0.1:300${n}:${ap.environment!.PORT}`]);
      published.add(cg.ports![0]);
    }
    expect(published.size).toBe(2);
    expect(services.redis.networks).toEqual(['limits']);
  });

  it(`shares the limit: ${2 * LIMIT} requests alternated over both apps get exactly ${LIMIT} 200s, counted down across the apps`, async () => {
    const redisPort = await startRedis();
    const { statuses, remaining, sidecars } = await replicas(redisPort);
    expect(statuses).toEqual([...Array<number>(LIMIT).fill(200), ...Array<number>(LIMIT).fill(429)]);
    // One budget: the remaining count goes 9, 8, ... 0 whichever app answered.
    expect(remaining.slice(0, LIMIT)).toEqual(Array.from({ length: LIMIT }, (_, i) => expect.stringMatching(new RegExp(`^"default";r=${LIMIT - 1 - i};t=\\d+$`))));
    // Both sidecars decided on the backend (each allowed half), none by the policy, and each answered
    // the refusals after its first from its refusal cache; the state is in Redis, under the default prefix.
    for (const s of sidecars) {
      const i = await info(s.port);
      expect(Number(i.backend_policy_decisions)).toBe(0);
      expect(Number(i.backend_calls)).toBeGreaterThanOrEqual(LIMIT / 2);
      expect(Number(i.backend_cache_hits)).toBeGreaterThanOrEqual(1);
    }
    // The backend prefix once, then the key's hash tag and the policy.
    const keys = await admin(redisPort, (c) => c.keys('cellgate:*'));
    expect(keys.length).toBeGreaterThanOrEqual(1);
    expect(keys.every((k) => /^cellgate:\{apikey:[0-9a-f]{32}\}:default$/.test(k))).toBe(true);
  });

  it(`without --backend the same two replicas let ${2 * LIMIT} through (each sidecar its own budget)`, async () => {
    const { statuses } = await replicas(null);
    expect(statuses.filter((s) => s === 200)).toHaveLength(2 * LIMIT);
  });
});
