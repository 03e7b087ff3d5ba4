#!/usr/bin/env node
/**
 * PING latency while maxmemory evicts: starts cellgate (dist/main.js), fills it with N limiter keys,
 * then lowers maxmemory so that about half of them fit (INFO used_memory_counted_for_evict minus
 * N/2 records of 64 bytes) while one connection sends PING after PING, one at a time. Prints the keys
 * kept, how long eviction took, the largest eviction step (INFO eviction_step_max_keys) and the
 * PING latency p50/p99/max during it. The test suite counts; this is where the timing lives.
 *
 *   node bench/eviction.mjs            # 1,000,000 keys
 *   KEYS=300000 node bench/eviction.mjs
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import os from 'node:os';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NODE_ENV, NODE_FLAGS } from './node-flags.mjs';

const KEYS = Number(process.env.KEYS ?? 1_000_000);
const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));
console.log(`$ node bench/eviction.mjs  (KEYS=${KEYS})`);
console.log(`machine: ${os.cpus()[0]?.model ?? '?'} x${os.cpus().length}, node ${process.version}, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);

const dir = mkdtempSync(join(os.tmpdir(), 'cellgate-evict-'));
const server = spawn(process.execPath, [...NODE_FLAGS, MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--log-format', 'json', '--enable-debug-command', 'yes'],
  { env: { ...process.env, ...NODE_ENV }, stdio: ['ignore', 'pipe', 'inherit'] });
const port = await new Promise((resolve) => {
  let buf = '';
  server.stdout.on('data', (d) => {
    buf += d.toString();
    for (let nl; (nl = buf.indexOf('\n')) !== -1; buf = buf.slice(nl + 1)) {
      const line = buf.slice(0, nl);
      if (line.includes('ready to accept connections')) resolve(JSON.parse(line).port);
    }
  });
});

const cmd = (...args) => `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('');

/** One connection, one command at a time: resolves with the reply text. */
function connection() {
  const sock = net.connect(port, '127.0.0.1');
  sock.setNoDelay(true);
  let got = '';
  let want = null;
  sock.on('data', (d) => {
    got += d.toString('latin1');
    if (want && want.done(got)) {
      const w = want;
      want = null;
      const text = got;
      got = '';
      w.resolve(text);
    }
  });
  const complete = (t) => {
    if (t[0] === '$') {
      const n = Number(t.slice(1, t.indexOf('\r\n')));
      return t.length >= t.indexOf('\r\n') + 2 + n + 2;
    }
    return t.endsWith('\r\n');
  };
  return {
    call: (...args) => new Promise((resolve) => { want = { resolve, done: complete }; sock.write(cmd(...args)); }),
    pipeline: (payload, replies) => new Promise((resolve) => {
      want = { resolve, done: (t) => t.split('\r\n').filter((l) => l[0] === '*').length >= replies };
      sock.write(payload);
    }),
    close: () => sock.destroy(),
  };
}

const field = (text, name) => Number(new RegExp(`^${name}:(.*)\r$`, 'm').exec(text)?.[1]);

try {
  const c = connection();
  await c.call('DEBUG', 'CLOCK', 'SET', '1800000000000'); // nothing expires meanwhile
  const filler = connection();
  for (let i = 0; i < KEYS; i += 10_000) {
    let batch = '';
    const n = Math.min(10_000, KEYS - i);
    for (let j = 0; j < n; j++) batch += cmd('RL.TOKENBUCKET', `k:${i + j}`, 10, 3600000);
    await filler.pipeline(batch, n);
  }
  filler.close();
  const counted = field(await c.call('INFO', 'memory'), 'used_memory_counted_for_evict');
  const target = counted - Math.floor(KEYS / 2) * 64;

  const pinger = connection();
  const times = [];
  let pinging = true;
  const pings = (async () => {
    while (pinging) {
      const t = process.hrtime.bigint();
      await pinger.call('PING');
      times.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
  })();
  await new Promise((r) => setTimeout(r, 100));
  const t0 = Date.now();
  await c.call('CONFIG', 'SET', 'maxmemory', String(target));
  let kept = KEYS;
  while (kept > KEYS - Math.floor(KEYS / 2)) {
    kept = Number((await c.call('DBSIZE')).slice(1));
    if (Date.now() - t0 > 60_000) break;
  }
  const evictMs = Date.now() - t0;
  pinging = false;
  await pings;
  pinger.close();
  const memory = await c.call('INFO', 'memory');
  const stats = await c.call('INFO', 'stats');
  const sorted = [...times].sort((a, b) => a - b);
  const q = (f) => sorted[Math.min(sorted.length - 1, Math.floor(f * sorted.length))] ?? 0;
  console.log(`maxmemory ${target} (counted ${counted} minus ${Math.floor(KEYS / 2)} × 64): kept ${kept} of ${KEYS} keys, evicted_keys ${field(stats, 'evicted_keys')}, in ${evictMs} ms`);
  console.log(`eviction_step_max_keys ${field(memory, 'eviction_step_max_keys')}, used_memory_counted_for_evict ${field(memory, 'used_memory_counted_for_evict')}`);
  console.log(`PING while evicting: ${sorted.length} pings, p50 ${q(0.5).toFixed(2)} ms, p99 ${q(0.99).toFixed(2)} ms, max ${(sorted.at(-1) ?? 0).toFixed(2)} ms`);
  const r = await c.call('RL.TOKENBUCKET', 'after', 10, 3600000);
  console.log(`a limiter call after eviction: ${r.startsWith('-') ? r.trim() : 'allowed (not -OOM)'}`);
  c.close();
} finally {
  server.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}
