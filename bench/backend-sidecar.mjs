#!/usr/bin/env node
/**
 * The sidecar's side of one backend call: client CPU (process.cpuUsage) per CL.THROTTLE EVALSHA
 * through ioredis, building the ARGV with limiterScriptArgv and decoding the reply with
 * parseLimiterReply, for this build (dist) and another one, alternating 5 rounds of 20,000 calls
 * (256 in flight on one connection) against a redis-server started here (random loopback port,
 * temp dir, no persistence).
 *
 *   node bench/backend-sidecar.mjs <dist dir of the other build>
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';

if (!process.argv[2]) throw new Error('usage: node bench/backend-sidecar.mjs <dist dir of the other build>');
const url = (d) => pathToFileURL(resolve(d)).href;
const oldM = await import(`${url(process.argv[2])}/backend/limiter-script.js`);
const newM = await import(`${url('dist')}/backend/limiter-script.js`);
const { cellParams } = await import(`${url('dist')}/limiters/cell-throttle.js`);
const dir = mkdtempSync(join(tmpdir(), 'cellgate-bench-redis-'));
const port = 20000 + Math.floor(Math.random() * 40000);
const proc = spawn('/usr/bin/redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
await new Promise((r) => setTimeout(r, 500));
const c = new Redis({ port, host: '127.0.0.1', enableAutoPipelining: false });
const limits = [{ kind: 'cl.throttle', params: cellParams(100, 1000, 60), quantity: 1 }];
const variants = {
  other: { sha: await c.script('LOAD', oldM.LIMITER_SCRIPT), argv: () => oldM.limiterScriptArgv(limits, false, null), parse: (r) => oldM.parseLimiterReply(r, limits) },
  this: { sha: await c.script('LOAD', newM.LIMITER_SCRIPT), argv: () => newM.limiterScriptArgv(limits, false, null), parse: (r) => newM.parseLimiterReply(r, limits) },
};
const res = { other: [], this: [] };
for (let round = 0; round < 5; round++) for (const [name, v] of Object.entries(variants)) {
  const N = 20000;
  const t0 = process.cpuUsage();
  const ps = [];
  for (let i = 0; i < N; i++) {
    const key = Buffer.from(`cellgate:k${Math.floor(Math.random() * 100000)}`);
    ps.push(c.evalsha(v.sha, 1, key, ...v.argv()).then(v.parse));
    if (ps.length === 256) { await Promise.all(ps); ps.length = 0; }
  }
  await Promise.all(ps);
  const u = process.cpuUsage(t0);
  res[name].push((u.user + u.system) / N);
}
for (const [k, xs] of Object.entries(res)) console.log(k, 'sidecar CPU µs/call (median of 5):', [...xs].sort((a, b) => a - b)[2].toFixed(2), xs.map((x) => x.toFixed(2)).join(' '));
c.disconnect();
proc.kill('SIGKILL');
rmSync(dir, { recursive: true, force: true });
