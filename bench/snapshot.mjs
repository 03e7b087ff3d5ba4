#!/usr/bin/env node
/**
 * Snapshot benchmark: SAVE and load time for 1M and 5M keys, and CL.THROTTLE latency seen by a steady
 * client while a BGSAVE of 1M keys runs, against the same client with no BGSAVE.
 *
 *   npm run build && node bench/snapshot.mjs            # 1M and 5M keys
 *   SNAPSHOT_SIZES=1000000 node bench/snapshot.mjs      # only 1M
 *   (also SNAPSHOT_ROUNDS, SNAPSHOT_LATENCY_MS per phase, SNAPSHOT_PIN=1)
 *
 * Prints a Markdown section (numbers, command, machine, load average) on stdout; append it to
 * bench/RESULTS.md. Targets: 1M keys saved ≤ 1 s and loaded ≤ 1 s; p99 during BGSAVE ≤ 2× idle p99.
 */
import { spawn, execSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fillThrottleKeys } from './fill.mjs';
import { NODE_ENV, NODE_FLAGS } from './node-flags.mjs';

const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const SIZES = (process.env.SNAPSHOT_SIZES ?? '1000000,5000000').split(',').map(Number);
const LATENCY_KEYS = 1_000_000;
const LATENCY_MS = Number(process.env.SNAPSHOT_LATENCY_MS ?? 4000);
const ROUNDS = Number(process.env.SNAPSHOT_ROUNDS ?? 3);
/**
 * SNAPSHOT_PIN=1 pins the server to CPU 0 and this client to CPU 1 (as bench/throttle.mjs does). Off by
 * default: on this shared 2-core machine pinning made every p99 milliseconds (the server cannot move
 * away from other engineers' work), idle or not.
 */
const PIN = process.env.SNAPSHOT_PIN === '1' && hasTaskset();

function hasTaskset() {
  try {
    execSync('taskset -c 1 true', { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Starts cellgate on `dir`; resolves with the port and the parsed log lines. */
function startServer(dir) {
  const pin = PIN ? ['taskset', '-c', '0'] : [];
  const [cmd, ...pre] = [...pin, process.execPath];
  const proc = spawn(cmd, [...pre, ...NODE_FLAGS, '--max-old-space-size=8192', MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--log-format', 'json'], {
    env: { ...process.env, ...NODE_ENV },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const logs = [];
  const started = performance.now();
  return new Promise((resolve, reject) => {
    let buf = '';
    proc.stdout.on('data', (d) => {
      buf += d;
      let nl;
      while ((nl = buf.indexOf('\n')) !== -1) {
        const line = JSON.parse(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        logs.push(line);
        if (String(line.msg).includes('ready to accept connections')) resolve({ proc, port: line.port, logs, startMs: performance.now() - started });
      }
    });
    proc.on('exit', (code) => reject(new Error(`cellgate exited with ${code}`)));
  });
}

function stopServer(s) {
  return new Promise((resolve) => {
    s.proc.removeAllListeners('exit');
    s.proc.once('exit', resolve);
    s.proc.kill('SIGKILL');
  });
}

/** A minimal RESP connection: send a command, await its reply (as raw text). One at a time. */
class Conn {
  constructor(port) {
    this.sock = net.connect(port, '127.0.0.1');
    this.sock.setNoDelay(true);
    this.pending = null;
    this.buf = '';
    this.sock.on('data', (d) => {
      this.buf += d.toString('latin1');
      if (this.pending && complete(this.buf)) {
        const p = this.pending;
        const text = this.buf;
        this.pending = null;
        this.buf = '';
        p(text);
      }
    });
  }
  ready() {
    return new Promise((r) => this.sock.once('connect', r));
  }
  send(...args) {
    let out = `*${args.length}\r\n`;
    for (const a of args) out += `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`;
    return new Promise((resolve) => {
      this.pending = resolve;
      this.sock.write(out);
    });
  }
  close() {
    this.sock.destroy();
  }
}

/** Whether `s` holds one whole RESP2 reply (enough for the replies used here). */
function complete(s) {
  if (s[0] === '+' || s[0] === '-' || s[0] === ':') return s.endsWith('\r\n');
  if (s[0] === '$') {
    const nl = s.indexOf('\r\n');
    return nl > 0 && s.length >= nl + 2 + Number(s.slice(1, nl)) + 2;
  }
  if (s[0] === '*') {
    const n = Number(s.slice(1, s.indexOf('\r\n')));
    return s.split('\r\n').length - 2 >= n;
  }
  return false;
}

function infoField(text, name) {
  const m = new RegExp(`\\r\\n${name}:([^\\r]*)`).exec(text);
  return m ? m[1] : undefined;
}

function pct(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/**
 * A steady client (one CL.THROTTLE at a time, closed loop) for `ms` milliseconds while `during`
 * runs; returns the latencies (µs) of the requests sent while `busy()` was true.
 */
async function steadyClient(port, ms, busy) {
  const c = new Conn(port);
  await c.ready();
  const lat = [];
  const until = performance.now() + ms;
  let i = 0;
  while (performance.now() < until) {
    const wasBusy = busy();
    const t = performance.now();
    await c.send('CL.THROTTLE', `key:${(i++ * 7919) % LATENCY_KEYS}`, 100, 1, 3600, 0);
    if (wasBusy && busy()) lat.push((performance.now() - t) * 1000);
  }
  c.close();
  return lat;
}

async function main() {
  if (PIN) execSync(`taskset -cp 1 ${process.pid}`, { stdio: 'ignore' });
  const loadStart = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  const commit = execSync('git rev-parse --short HEAD', { encoding: 'utf8' }).trim();
  const rows = [];
  const out = [];
  for (const n of SIZES) {
    const dir = mkdtempSync(join(os.tmpdir(), 'cellgate-bench-'));
    try {
      let s = await startServer(dir);
      await fillThrottleKeys(s.port, n);
      const c = new Conn(s.port);
      await c.ready();
      const saves = [];
      for (let r = 0; r < ROUNDS; r++) {
        const t = performance.now();
        const reply = await c.send('SAVE');
        if (!reply.startsWith('+OK')) throw new Error(`SAVE: ${reply}`);
        saves.push(performance.now() - t);
      }
      const bytes = statSync(join(dir, 'cellgate.snap')).size;
      const bg = [];
      for (let r = 0; r < ROUNDS; r++) {
        const t = performance.now();
        await c.send('BGSAVE');
        while (infoField(await c.send('INFO', 'persistence'), 'rdb_bgsave_in_progress') === '1') await new Promise((res) => setTimeout(res, 5));
        bg.push(performance.now() - t);
      }
      c.close();
      await stopServer(s);
      const loads = [];
      for (let r = 0; r < ROUNDS; r++) {
        s = await startServer(dir);
        const line = s.logs.find((l) => String(l.msg).startsWith('snapshot loaded'));
        if (line.keys !== n) throw new Error(`loaded ${line.keys} keys, expected ${n}`);
        loads.push(line.ms);
        await stopServer(s);
      }
      const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
      rows.push(`| ${n.toLocaleString('en-US')} | ${(bytes / 1e6).toFixed(1)} MB | ${med(saves).toFixed(0)} ms | ${med(bg).toFixed(0)} ms | ${med(loads).toFixed(0)} ms |`);
      process.stderr.write(`${n} keys: SAVE ${saves.map((x) => x.toFixed(0))} ms, BGSAVE ${bg.map((x) => x.toFixed(0))} ms, load ${loads.join(',')} ms\n`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  // Latency: a steady client while BGSAVE of 1M keys runs back to back, vs the same client idle.
  const dir = mkdtempSync(join(os.tmpdir(), 'cellgate-bench-'));
  let latency;
  try {
    const s = await startServer(dir);
    await fillThrottleKeys(s.port, LATENCY_KEYS);
    const ctl = new Conn(s.port);
    await ctl.ready();
    const summary = (lat) => {
      lat.sort((a, b) => a - b);
      return { n: lat.length, p50: pct(lat, 50), p99: pct(lat, 99), p999: pct(lat, 99.9), max: lat[lat.length - 1] };
    };
    // Warm-up, then idle and BGSAVE phases alternated twice.
    await steadyClient(s.port, 1000, () => true);
    const idle = [];
    const during = [];
    let bgsaves = 0;
    for (let round = 0; round < 2; round++) {
      // Idle: the controller polls INFO as it does during BGSAVE, so both phases see the same extra load.
      let stop = false;
      const poller = (async () => {
        while (!stop) {
          await ctl.send('INFO', 'persistence');
          await new Promise((res) => setTimeout(res, 20));
        }
      })();
      idle.push(...(await steadyClient(s.port, LATENCY_MS / 2, () => true)));
      stop = true;
      await poller;

      let inProgress = false;
      stop = false;
      const driver = (async () => {
        while (!stop) {
          await ctl.send('BGSAVE');
          inProgress = true;
          bgsaves++;
          while (infoField(await ctl.send('INFO', 'persistence'), 'rdb_bgsave_in_progress') === '1') await new Promise((res) => setTimeout(res, 20));
          inProgress = false;
        }
      })();
      during.push(...(await steadyClient(s.port, LATENCY_MS / 2, () => inProgress)));
      stop = true;
      await driver;
    }
    ctl.close();
    await stopServer(s);
    latency = { idle: summary(idle), during: summary(during), bgsaves };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }

  const loadEnd = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  const cpus = os.cpus();
  const f = (x) => x.toFixed(0);
  out.push(`## Snapshots (SAVE, BGSAVE, load, latency during BGSAVE)`);
  out.push('');
  out.push(`Produced by \`node bench/snapshot.mjs\` (SNAPSHOT_SIZES=${SIZES.join(',')}, ${ROUNDS} rounds, medians) on ${new Date().toISOString()}.`);
  out.push('');
  out.push(`- Machine: ${cpus[0]?.model ?? '?'}, ${cpus.length} CPUs; RAM ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB; ${os.type()} ${os.release()}; node ${process.version}; cellgate commit ${commit}`);
  out.push(`- Load average at start: ${loadStart}; at end: ${loadEnd} (the benchmark's own load included)`);
  out.push(`- Pinning: ${PIN ? 'server on CPU 0, this client on CPU 1 (`taskset`)' : 'none'}`);
  out.push(`- Server: \`${Object.entries(NODE_ENV).map(([k, v]) => `${k}=${v}`).join(' ')} node ${[...NODE_FLAGS, '--max-old-space-size=8192'].join(' ')} dist/main.js --port 0 --bind 127.0.0.1 --dir <tmp> --save ''\`; keys are \`CL.THROTTLE key:<i> 100 1 3600\` (≈48 bytes each on disk), filled over one pipelined socket`);
  out.push('');
  out.push('| keys | file | SAVE | BGSAVE (idle server) | load at start |');
  out.push('|---:|---:|---:|---:|---:|');
  out.push(...rows);
  out.push('');
  out.push(`Latency of one steady client (closed loop, \`CL.THROTTLE key:<i> 100 1 3600 0\` over 1M keys), µs, ${LATENCY_MS} ms per phase, ${latency.bgsaves} back-to-back BGSAVEs of 1M keys during the BGSAVE phases (idle and BGSAVE phases alternate twice; an INFO poll every 20 ms in both):`);
  out.push('');
  out.push('| phase | requests | p50 | p99 | p99.9 | max |');
  out.push('|---|---:|---:|---:|---:|---:|');
  for (const [name, l] of [['no BGSAVE', latency.idle], ['during BGSAVE', latency.during]]) {
    out.push(`| ${name} | ${l.n} | ${f(l.p50)} | ${f(l.p99)} | ${f(l.p999)} | ${f(l.max)} |`);
  }
  out.push('');
  out.push(`p99 during BGSAVE / idle p99 = ${(latency.during.p99 / latency.idle.p99).toFixed(2)} (target ≤ 2).`);
  process.stdout.write(out.join('\n') + '\n');
}

main().catch((e) => {
  process.stderr.write(`${e.stack ?? e}\n`);
  process.exit(1);
});
