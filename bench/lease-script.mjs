#!/usr/bin/env node
/**
 * Where Redis's CPU goes in a batch of concurrency lease calls: the limiter script alone (no sidecar),
 * sent as a sidecar's batches are (batchScriptHeader, each call's element then its key in ARGV, TIME
 * read once): every batch RELEASEs the leases the previous one ACQUIREd on random keys out of 10,000
 * (limit 8, lease 60 s) and ACQUIREs as many new ones. PAIRS pairs per batch, 4 batches in flight; the
 * figure is redis-server's CPU (all threads, /proc/<pid>/task/∗/schedstat) per pair, rounds of each
 * script interleaved, median and every round printed.
 *
 *   npm run build && node bench/lease-script.mjs dist [edited.lua ...]
 *
 * Arguments: scripts to compare: `dist` is this build's LIMITER_SCRIPT, a path an edited copy of it (write
 * one with `node -e "import('./dist/backend/limiter-script.js').then(m => require('fs').writeFileSync('x.lua', m.LIMITER_SCRIPT))"`),
 * e.g. one whose lease() returns at once, or a `return ''` script (the cost of carrying the ARGV alone).
 * Environment: PAIRS [12] (the concurrency bench's batches carry some 24 calls), ROUNDS [5].
 * redis-server runs on CPU 0 (taskset): run this on CPU 1 (`taskset -c 1 node ...`), under flock /work/bench.lock.
 */
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { Redis } from 'ioredis';
import { freePort, ROOT } from './harness.mjs';

const PAIRS = Number(process.env.PAIRS ?? 12);
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const scripts = process.argv.slice(2);
if (scripts.length === 0) scripts.push('dist');
const cpu = (pid) => {
  let ns = 0;
  for (const t of readdirSync(`/proc/${pid}/task`)) ns += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
  return ns / 1e9;
};
const port = await freePort();
const child = spawn('taskset', ['-c', '0', 'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'], { stdio: 'ignore' });
process.on('exit', () => child.kill());
// Connected once it answers (it starts in some ms; a busy machine takes longer).
let r;
for (let attempt = 0; ; attempt++) {
  await new Promise((done) => setTimeout(done, 100));
  r = new Redis({ port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  r.on('error', () => {});
  try {
    await r.connect();
    break;
  } catch (e) {
    r.disconnect();
    if (attempt >= 50) throw e;
  }
}
const { LIMITER_SCRIPT } = await import(`${ROOT}/dist/backend/limiter-script.js`);
const shas = [];
for (const s of scripts) shas.push(await r.script('LOAD', s === 'dist' ? LIMITER_SCRIPT : readFileSync(s, 'utf8')));

let ids = 0;
/** A lease call's element (backend-leases.ts): flags 16, no clock, op, limit 8, lease 60000 ms, id. */
const element = (op, id) => {
  const b = Buffer.allocUnsafe(26 + id.length);
  b[0] = 16;
  b.writeDoubleLE(0, 1);
  b[9] = op;
  b.writeDoubleLE(8, 10);
  b.writeDoubleLE(60_000, 18);
  b.write(id, 26, 'latin1');
  return b;
};
const header = Buffer.alloc(9);
header[0] = 8;

async function chain(sha, until) {
  let held = [];
  let pairs = 0;
  while (Date.now() < until) {
    const args = [header];
    for (const [key, id] of held) args.push(element(0x52, id), key);
    const taken = [];
    for (let i = 0; i < PAIRS; i++) {
      const key = Buffer.from(`cg:sem:${Math.floor(Math.random() * 10_000)}`);
      const id = (ids++).toString(16).padStart(16, '0');
      taken.push([key, id]);
      args.push(element(0x41, id), key);
    }
    await r.callBuffer('EVALSHA', sha, '0', ...args);
    pairs += held.length;
    held = taken;
  }
  return pairs;
}

const perPair = shas.map(() => []);
for (let round = 0; round < ROUNDS; round++) {
  for (let i = 0; i < shas.length; i++) {
    await r.flushall();
    await Promise.all(Array.from({ length: 4 }, () => chain(shas[i], Date.now() + 300)));
    const c0 = cpu(child.pid);
    const n = (await Promise.all(Array.from({ length: 4 }, () => chain(shas[i], Date.now() + 1500)))).reduce((a, b) => a + b, 0);
    perPair[i].push(((cpu(child.pid) - c0) * 1e6) / n);
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
scripts.forEach((s, i) => console.log(`${s.padEnd(30)} ${median(perPair[i]).toFixed(2)} µs/pair (rounds: ${perPair[i].map((x) => x.toFixed(2)).join(' ')})`));
r.disconnect();
child.kill();
