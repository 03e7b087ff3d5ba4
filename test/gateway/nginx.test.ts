/**
 * The nginx gateway recipe (examples/nginx) with real processes: Debian's nginx with the Lua module,
 * the example's nginx.conf and cellgate.lua as shipped (only ports and policy variables changed),
 * and a real cellgate.
 *
 * - The limit_req burst: `rate=5r/s burst=5 nodelay` is `CL.THROTTLE <ip> 5 5 1`, 20 fast requests
 *   give 6 × 200 then 14 × 429 with Retry-After, the RateLimit fields and a problem+json body.
 *   cellgate's clock is frozen (DEBUG CLOCK SET), so "fast" holds on a loaded machine.
 * - Two nginx sharing one cellgate let 6 through in total; nginx's own limit_req lets each instance
 *   count alone, 12 in total. limit_req uses the real clock, which a test cannot freeze, so both
 *   sides use a rate where no token comes back during the test: `rate=1r/m burst=5` is
 *   `CL.THROTTLE <ip> 5 1 60` (a burst of 6, then one per minute): the same 6 per instance.
 * - cellgate down: `$cellgate_unavailable allow` lets requests through, `deny` answers 503.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { freePort, startServer, type RunningServer } from '../helpers/server.js';

const NGINX = '/usr/sbin/nginx';
const REQUIRED = [NGINX, '/usr/lib/nginx/modules/ndk_http_module.so', '/usr/lib/nginx/modules/ngx_http_lua_module.so', '/usr/share/lua/5.1/nginx/redis.lua'];
const missing = REQUIRED.filter((f) => !existsSync(f));
const EXAMPLE = fileURLToPath(new URL('../../examples/nginx/', import.meta.url));

interface Nginx {
  port: number;
  dir: string;
  stop(): Promise<void>;
}

const running: Nginx[] = [];

/** Sets `set $<name> <value>;` in the example's server block (exactly one such line must exist). */
function setVar(conf: string, name: string, value: string | number): string {
  const re = new RegExp(`set \\$${name} [^;]*;`, 'g');
  expect(conf.match(re), `set $${name} in the example`).toHaveLength(1);
  return conf.replace(re, `set $${name} ${value};`);
}

/** Runs nginx on a copy of an example config, its listen ports moved to free ones. */
async function startNginx(confName: string, vars: Record<string, string | number> = {}, edit: (conf: string) => string = (c) => c): Promise<Nginx> {
  const dir = mkdtempSync(join(tmpdir(), 'cellgate-nginx-'));
  // Run as root, nginx's worker switches to `nobody`, which must read cellgate.lua here.
  chmodSync(dir, 0o755);
  const port = await freePort();
  const appPort = await freePort();
  let conf = readFileSync(join(EXAMPLE, confName), 'utf8');
  expect(conf).toContain('listen 127.0.0.1:8080;');
  conf = conf.replace('listen 127.0.0.1:8080;', `listen 127.0.0.1:${port};`).replace(/127\.0\.0\.1:8081/g, `127.0.0.1:${appPort}`);
  for (const [name, value] of Object.entries(vars)) conf = setVar(conf, name, value);
  // The example's 50 ms timeout fails open when cellgate is slow; on a loaded test machine that would
  // turn a 429 into a 200, so the tests give cellgate time (the unreachable case fails at once anyway).
  if (confName === 'nginx.conf') conf = setVar(conf, 'cellgate_timeout_ms', 5000);
  conf = edit(conf);
  writeFileSync(join(dir, 'nginx.conf'), conf);
  copyFileSync(join(EXAMPLE, 'cellgate.lua'), join(dir, 'cellgate.lua'));
  const proc: ChildProcess = spawn(NGINX, ['-p', dir, '-c', 'nginx.conf', '-e', join(dir, 'error.log')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  proc.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<void>((resolve) => proc.on('exit', () => resolve()));
  let up = false;
  for (let i = 0; i < 200 && !up && proc.exitCode === null; i++) {
    // The stand-in application's port (same process, listening as soon as the limited one): a
    // probe through the limited port would spend the budget under test.
    up = await fetch(`http://127.0.0.1:${appPort}/`).then(() => true, () => false);
    if (!up) await new Promise((r) => setTimeout(r, 50));
  }
  const errorLog = () => (existsSync(join(dir, 'error.log')) ? readFileSync(join(dir, 'error.log'), 'utf8') : '');
  if (!up) {
    // SIGTERM, not SIGKILL: the master stops its worker, which SIGKILL would leave running.
    proc.kill('SIGTERM');
    await exited;
    const log = errorLog();
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`nginx did not start: ${output}\n${log.slice(0, 4000)}`);
  }
  const n: Nginx = {
    port,
    dir,
    async stop() {
      if (proc.exitCode === null) proc.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
  running.push(n);
  return n;
}

interface Answer {
  status: number;
  headers: Headers;
  body: string;
}

async function request(n: Nginx): Promise<Answer> {
  const res = await fetch(`http://127.0.0.1:${n.port}/api/hello`);
  return { status: res.status, headers: res.headers, body: await res.text() };
}

function statuses(answers: Answer[]): Record<number, number> {
  const out: Record<number, number> = {};
  for (const a of answers) out[a.status] = (out[a.status] ?? 0) + 1;
  return out;
}

describe.skipIf(missing.length > 0)(`nginx gateway (examples/nginx)${missing.length > 0 ? ` — skipped: ${missing.join(', ')} not installed (scripts/install-test-deps.sh installs nginx, libnginx-mod-http-lua, lua-nginx-redis)` : ''}`, () => {
  let cellgate: RunningServer;
  let redis: Redis;
  let metricsPort: number;

  beforeAll(async () => {
    metricsPort = await freePort();
    cellgate = await startServer({ args: ['--metrics-port', String(metricsPort)] });
    redis = new Redis({ port: cellgate.port, host: '127.0.0.1', protocol: 2 });
  });
  afterAll(async () => {
    for (const n of running.splice(0)) await n.stop();
    redis?.disconnect();
    await cellgate?.stop();
  });

  async function freeze(): Promise<void> {
    await redis.flushall();
    await redis.call('DEBUG', 'CLOCK', 'SET', String(Date.now()));
    await redis.config('RESETSTAT');
  }

  it('limit_req rate=5r/s burst=5 nodelay as CL.THROTTLE ip 5 5 1: 20 fast requests give 6 × 200 then 14 × 429, over one pooled connection', async () => {
    await freeze();
    const n = await startNginx('nginx.conf', { cellgate_port: cellgate.port });
    const answers: Answer[] = [];
    for (let i = 0; i < 20; i++) answers.push(await request(n));
    expect(answers.map((a) => a.status)).toEqual([...Array(6).fill(200), ...Array(14).fill(429)]);

    // Let through: the application's answer, with the RateLimit fields counting down.
    answers.slice(0, 6).forEach((a, i) => {
      expect(a.body).toBe('hello\n');
      expect(a.headers.get('ratelimit-policy')).toBe('"default";q=6;w=1');
      expect(a.headers.get('ratelimit')).toMatch(new RegExp(`^"default";r=${5 - i};t=[12]$`));
      expect(a.headers.get('retry-after')).toBeNull();
    });
    // Refused: 429, Retry-After in whole seconds (≥ 1), the fields, and a problem+json body.
    for (const a of answers.slice(6)) {
      expect(a.headers.get('content-type')).toBe('application/problem+json');
      expect(a.headers.get('retry-after')).toBe('1');
      expect(a.headers.get('ratelimit-policy')).toBe('"default";q=6;w=1');
      expect(a.headers.get('ratelimit')).toMatch(/^"default";r=0;t=[12]$/);
      expect(JSON.parse(a.body)).toEqual({
        type: 'about:blank',
        status: 429,
        title: 'Too Many Requests',
        detail: 'limit is 5 requests per 1 second (bursts of up to 6) for this client; retry in 1 second',
      });
    }
    // cellgate decided each request; nginx kept one connection for all 20 (the keepalive pool).
    const stats = await redis.info('stats');
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(metrics).toContain('cellgate_limiter_decisions_total{command="cl.throttle",result="allowed"} 6\n');
    expect(metrics).toContain('cellgate_limiter_decisions_total{command="cl.throttle",result="limited"} 14\n');
    expect(Number(/total_connections_received:(\d+)/.exec(stats)![1])).toBe(1);

    // A token comes back after 200 ms of cellgate time.
    await redis.call('DEBUG', 'CLOCK', 'ADVANCE', '200');
    expect((await request(n)).status).toBe(200);
    expect((await request(n)).status).toBe(429);
    await n.stop();
  });

  it('two nginx sharing one cellgate let 6 through in total; nginx limit_req in each lets 12', async () => {
    await freeze();
    // rate=1r/m burst=5 ≡ CL.THROTTLE ip 5 1 60: a burst of 6, no token back within the test.
    const shared = [
      await startNginx('nginx.conf', { cellgate_port: cellgate.port, cellgate_count: 1, cellgate_period: 60 }),
      await startNginx('nginx.conf', { cellgate_port: cellgate.port, cellgate_count: 1, cellgate_period: 60 }),
    ];
    const alone = [
      await startNginx('nginx-limit-req.conf', {}, (c) => c.replace('rate=5r/s', 'rate=1r/m')),
      await startNginx('nginx-limit-req.conf', {}, (c) => c.replace('rate=5r/s', 'rate=1r/m')),
    ];
    const viaCellgate: Answer[] = [];
    const viaLimitReq: Answer[] = [];
    for (let i = 0; i < 20; i++) {
      viaCellgate.push(await request(shared[i % 2]));
      viaLimitReq.push(await request(alone[i % 2]));
    }
    expect(statuses(viaCellgate)).toEqual({ 200: 6, 429: 14 });
    expect(statuses(viaLimitReq)).toEqual({ 200: 12, 429: 8 });
    // Each instance alone: 6 of its 10 (limit_req) against 3 of its 10 (one shared budget).
    expect(viaLimitReq.filter((a, i) => i % 2 === 0 && a.status === 200)).toHaveLength(6);
    expect(viaCellgate.filter((a, i) => i % 2 === 0 && a.status === 200)).toHaveLength(3);
    expect(viaCellgate[6].headers.get('ratelimit-policy')).toBe('"default";q=6;w=60');
    expect(viaCellgate[6].headers.get('retry-after')).toBe('60');
    for (const n of [...shared, ...alone]) await n.stop();
  });

  it('a request that costs more than the whole burst: 429 without Retry-After, a detail that says it can never pass', async () => {
    await freeze();
    const n = await startNginx('nginx.conf', { cellgate_port: cellgate.port, cellgate_quantity: 7 });
    const a = await request(n);
    expect(a.status).toBe(429);
    expect(a.headers.get('retry-after')).toBeNull();
    expect(JSON.parse(a.body).detail).toBe('limit is 5 requests per 1 second (bursts of up to 6) for this client; this request costs 7, more than can ever be allowed at once');
    await n.stop();
  });

  it('cellgate unreachable: $cellgate_unavailable allow lets requests through, deny answers 503 problem+json', async () => {
    const closed = await freePort();
    const open = await startNginx('nginx.conf', { cellgate_port: closed, cellgate_unavailable: 'allow' });
    const shut = await startNginx('nginx.conf', { cellgate_port: closed, cellgate_unavailable: 'deny' });
    const allowed = await request(open);
    expect(allowed.status).toBe(200);
    expect(allowed.body).toBe('hello\n');
    expect(allowed.headers.get('ratelimit')).toBeNull();
    const denied = await request(shut);
    expect(denied.status).toBe(503);
    expect(denied.headers.get('content-type')).toBe('application/problem+json');
    expect(denied.headers.get('retry-after')).toBe('1');
    expect(JSON.parse(denied.body).title).toBe('Service Unavailable');
    expect(readFileSync(join(open.dir, 'error.log'), 'utf8')).toContain('cellgate unavailable (connect: connection refused): letting the request through');
    await open.stop();
    await shut.stop();
  });

  it('cellgate stopped and started again: requests pass unlimited while it is down (allow), limited again once it is back', async () => {
    const port = await freePort();
    const vars = { cellgate_port: port, cellgate_unavailable: 'allow', cellgate_count: 1, cellgate_period: 60 };
    let first: RunningServer | null = await startServer({ args: ['--port', String(port)] });
    let second: RunningServer | null = null;
    const n = await startNginx('nginx.conf', vars);
    try {
      const limited = await request(n);
      expect([limited.status, limited.headers.get('ratelimit')]).toEqual([200, '"default";r=5;t=60']);
      await first.stop();
      first = null;
      const down: Answer[] = [];
      for (let i = 0; i < 10; i++) down.push(await request(n));
      // Fail open: every request through, none with RateLimit fields (nothing was decided).
      expect(statuses(down)).toEqual({ 200: 10 });
      expect(down.every((a) => a.headers.get('ratelimit') === null)).toBe(true);
      second = await startServer({ args: ['--port', String(port)] });
      const back: Answer[] = [];
      for (let i = 0; i < 8; i++) back.push(await request(n));
      // A fresh cellgate (no snapshot shared with the first): a fresh burst of 6, then 429s.
      expect(back.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200, 429, 429]);
      expect(back[0].headers.get('ratelimit')).toBe('"default";r=5;t=60');
    } finally {
      await n.stop();
      await first?.stop();
      await second?.stop();
    }
  });
});
