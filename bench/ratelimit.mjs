#!/usr/bin/env node
/**
 * npm run build && node bench/ratelimit.mjs
 *
 * The RL.* family next to CL.THROTTLE, against dist/main.js:
 *  1. Throughput: ops/s of each command with redis-benchmark (50 clients, random keys out of
 *     BENCH_KEYS, pipeline 16), one warm-up run per command sizing -n for ≈ BENCH_SECONDS, then
 *     BENCH_ROUNDS measured rounds interleaved across commands; medians reported.
 *  2. Memory: bytes per key at BENCH_MEM_KEYS (1M) keys per algorithm: a fresh server, DEBUG GC,
 *     INFO memory used_memory (V8 heap + array buffers) before and after filling the keys with a raw
 *     pipelined socket client, DEBUG GC again; (after − before) / keys. The sliding log is filled
 *     with one request per key and with a full log (limit requests at distinct milliseconds, under
 *     DEBUG CLOCK) at limit 10 and 100; the full log at limit 100 uses BENCH_LOG100_KEYS keys.
 * Prints the results as a Markdown section; BENCH_APPEND=1 appends it to bench/RESULTS.md.
 *
 * Environment (defaults in brackets): BENCH_ROUNDS [3], BENCH_SECONDS [3], BENCH_KEYS [100000],
 * BENCH_MEM_KEYS [1000000], BENCH_LOG100_KEYS [100000: 100 M requests would take too long], BENCH_PIN [auto: server on CPU 0,
 * redis-benchmark on CPU 1, with taskset], BENCH_APPEND [0], BENCH_ONLY [throughput,memory],
 * BENCH_MEM_FILTER [''] (only the memory rows whose label contains it).
 */
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NODE_ENV, NODE_FLAGS } from './node-flags.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const MAIN = join(ROOT, 'dist', 'main.js');
const env = process.env;
const ROUNDS = Number(env.BENCH_ROUNDS ?? 3);
const SECONDS = Number(env.BENCH_SECONDS ?? 3);
const KEYS = Number(env.BENCH_KEYS ?? 100_000);
const MEM_KEYS = Number(env.BENCH_MEM_KEYS ?? 1_000_000);
const LOG100_KEYS = Number(env.BENCH_LOG100_KEYS ?? 100_000);
const ONLY = (env.BENCH_ONLY ?? 'throughput,memory').split(',');
const CPUS = os.availableParallelism?.() ?? os.cpus().length;
const PIN = (env.BENCH_PIN ?? 'auto') !== '0' && CPUS >= 2 && spawnSync('taskset', ['-V']).status === 0;
const T0 = 1_800_000_000_000;

const children = new Set();
const tempDirs = [];
function cleanup() {
  for (const c of children) c.kill('SIGKILL');
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true });
}
process.on('exit', cleanup);
process.on('SIGINT', () => process.exit(130));

function pinned(cpu, cmd, args) {
  return PIN ? ['taskset', ['-c', String(cpu), cmd, ...args]] : [cmd, args];
}

// ---------------------------------------------------------------------------------------------------
// A raw RESP client: pipelined commands, replies counted (each RL/CL reply is one array: one '*').

function encode(args) {
  let out = `*${args.length}\r\n`;
  for (const a of args) out += `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`;
  return out;
}

class RawClient {
  constructor(port) {
    this.port = port;
    this.buf = '';
    this.waiters = [];
  }
  connect() {
    return new Promise((resolve, reject) => {
      this.socket = net.connect(this.port, '127.0.0.1', resolve);
      this.socket.once('error', reject);
      this.socket.on('data', (d) => {
        this.buf += d.toString('latin1');
        this.waiters.shift()?.();
      });
    });
  }
  /** One command, whole reply text (simple: waits until the buffer holds a complete reply). */
  async call(...args) {
    this.buf = '';
    this.socket.write(encode(args));
    for (;;) {
      const done = complete(this.buf);
      if (done) return this.buf;
      await new Promise((r) => this.waiters.push(r));
    }
  }
  /** Sends `count` commands made by `make(i)` in pipelined batches, waiting for every array reply. */
  async pipeline(count, make, batch = 2000) {
    for (let start = 0; start < count; start += batch) {
      const end = Math.min(count, start + batch);
      let text = '';
      for (let i = start; i < end; i++) text += encode(make(i));
      this.buf = '';
      let seen = 0;
      this.socket.write(text);
      while (seen < end - start) {
        await new Promise((r) => this.waiters.push(r));
        if (this.buf.includes('-')) {
          const at = this.buf.indexOf('\r\n-');
          if (at !== -1 || this.buf.startsWith('-')) throw new Error(`error reply: ${this.buf.slice(Math.max(0, at), at + 120)}`);
        }
        seen = 0;
        for (let k = this.buf.indexOf('*'); k !== -1; k = this.buf.indexOf('*', k + 1)) seen++;
      }
    }
  }
  close() {
    this.socket.destroy();
  }
}

/** Whether `s` holds one complete RESP reply (bulk/simple/integer/error; enough for INFO, OK). */
function complete(s) {
  if (s.length < 3 || !s.endsWith('\r\n')) return false;
  if (s[0] === '$' || s[0] === '=') {
    const nl = s.indexOf('\r\n');
    return s.length >= nl + 2 + Number(s.slice(1, nl)) + 2;
  }
  return s[0] !== '*';
}

async function usedMemory(client) {
  await client.call('DEBUG', 'GC');
  const info = await client.call('INFO', 'memory');
  return Number(/used_memory:(\d+)/.exec(info)[1]);
}

// ---------------------------------------------------------------------------------------------------

async function startCellgate() {
  const dir = mkdtempSync(join(os.tmpdir(), 'cellgate-rlbench-'));
  tempDirs.push(dir);
  const [cmd, args] = pinned(0, process.execPath, [
    ...NODE_FLAGS, '--max-old-space-size=8192', MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--save', '',
    '--log-format', 'json', '--enable-debug-command', 'yes', '--maxclients', '1000',
  ]);
  const child = spawn(cmd, args, { env: { ...process.env, ...NODE_ENV }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  const port = await new Promise((resolve, reject) => {
    let buf = '';
    child.stdout.on('data', (c) => {
      buf += c;
      const m = /"msg":"[^"]*ready to accept[^"]*"[^\n]*"port":(\d+)|"port":(\d+)[^\n]*ready to accept/.exec(buf);
      if (m) resolve(Number(m[1] ?? m[2]));
    });
    child.on('exit', (code) => reject(new Error(`cellgate exited ${code}: ${buf}`)));
  });
  return { port, child, async stop() { child.kill('SIGTERM'); await new Promise((r) => child.once('exit', r)); children.delete(child); } };
}

function runBenchmark(port, requests, cmd) {
  const [bin, args] = pinned(1, 'redis-benchmark', [
    '-h', '127.0.0.1', '-p', String(port), '-c', '50', '-n', String(requests), '-r', String(KEYS), '-P', '16', '--csv', ...cmd,
  ]);
  const r = spawnSync(bin, args, { encoding: 'utf8' });
  if (r.status !== 0 || /error/i.test(r.stderr)) throw new Error(`redis-benchmark failed: ${r.stderr || r.stdout}`);
  const lines = r.stdout.trim().split('\n').filter((l) => l.startsWith('"'));
  const header = lines.findIndex((l) => l.startsWith('"test"'));
  const cols = JSON.parse(`[${lines[header]}]`);
  const vals = JSON.parse(`[${lines[header + 1]}]`);
  return { rps: Number(vals[cols.indexOf('rps')]), p50: Number(vals[cols.indexOf('p50_latency_ms')]), p99: Number(vals[cols.indexOf('p99_latency_ms')]) };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// Every command enforces 1000 per minute with bursts of 100 where a burst applies.
const COMMANDS = [
  ['CL.THROTTLE', ['CL.THROTTLE', 'key:__rand_int__', '99', '1000', '60', '1']],
  ['RL.GCRA', ['RL.GCRA', 'key:__rand_int__', '1000', '60000', 'BURST', '100']],
  ['RL.TOKENBUCKET', ['RL.TOKENBUCKET', 'key:__rand_int__', '1000', '60000', 'BURST', '100']],
  ['RL.LEAKYBUCKET', ['RL.LEAKYBUCKET', 'key:__rand_int__', '1000', '60000', 'BURST', '100']],
  ['RL.FIXEDWINDOW', ['RL.FIXEDWINDOW', 'key:__rand_int__', '1000', '60000']],
  ['RL.SLIDINGWINDOW', ['RL.SLIDINGWINDOW', 'key:__rand_int__', '1000', '60000']],
  ['RL.SLIDINGLOG (limit 100)', ['RL.SLIDINGLOG', 'key:__rand_int__', '100', '60000']],
  ['RL.ALL (2 limits)', ['RL.ALL', '2', 'a:__rand_int__', 'SLIDINGWINDOW', '10', '1000', 'b:__rand_int__', 'TOKENBUCKET', '1000', '3600000']],
];

async function throughput() {
  const server = await startCellgate();
  const client = new RawClient(server.port);
  await client.connect();
  const sizes = new Map();
  const rps = new Map(COMMANDS.map(([name]) => [name, []]));
  const lat = new Map(COMMANDS.map(([name]) => [name, []]));
  for (const [name, cmd] of COMMANDS) {
    await client.call('FLUSHALL');
    const warm = runBenchmark(server.port, 200_000, cmd);
    sizes.set(name, Math.max(100_000, Math.round((warm.rps * SECONDS) / 10_000) * 10_000));
  }
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? COMMANDS : [...COMMANDS].reverse();
    for (const [name, cmd] of order) {
      await client.call('FLUSHALL');
      const r = runBenchmark(server.port, sizes.get(name), cmd);
      rps.get(name).push(r.rps);
      lat.get(name).push(r);
      process.stderr.write(`${name}: ${Math.round(r.rps)} ops/s\n`);
    }
  }
  client.close();
  await server.stop();
  return COMMANDS.map(([name, cmd]) => ({
    name, cmd, n: sizes.get(name), rps: median(rps.get(name)), all: rps.get(name),
    p50: median(lat.get(name).map((x) => x.p50)), p99: median(lat.get(name).map((x) => x.p99)),
  }));
}

/** [label, keys, rounds, make(i) → argv]: `rounds` fills at distinct ms (DEBUG CLOCK SET T0 + r). */
const MEMORY = [
  ['CL.THROTTLE (gcra)', MEM_KEYS, 1, (i) => ['CL.THROTTLE', `key:${i}`, '99', '1000', '3600']],
  ['RL.GCRA', MEM_KEYS, 1, (i) => ['RL.GCRA', `key:${i}`, '1000', '3600000', 'BURST', '100']],
  ['RL.TOKENBUCKET', MEM_KEYS, 1, (i) => ['RL.TOKENBUCKET', `key:${i}`, '1000', '3600000', 'BURST', '100']],
  ['RL.LEAKYBUCKET', MEM_KEYS, 1, (i) => ['RL.LEAKYBUCKET', `key:${i}`, '1000', '3600000', 'BURST', '100']],
  ['RL.FIXEDWINDOW', MEM_KEYS, 1, (i) => ['RL.FIXEDWINDOW', `key:${i}`, '1000', '3600000']],
  ['RL.SLIDINGWINDOW', MEM_KEYS, 1, (i) => ['RL.SLIDINGWINDOW', `key:${i}`, '1000', '3600000']],
  ['RL.SLIDINGLOG limit 10, 1 request per key', MEM_KEYS, 1, (i) => ['RL.SLIDINGLOG', `key:${i}`, '10', '3600000']],
  ['RL.SLIDINGLOG limit 10, full (10 entries)', MEM_KEYS, 10, (i) => ['RL.SLIDINGLOG', `key:${i}`, '10', '3600000']],
  ['RL.SLIDINGLOG limit 100, 1 request per key', MEM_KEYS, 1, (i) => ['RL.SLIDINGLOG', `key:${i}`, '100', '3600000']],
  ['RL.SLIDINGLOG limit 100, full (100 entries)', LOG100_KEYS, 100, (i) => ['RL.SLIDINGLOG', `key:${i}`, '100', '3600000']],
];

async function memory() {
  const results = [];
  const filter = env.BENCH_MEM_FILTER ?? '';
  for (const [label, keys, rounds, make] of MEMORY.filter(([label]) => label.includes(filter))) {
    const server = await startCellgate();
    const client = new RawClient(server.port);
    await client.connect();
    await client.call('DEBUG', 'CLOCK', 'SET', String(T0));
    const before = await usedMemory(client);
    const started = Date.now();
    for (let r = 0; r < rounds; r++) {
      await client.call('DEBUG', 'CLOCK', 'SET', String(T0 + r));
      await client.pipeline(keys, make);
    }
    const fillSeconds = (Date.now() - started) / 1000;
    const after = await usedMemory(client);
    const dbsize = Number(/:(\d+)/.exec(await client.call('DBSIZE'))[1]);
    if (dbsize !== keys) throw new Error(`${label}: DBSIZE ${dbsize}, expected ${keys}`);
    results.push({ label, keys, rounds, bytesPerKey: (after - before) / keys, before, after, fillSeconds });
    process.stderr.write(`${label}: ${((after - before) / keys).toFixed(1)} bytes/key (${keys} keys, ${fillSeconds.toFixed(1)} s)\n`);
    client.close();
    await server.stop();
  }
  return results;
}

function machine() {
  const sh = (c, a) => spawnSync(c, a, { encoding: 'utf8' }).stdout?.trim() ?? '';
  const rev = sh('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD']);
  return [
    `- CPU: ${os.cpus()[0]?.model ?? '?'}, ${CPUS} CPUs available; RAM ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB`,
    `- Kernel: ${os.type()} ${os.release()} ${os.arch()}; node ${process.version}; ${sh('redis-benchmark', ['--version'])}`,
    `- cellgate: commit ${rev}`,
    `- Pinning: ${PIN ? 'cellgate on CPU 0, redis-benchmark on CPU 1 (taskset)' : 'none'}`,
  ];
}

const started = new Date();
const load0 = os.loadavg();
const machineLines = machine(); // the commit dist/ was built from is the one checked out at the start
const tp = ONLY.includes('throughput') ? await throughput() : [];
const load1 = os.loadavg();
const mem = ONLY.includes('memory') ? await memory() : [];
const load2 = os.loadavg();
const fmt = (l) => l.map((x) => x.toFixed(2)).join(' ');

let md = `\n# RL.* family benchmark\n\nProduced by \`node bench/ratelimit.mjs\` (after \`npm run build\`; BENCH_ROUNDS=${ROUNDS}, BENCH_SECONDS=${SECONDS}) on ${started.toISOString()}.\n\n`;
md += `## Machine\n\n${machineLines.join('\n')}\n`;
const CPUS_FOR_NOTE = os.cpus().length;
md += `- Load average (1, 5, 15 min): at start ${fmt(load0)}; after throughput ${fmt(load1)}; after memory ${fmt(load2)}. The benchmark's own load counts in these; a load well above ${CPUS_FOR_NOTE} at the start means other work shared the machine: then treat the numbers as a lower bound and compare rows with each other, not with other sections.\n\n`;
if (tp.length > 0) {
  md += `## Throughput (pipeline 16, 50 clients, ${KEYS.toLocaleString('en-US')} random keys; medians of ${ROUNDS} interleaved rounds)\n\n`;
  md += '```\n' + `${PIN ? 'taskset -c 1 ' : ''}redis-benchmark -h 127.0.0.1 -p <port> -c 50 -n <n> -r ${KEYS} -P 16 --csv <command>\n` + '```\n\n';
  md += '| command | ops/s | vs CL.THROTTLE | p50 ms | p99 ms | every round |\n|---|---:|---:|---:|---:|---|\n';
  const base = tp[0].rps;
  for (const r of tp) {
    md += `| \`${r.cmd.join(' ')}\` | ${Math.round(r.rps).toLocaleString('en-US')} | ${(r.rps / base).toFixed(2)} | ${r.p50} | ${r.p99} | ${r.all.map((x) => Math.round(x)).join(', ')} |\n`;
  }
  md += '\n';
}
if (mem.length > 0) {
  md += `## Memory per key\n\nINFO memory \`used_memory\` (V8 heap used + array buffers) after DEBUG GC, before and after filling the keys (key names \`key:<i>\`, a fresh server each).\n\n`;
  md += '| keys | algorithm | requests per key | bytes per key |\n|---:|---|---:|---:|\n';
  for (const r of mem) md += `| ${r.keys.toLocaleString('en-US')} | ${r.label} | ${r.rounds} | ${Math.round(r.bytesPerKey)} |\n`;
  md += '\n';
}
process.stdout.write(md);
if (env.BENCH_APPEND === '1') appendFileSync(join(ROOT, 'bench', 'RESULTS.md'), md);
