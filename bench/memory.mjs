#!/usr/bin/env node
/**
 * Memory per key and GC pauses at scale: starts cellgate (dist/main.js, with --trace-gc), fills it
 * with N CL.THROTTLE keys over one pipelined socket, reads INFO memory before and after, then keeps
 * updating random keys for a while and reports the GC pauses V8 logged meanwhile (p50/p99/max).
 *
 *   node bench/memory.mjs            # 1,000,000 keys, 10 s of updates
 *   KEYS=200000 SECONDS=5 node bench/memory.mjs
 */
import { spawn, spawnSync } from 'node:child_process';
import net from 'node:net';
import os from 'node:os';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NODE_ENV, NODE_FLAGS } from './node-flags.mjs';

const KEYS = Number(process.env.KEYS ?? 1_000_000);
const SECONDS = Number(process.env.SECONDS ?? 10);
const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));

console.log(`$ ${process.argv.map((a) => a.split('/').slice(-2).join('/')).join(' ')}  (KEYS=${KEYS} SECONDS=${SECONDS})`);
console.log(`machine: ${os.cpus()[0]?.model ?? '?'} x${os.cpus().length}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);

// With 2+ CPUs, the server on CPU 0 and this client on CPU 1 (BENCH_PIN=0: not): unpinned, the client
// is sometimes scheduled on the server's CPU in the middle of a scavenge, which then "lasts" 3–8 ms.
const PIN = process.env.BENCH_PIN !== '0' && os.cpus().length >= 2 && spawnSync('taskset', ['-V']).status === 0;
if (PIN) spawnSync('taskset', ['-cp', '1', String(process.pid)]);
console.log(`pinning: ${PIN ? 'server on CPU 0, this client on CPU 1 (taskset)' : 'none'}`);

const dir = mkdtempSync(join(os.tmpdir(), 'cellgate-mem-'));
const serverArgs = [...NODE_FLAGS, '--trace-gc', MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--log-format', 'json', '--enable-debug-command', 'yes'];
const server = PIN
  ? spawn('taskset', ['-c', '0', process.execPath, ...serverArgs], { env: { ...process.env, ...NODE_ENV }, stdio: ['ignore', 'pipe', 'inherit'] })
  : spawn(process.execPath, serverArgs, { env: { ...process.env, ...NODE_ENV }, stdio: ['ignore', 'pipe', 'inherit'] });
const pauses = [];
let recording = false;
let port = 0;
const ready = new Promise((resolve) => {
  let buf = '';
  server.stdout.on('data', (d) => {
    buf += d.toString();
    let nl;
    while ((nl = buf.indexOf('\n')) !== -1) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      // e.g. "[123:0x5f]   2047 ms: Scavenge 61.3 (75.2) -> 60.9 (76.2) MB, 1.25 / 0.00 ms  (average mu = ..."
      const gc = /(Scavenge|Mark-Compact|Mark-sweep|Minor Mark-Compact)\b.*?MB, ([\d.]+) \/ [\d.]+ ms/.exec(line);
      if (gc && recording) pauses.push({ kind: gc[1], ms: Number(gc[2]), line: line.trim() });
      if (line.includes('ready to accept connections')) {
        port = JSON.parse(line).port;
        resolve();
      }
    }
  });
});

function cmd(...args) {
  return `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('');
}

/** Sends `count` commands made by `make(i)` in batches, waiting for every reply. */
async function pipeline(sock, count, make) {
  let pending = 0;
  let resolveDrained;
  const counter = (d) => {
    // Every reply here is a 5-integer array: count array headers.
    for (let i = 0; i < d.length; i++) if (d[i] === 42) pending--;
    if (pending === 0 && resolveDrained) resolveDrained();
  };
  sock.on('data', counter);
  for (let i = 0; i < count; i += 1000) {
    let batch = '';
    const n = Math.min(1000, count - i);
    for (let j = 0; j < n; j++) batch += make(i + j);
    pending += n;
    if (!sock.write(batch)) await new Promise((r) => sock.once('drain', r));
    if (pending > 20000) await new Promise((r) => { resolveDrained = r; });
    resolveDrained = undefined;
  }
  if (pending > 0) await new Promise((r) => { resolveDrained = r; });
  sock.off('data', counter);
}

async function info(section) {
  const sock = net.connect(port, '127.0.0.1');
  const text = await new Promise((resolve) => {
    let got = '';
    sock.on('data', (d) => {
      got += d.toString();
      if (/\r\n\r\n$/.test(got) || got.endsWith('\r\n') && got.length > 20 && got.split('\r\n').length > 4) resolve(got);
    });
    sock.write(cmd('INFO', section));
  });
  sock.destroy();
  return Object.fromEntries(text.split('\r\n').filter((l) => l.includes(':')).map((l) => l.split(':')));
}

/** DEBUG GC: a full collection in the server, so used_memory counts live data only. */
async function debugGc() {
  const sock = net.connect(port, '127.0.0.1');
  await new Promise((resolve) => {
    sock.on('data', resolve);
    sock.write(cmd('DEBUG', 'GC'));
  });
  sock.destroy();
}

try {
  await ready;
  await debugGc();
  const before = await info('memory');
  const sock = net.connect(port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  const t0 = Date.now();
  await pipeline(sock, KEYS, (i) => cmd('CL.THROTTLE', `user:${i}`, 100, 10, 3600, 1));
  const fillMs = Date.now() - t0;
  await debugGc();
  const after = await info('memory');
  const dUsed = Number(after.used_memory) - Number(before.used_memory);
  const dRss = Number(after.used_memory_rss) - Number(before.used_memory_rss);
  console.log(`filled ${KEYS} keys in ${fillMs} ms`);
  console.log(`used_memory: +${(dUsed / KEYS).toFixed(1)} bytes/key (${before.used_memory} -> ${after.used_memory})`);
  console.log(`rss:         +${(dRss / KEYS).toFixed(1)} bytes/key (${before.used_memory_rss} -> ${after.used_memory_rss})`);

  recording = true;
  const until = Date.now() + SECONDS * 1000;
  let updates = 0;
  while (Date.now() < until) {
    await pipeline(sock, 50_000, () => cmd('CL.THROTTLE', `user:${Math.floor(Math.random() * KEYS)}`, 100, 10, 3600, 1));
    updates += 50_000;
  }
  recording = false;
  sock.destroy();
  const ms = pauses.map((p) => p.ms).sort((a, b) => a - b);
  const q = (f) => (ms.length ? ms[Math.min(ms.length - 1, Math.floor(f * ms.length))] : 0);
  console.log(`updates: ${updates} random-key CL.THROTTLE over ${SECONDS} s`);
  const slowest = [...pauses].sort((a, b) => b.ms - a.ms).slice(0, 3);
  for (const p of slowest) console.log(`  slow: ${p.line}`);
  console.log(`GC pauses while updating: ${ms.length} (${pauses.filter((p) => p.kind === 'Scavenge').length} scavenges), p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${ms.at(-1) ?? 0} ms`);
} finally {
  server.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}
