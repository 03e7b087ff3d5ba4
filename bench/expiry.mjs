#!/usr/bin/env node
/**
 * A million keys expiring in the same second: fills cellgate (dist/main.js) with N CL.THROTTLE keys
 * whose state is fresh again after ~1 s, then measures a steady client's round trips (one PING at a
 * time) while the active expiry cycle reclaims them, against the same client before the fill.
 *
 *   node bench/expiry.mjs                  # 1,000,000 keys
 *   KEYS=200000 node bench/expiry.mjs
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import os from 'node:os';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NODE_ENV, NODE_FLAGS } from './node-flags.mjs';
import { fillThrottleKeys } from './fill.mjs';

const KEYS = Number(process.env.KEYS ?? 1_000_000);
const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));

console.log(`$ node bench/expiry.mjs  (KEYS=${KEYS})`);
console.log(`machine: ${os.cpus()[0]?.model ?? '?'} x${os.cpus().length}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB, node ${process.version}, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);

const dir = mkdtempSync(join(os.tmpdir(), 'cellgate-expiry-'));
const server = spawn(process.execPath, [...NODE_FLAGS, MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--log-format', 'json'], { env: { ...process.env, ...NODE_ENV }, stdio: ['ignore', 'pipe', 'inherit'] });
const port = await new Promise((resolve) => {
  let buf = '';
  server.stdout.on('data', (d) => {
    buf += d.toString();
    for (const line of buf.split('\n')) if (line.includes('ready to accept connections')) resolve(JSON.parse(line).port);
  });
});

const cmd = (...args) => `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('');

/** Round trips of one PING at a time for `ms`, in µs; also returns how DBSIZE moved meanwhile. */
async function probe(ms) {
  const sock = net.connect(port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  const samples = [];
  const until = performance.now() + ms;
  while (performance.now() < until) {
    const t0 = performance.now();
    await new Promise((resolve) => {
      sock.once('data', resolve);
      sock.write('*1\r\n$4\r\nPING\r\n');
    });
    samples.push((performance.now() - t0) * 1000);
  }
  sock.destroy();
  samples.sort((a, b) => a - b);
  const q = (f) => samples[Math.min(samples.length - 1, Math.floor(f * samples.length))].toFixed(0);
  return { n: samples.length, p50: q(0.5), p99: q(0.99), p999: q(0.999), max: samples.at(-1).toFixed(0) };
}

async function dbsize() {
  const sock = net.connect(port, '127.0.0.1');
  const n = await new Promise((resolve) => {
    sock.on('data', (d) => resolve(Number(/:(\d+)/.exec(d.toString())[1])));
    sock.write(cmd('DBSIZE'));
  });
  sock.destroy();
  return n;
}

try {
  const idle = await probe(3000);
  // Fill: CL.THROTTLE exp:<i> 0 1 1 → fresh again (and expired) 1 s after the call.
  const t0 = Date.now();
  await fillThrottleKeys(port, KEYS, { prefix: 'exp:', burst: 0, count: 1, period: 1 });
  const fillMs = Date.now() - t0;
  const before = await dbsize();
  const during = await probe(Math.max(3000, fillMs + 2000));
  const after = await dbsize();
  console.log(`filled ${KEYS} keys in ${fillMs} ms (each expires ~1 s after its call); DBSIZE ${before} before the probe, ${after} after`);
  console.log('| phase | PINGs | p50 µs | p99 µs | p99.9 µs | max µs |');
  console.log('|---|---:|---:|---:|---:|---:|');
  console.log(`| idle | ${idle.n} | ${idle.p50} | ${idle.p99} | ${idle.p999} | ${idle.max} |`);
  console.log(`| while ${before - after} keys expire | ${during.n} | ${during.p50} | ${during.p99} | ${during.p999} | ${during.max} |`);
} finally {
  server.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}
