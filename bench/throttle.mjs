#!/usr/bin/env node
/**
 * npm run bench  (= npm run build && node bench/throttle.mjs)
 *
 * How fast is cellgate's CL.THROTTLE next to what services run in Redis today? Three targets, driven by
 * the same redis-benchmark (50 clients, 100k random keys), at pipeline 1 and 16:
 *   cellgate  CL.THROTTLE key:__rand_int__ 100 1000 60 1             (this repo's dist/main.js)
 *   lua       EVALSHA <sha> 1 key:__rand_int__ 101 16.67 1           (the classic Lua token bucket, redis-server)
 *   incr      INCR key:__rand_int__                                  (redis-server: the ceiling)
 * Runs are interleaved (A/B/C, A/B/C, ...) over BENCH_ROUNDS rounds after a warm-up/calibration run of
 * each, and the medians are reported. Both servers are started here on free loopback ports with temp
 * directories, and are killed at the end, on error, on Ctrl-C and on the global timeout.
 *
 * Environment (defaults in brackets):
 *   BENCH_ROUNDS [3]      measured rounds per (target, pipeline)
 *   BENCH_SECONDS [4]     target duration of one measured run (-n is sized from the calibration run)
 *   BENCH_CLIENTS [50]    redis-benchmark -c
 *   BENCH_KEYS [100000]   redis-benchmark -r
 *   BENCH_PIPELINES [1,16]
 *   BENCH_PIN [auto]      auto: with >= 2 CPUs, servers on CPU 0 and redis-benchmark on CPU 1 (taskset); 0: no pinning
 *   BENCH_PROFILE [auto]  auto: when a target is missed, profile cellgate (node --cpu-prof) under the pipeline-16
 *                         load and list the top self-time functions; 1: always; 0: never
 *   BENCH_WRITE [1]       write bench/RESULTS.md (0: print only)
 *   BENCH_TIMEOUT [300]   seconds before everything is killed
 *   BENCH_MAIN [dist/main.js]  the cellgate build to measure (an older commit's, for before/after)
 *
 * Server CPU per operation: utime + stime of the server process (/proc/<pid>/stat) over a run, divided
 * by its requests. Throughput on a shared 2-core machine is noisy; CPU per operation much less so.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LUA_TOKEN_BUCKET } from './lua-token-bucket.mjs';
import { NODE_ENV, NODE_FLAGS } from './node-flags.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** BENCH_MAIN measures another build (e.g. an older commit's dist/main.js) with this same script. */
const MAIN = process.env.BENCH_MAIN ?? join(ROOT, 'dist', 'main.js');
const RESULTS = join(ROOT, 'bench', 'RESULTS.md');

const env = process.env;
const ROUNDS = Math.max(1, Number(env.BENCH_ROUNDS ?? 3));
const SECONDS = Number(env.BENCH_SECONDS ?? 4);
const CLIENTS = Number(env.BENCH_CLIENTS ?? 50);
const KEYS = Number(env.BENCH_KEYS ?? 100_000);
const PIPELINES = (env.BENCH_PIPELINES ?? '1,16').split(',').map(Number);
const PROFILE = env.BENCH_PROFILE ?? 'auto';
const WRITE = env.BENCH_WRITE !== '0';
const TIMEOUT_S = Number(env.BENCH_TIMEOUT ?? 300);
const CPUS = os.availableParallelism?.() ?? os.cpus().length;
const HAVE_TASKSET = spawnSync('taskset', ['-V']).status === 0;
const PIN = (env.BENCH_PIN ?? 'auto') !== '0' && CPUS >= 2 && HAVE_TASKSET;
/**
 * The performance targets (bench/RESULTS.md, "Performance notes"): at pipeline 16 at least this share of INCR's requests/s and this multiple of the
 * Lua script's, with a p99 at most this multiple of INCR's; at pipeline 1 at least this share of INCR.
 */
const TARGET_VS_INCR = 0.6;
const TARGET_VS_LUA = 6;
const TARGET_P99_VS_INCR = 2;
const TARGET_P1_VS_INCR = 0.8;

// The limit every target enforces: burst 100 (capacity 101), 1000 per 60 s.
const MAX_BURST = 100;
const COUNT = 1000;
const PERIOD_S = 60;
const CAPACITY = MAX_BURST + 1;
const RATE_PER_S = COUNT / PERIOD_S;


// ---------------------------------------------------------------------------------------------------
// Process bookkeeping: every child is killed on the way out, whatever the way out is.

const children = new Set();
const tempDirs = [];

function killAll() {
  for (const child of children) {
    try {
      child.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
  children.clear();
  for (const d of tempDirs.splice(0)) rmSync(d, { recursive: true, force: true });
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    process.stderr.write(`bench: ${sig}, stopping servers\n`);
    killAll();
    process.exit(130);
  });
}
const watchdog = setTimeout(() => {
  process.stderr.write(`bench: timeout after ${TIMEOUT_S}s, stopping servers\n`);
  killAll();
  process.exit(124);
}, TIMEOUT_S * 1000);
watchdog.unref();

function track(child) {
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;

/** CPU seconds (user + system) the process has used so far, from /proc/<pid>/stat. */
function cpuSeconds(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

function pinned(cpu, cmd, args) {
  return PIN ? ['taskset', ['-c', String(cpu), cmd, ...args]] : [cmd, args];
}

/** Stops a child with SIGTERM and waits for it (SIGKILL after 5 s). Resolves with its exit code. */
function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    const t = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', (code) => {
      clearTimeout(t);
      resolve(code);
    });
    child.kill('SIGTERM');
  });
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// A minimal RESP client: one command, one reply (enough for PING, SCRIPT LOAD, sanity checks).

function parseReply(buf, i) {
  const nl = buf.indexOf('\r\n', i);
  if (nl === -1) return null;
  const type = String.fromCharCode(buf[i]);
  const line = buf.toString('utf8', i + 1, nl);
  const next = nl + 2;
  switch (type) {
    case '+':
      return { value: line, end: next };
    case '-':
      return { value: new Error(line), end: next };
    case ':':
      return { value: Number(line), end: next };
    case '$': {
      const n = Number(line);
      if (n < 0) return { value: null, end: next };
      if (buf.length < next + n + 2) return null;
      return { value: buf.toString('utf8', next, next + n), end: next + n + 2 };
    }
    case '*': {
      const n = Number(line);
      if (n < 0) return { value: null, end: next };
      const items = [];
      let at = next;
      for (let k = 0; k < n; k++) {
        const r = parseReply(buf, at);
        if (r === null) return null;
        items.push(r.value);
        at = r.end;
      }
      return { value: items, end: at };
    }
    default:
      throw new Error(`unexpected reply byte ${JSON.stringify(type)}`);
  }
}

function command(port, args, timeoutMs = 2000) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no reply to ${args[0]} on port ${port}`));
    }, timeoutMs);
    socket.on('connect', () => {
      let out = `*${args.length}\r\n`;
      for (const a of args) out += `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`;
      socket.write(out);
    });
    socket.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      const r = parseReply(buf, 0);
      if (r === null) return;
      clearTimeout(timer);
      socket.end();
      resolve(r.value);
    });
    socket.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

async function waitForPong(port, child, what) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${what} exited with code ${child.exitCode} before answering PING`);
    try {
      if ((await command(port, ['PING'], 500)) === 'PONG') return;
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) throw new Error(`${what} did not answer PING on port ${port} within 10 s`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// ---------------------------------------------------------------------------------------------------
// Servers.

/** Starts cellgate on a free port (--port 0, port read from its JSON ready line). */
async function startCellgate(extraNodeArgs = [], cwd = ROOT) {
  const dir = mkdtempSync(join(os.tmpdir(), 'cellgate-bench-'));
  tempDirs.push(dir);
  const [cmd, args] = pinned(0, process.execPath, [
    ...NODE_FLAGS, ...extraNodeArgs, MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--log-format', 'json',
  ]);
  const child = track(spawn(cmd, args, { cwd, env: { ...process.env, ...NODE_ENV }, stdio: ['ignore', 'pipe', 'pipe'] }));
  const logs = [];
  const port = await new Promise((resolve, reject) => {
    let buf = '';
    const t = setTimeout(() => reject(new Error(`cellgate did not start:\n${logs.join('\n')}`)), 10_000);
    const onData = (chunk) => {
      buf += chunk.toString('utf8');
      let nl;
      while ((nl = buf.indexOf('\n')) !== -1) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        logs.push(line);
        try {
          const entry = JSON.parse(line);
          if (typeof entry.port === 'number' && /ready to accept/.test(entry.msg ?? '')) {
            clearTimeout(t);
            resolve(entry.port);
          }
        } catch {
          /* not JSON */
        }
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', (c) => logs.push(c.toString('utf8').trimEnd()));
    child.on('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`cellgate exited with code ${code}:\n${logs.join('\n')}`));
    });
  });
  await waitForPong(port, child, 'cellgate');
  return { name: 'cellgate', port, child, dir, logs };
}

async function startRedis() {
  const dir = mkdtempSync(join(os.tmpdir(), 'redis-bench-'));
  tempDirs.push(dir);
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const [cmd, args] = pinned(0, 'redis-server', [
      '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--loglevel', 'warning',
    ]);
    const child = track(spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] }));
    try {
      await waitForPong(port, child, 'redis-server');
      return { name: 'redis-server', port, child, dir };
    } catch (e) {
      await stop(child);
      if (attempt >= 3) throw e;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// redis-benchmark.

function benchmarkArgs(port, pipeline, requests, cmd) {
  return [
    '-h', '127.0.0.1', '-p', String(port), '-c', String(CLIENTS), '-n', String(requests), '-r', String(KEYS),
    '-P', String(pipeline), '--precision', '3', '--csv', ...cmd,
  ];
}

function shellQuote(words) {
  return words.map((w) => (/^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/**
 * Runs redis-benchmark once; resolves with {rps, p50, p99, avg, max, seconds, cpuUsPerOp} (the server's
 * CPU per request when `serverPid` is given).
 */
function runBenchmark(port, pipeline, requests, cmd, serverPid) {
  const [bin, args] = pinned(1, 'redis-benchmark', benchmarkArgs(port, pipeline, requests, cmd));
  const cpuBefore = serverPid === undefined ? 0 : cpuSeconds(serverPid);
  return new Promise((resolve, reject) => {
    const child = track(spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] }));
    let out = '';
    let err = '';
    const started = process.hrtime.bigint();
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    child.on('exit', (code) => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      if (code !== 0) return reject(new Error(`redis-benchmark exited ${code}: ${err || out}`));
      if (/error/i.test(err)) return reject(new Error(`redis-benchmark reported: ${err.trim()}`));
      const lines = out.trim().split('\n').filter((l) => l.startsWith('"'));
      const header = lines.findIndex((l) => l.startsWith('"test"'));
      if (header === -1 || lines.length <= header + 1) return reject(new Error(`cannot parse redis-benchmark output:\n${out}`));
      const cols = JSON.parse(`[${lines[header]}]`);
      const vals = JSON.parse(`[${lines[header + 1]}]`);
      const get = (name) => Number(vals[cols.indexOf(name)]);
      resolve({
        cpuUsPerOp: serverPid === undefined ? NaN : ((cpuSeconds(serverPid) - cpuBefore) * 1e6) / requests,
        rps: get('rps'),
        avg: get('avg_latency_ms'),
        p50: get('p50_latency_ms'),
        p99: get('p99_latency_ms'),
        max: get('max_latency_ms'),
        seconds,
      });
    });
  });
}

// ---------------------------------------------------------------------------------------------------
// Machine facts.

function sh(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : '?';
}

/** The cellgate being measured: its commit, and whether src/ differed from it (dist/ is built from src/). */
function revision() {
  if (process.env.BENCH_MAIN) return `the build at ${process.env.BENCH_MAIN}`;
  const head = spawnSync('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  if (head.status !== 0) return 'unknown (not a git checkout)';
  const dirty = spawnSync('git', ['-C', ROOT, 'status', '--porcelain', '--', 'src'], { encoding: 'utf8' }).stdout.trim();
  return `${head.stdout.trim()}${dirty ? ` with uncommitted changes in src/ (${dirty.split('\n').length} files)` : ''}`;
}

function machine() {
  let cpu = os.cpus()[0]?.model ?? '?';
  try {
    const m = /model name\s*:\s*(.+)/.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    if (m) cpu = m[1].trim();
  } catch {
    /* not Linux */
  }
  let distro = '?';
  try {
    distro = /PRETTY_NAME="?([^"\n]+)/.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? '?';
  } catch {
    /* no os-release */
  }
  return {
    cpu,
    cores: CPUS,
    ramGiB: (os.totalmem() / 2 ** 30).toFixed(1),
    node: process.version,
    redis: /v=(\S+)/.exec(sh('redis-server', ['--version']))?.[1] ?? '?',
    redisBenchmark: sh('redis-benchmark', ['--version']),
    kernel: `${os.type()} ${os.release()} ${os.arch()}`,
    distro,
    loadavg: os.loadavg().map((x) => x.toFixed(2)).join(' '),
    revision: revision(),
  };
}

// ---------------------------------------------------------------------------------------------------
// CPU profile summary (node --cpu-prof).

/**
 * Summary of a .cpuprofile: the top self-time functions [{name, location, ms, pct}] and self time per
 * script ({file, ms, pct}; native code and V8's own buckets under their names).
 */
function summarizeProfile(file, top = 10) {
  const prof = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const selfUs = new Map();
  let totalUs = 0;
  for (let i = 0; i < prof.samples.length; i++) {
    const dt = prof.timeDeltas[i] ?? 0;
    const n = byId.get(prof.samples[i]);
    if (!n) continue;
    const cf = n.callFrame;
    const url = cf.url.startsWith('file:') ? relative(ROOT, fileURLToPath(cf.url)) : cf.url;
    const name = cf.functionName || (url ? '(anonymous)' : `(${cf.functionName || 'native'})`);
    const location = url ? `${url}:${cf.lineNumber + 1}` : '';
    const key = `${name}\t${location}`;
    selfUs.set(key, (selfUs.get(key) ?? 0) + dt);
    totalUs += dt;
  }
  // Idle time is the event loop waiting for the client, not work: leave it out of the shares.
  const idleUs = selfUs.get('(idle)\t') ?? 0;
  selfUs.delete('(idle)\t');
  totalUs -= idleUs;
  const functions = [...selfUs.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([key, us]) => {
      const [name, location] = key.split('\t');
      return { name, location, ms: us / 1000, pct: (100 * us) / totalUs };
    });
  const byFileUs = new Map();
  for (const [key, us] of selfUs) {
    const [name, location] = key.split('\t');
    const file = location ? location.replace(/:\d+$/, '') : `${name} (native/V8)`;
    byFileUs.set(file, (byFileUs.get(file) ?? 0) + us);
  }
  const files = [...byFileUs.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([file, us]) => ({ file, ms: us / 1000, pct: (100 * us) / totalUs }));
  return { functions, files, busyMs: totalUs / 1000, idleMs: idleUs / 1000 };
}

async function profileCellgate(cmd, requests) {
  const profDir = mkdtempSync(join(os.tmpdir(), 'cellgate-prof-'));
  tempDirs.push(profDir);
  const server = await startCellgate(['--cpu-prof', '--cpu-prof-dir', profDir]);
  await runBenchmark(server.port, 16, Math.round(requests / 3), cmd); // warm up the JIT first
  const result = await runBenchmark(server.port, 16, requests, cmd);
  const code = await stop(server.child);
  const files = readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile'));
  if (files.length === 0) throw new Error(`cellgate (exit ${code}) wrote no .cpuprofile`);
  return { result, ...summarizeProfile(join(profDir, files[0])) };
}

// ---------------------------------------------------------------------------------------------------

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmtInt = (x) => Math.round(x).toLocaleString('en-US');
const fmtMs = (x) => x.toFixed(3);
const fmtRatio = (x) => `${x.toFixed(2)}×`;

function table(headers, rows) {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells) => `| ${cells.map((c, i) => String(c).padEnd(widths[i])).join(' | ')} |`;
  return [line(headers), `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`, ...rows.map(line)].join('\n');
}

async function main() {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run npm run build (npm run bench does)`);
  for (const tool of ['redis-server', 'redis-benchmark']) {
    if (spawnSync(tool, ['--version']).error) throw new Error(`${tool} not found (apt-get install redis-server redis-tools)`);
  }
  const started = new Date();
  const facts = machine();
  const invocation = `${Object.entries(env).filter(([k]) => k.startsWith('BENCH_')).map(([k, v]) => `${k}=${shellQuote([v])} `).join('')}node bench/throttle.mjs`;
  const say = (s = '') => process.stdout.write(s + '\n');
  say(`# ${invocation}   (npm run bench)`);
  say(`# ${started.toISOString()}  ${facts.cpu}, ${facts.cores} CPUs, ${facts.ramGiB} GiB, ${facts.kernel}, ${facts.distro}`);
  say(`# node ${facts.node}, redis-server ${facts.redis}, ${facts.redisBenchmark}, load average ${facts.loadavg}`);
  say(`# cellgate ${facts.revision}`);
  say(`# pinning: ${PIN ? 'servers on CPU 0, redis-benchmark on CPU 1 (taskset)' : 'none'}`);

  const cellgate = await startCellgate();
  const redis = await startRedis();
  const sha = await command(redis.port, ['SCRIPT', 'LOAD', LUA_TOKEN_BUCKET]);
  if (sha instanceof Error) throw sha;

  const targets = [
    { id: 'cellgate', label: 'cellgate CL.THROTTLE', server: cellgate, cmd: ['CL.THROTTLE', 'key:__rand_int__', String(MAX_BURST), String(COUNT), String(PERIOD_S), '1'] },
    { id: 'lua', label: 'redis Lua token bucket (EVALSHA)', server: redis, cmd: ['EVALSHA', sha, '1', 'key:__rand_int__', String(CAPACITY), String(RATE_PER_S), '1'] },
    { id: 'incr', label: 'redis INCR (ceiling)', server: redis, cmd: ['INCR', 'key:__rand_int__'] },
  ];

  // The Lua hashes and INCR counters share redis-server's keyspace under the same key names: clear it
  // before each redis run so neither meets the other's type (WRONGTYPE replies are not rate limiting).
  const prepare = async (t) => {
    if (t.server === redis) await command(redis.port, ['FLUSHALL']);
  };

  // Sanity: each command must succeed once before it is measured (redis-benchmark would count errors as requests).
  for (const t of targets) {
    await prepare(t);
    const probe = t.cmd.map((w) => w.replace('__rand_int__', '000000000001'));
    const reply = await command(t.server.port, probe);
    if (reply instanceof Error) throw new Error(`${t.label}: ${probe.join(' ')} → ${reply.message}`);
    say(`# check: ${probe.join(' ')} → ${JSON.stringify(reply)}`);
  }
  // Warm-up: give V8 time to optimize cellgate's hot path before anything is measured or calibrated.
  await runBenchmark(cellgate.port, 16, 500_000, targets[0].cmd);
  await runBenchmark(cellgate.port, 1, 50_000, targets[0].cmd);

  // Calibration: size -n so a measured run lasts about BENCH_SECONDS.
  const requests = new Map();
  for (const p of PIPELINES) {
    for (const t of targets) {
      await prepare(t);
      const n0 = p === 1 ? 50_000 : 300_000;
      const r = await runBenchmark(t.server.port, p, n0, t.cmd);
      const n = Math.max(10_000, Math.round((r.rps * SECONDS) / 10_000) * 10_000);
      requests.set(`${t.id}/${p}`, n);
      say(`# calibrate ${t.id} P${p}: ${fmtInt(r.rps)} rps → -n ${n}`);
    }
  }

  const runs = new Map(); // `${id}/${p}` → [result...]
  for (let round = 1; round <= ROUNDS; round++) {
    for (const p of PIPELINES) {
      // A/B/C then C/B/A: neither target always runs first after the other.
      const order = round % 2 ? targets : [...targets].reverse();
      for (const t of order) {
        await prepare(t);
        const key = `${t.id}/${p}`;
        const r = await runBenchmark(t.server.port, p, requests.get(key), t.cmd, t.server.child.pid);
        if (!runs.has(key)) runs.set(key, []);
        runs.get(key).push(r);
        say(`round ${round} P${String(p).padEnd(2)} ${t.id.padEnd(8)} ${fmtInt(r.rps).padStart(11)} rps  p50 ${fmtMs(r.p50)} ms  p99 ${fmtMs(r.p99)} ms  CPU ${r.cpuUsPerOp.toFixed(3)} µs/op  (${r.seconds.toFixed(1)} s)`);
      }
    }
  }

  const med = new Map();
  for (const [key, rs] of runs) {
    med.set(key, { rps: median(rs.map((r) => r.rps)), p50: median(rs.map((r) => r.p50)), p99: median(rs.map((r) => r.p99)), cpu: median(rs.map((r) => r.cpuUsPerOp)) });
  }
  const resultRows = [];
  for (const p of PIPELINES) {
    for (const t of targets) {
      const m = med.get(`${t.id}/${p}`);
      resultRows.push([t.label, p, fmtInt(m.rps), fmtMs(m.p50), fmtMs(m.p99), m.cpu.toFixed(3), requests.get(`${t.id}/${p}`)]);
    }
  }
  const resultTable = table(['target', 'pipeline', 'requests/s (median)', 'p50 ms', 'p99 ms', 'server CPU µs/op', '-n'], resultRows);
  const ratioRows = PIPELINES.map((p) => {
    const c = med.get(`cellgate/${p}`);
    return [p, fmtRatio(c.rps / med.get(`incr/${p}`).rps), fmtRatio(c.rps / med.get(`lua/${p}`).rps), fmtRatio(c.cpu / med.get(`incr/${p}`).cpu)];
  });
  const ratioTable = table(['pipeline', 'cellgate / INCR', 'cellgate / Lua', 'CPU per op: cellgate / INCR'], ratioRows);

  const p16 = PIPELINES.includes(16) ? 16 : PIPELINES[PIPELINES.length - 1];
  const vsIncr = med.get(`cellgate/${p16}`).rps / med.get(`incr/${p16}`).rps;
  const vsLua = med.get(`cellgate/${p16}`).rps / med.get(`lua/${p16}`).rps;
  const p99VsIncr = med.get(`cellgate/${p16}`).p99 / med.get(`incr/${p16}`).p99;
  const checks = [
    [`pipeline ${p16}: cellgate / INCR requests/s`, vsIncr, `≥ ${TARGET_VS_INCR}`, vsIncr >= TARGET_VS_INCR],
    [`pipeline ${p16}: cellgate / Lua requests/s`, vsLua, `≥ ${TARGET_VS_LUA}`, vsLua >= TARGET_VS_LUA],
    [`pipeline ${p16}: cellgate p99 / INCR p99`, p99VsIncr, `≤ ${TARGET_P99_VS_INCR}`, p99VsIncr <= TARGET_P99_VS_INCR],
  ];
  if (PIPELINES.includes(1)) {
    const p1VsIncr = med.get('cellgate/1').rps / med.get('incr/1').rps;
    checks.push(['pipeline 1: cellgate / INCR requests/s', p1VsIncr, `≥ ${TARGET_P1_VS_INCR}`, p1VsIncr >= TARGET_P1_VS_INCR]);
  }
  const allMet = checks.every((c) => c[3]);
  const missed = checks.filter((c) => !c[3]).length;
  const verdict = checks.map(([what, value, target, met]) => `- ${what} = ${value.toFixed(2)} (target ${target}): ${met ? 'met' : '**missed**'}`).join('\n');

  say();
  say(resultTable);
  say();
  say(ratioTable);
  say();
  say(verdict);

  await stop(cellgate.child);
  await stop(redis.child);

  let profile = null;
  if (PROFILE === '1' || (PROFILE === 'auto' && !allMet)) {
    say();
    say(`# profiling cellgate (node --cpu-prof) under pipeline ${p16} load...`);
    const cmd = targets[0].cmd;
    profile = await profileCellgate(cmd, requests.get(`cellgate/${p16}`));
    profile.command = shellQuote(['redis-benchmark', ...benchmarkArgs('<port>', p16, requests.get(`cellgate/${p16}`), cmd)]);
    const rows = profile.functions.map((f, i) => [i + 1, f.name, f.location, f.ms.toFixed(0), `${f.pct.toFixed(1)}%`]);
    profile.table = table(['#', 'function', 'where', 'self ms', 'self %'], rows);
    profile.fileTable = table(['script', 'self ms', 'self %'], profile.files.map((f) => [f.file, f.ms.toFixed(0), `${f.pct.toFixed(1)}%`]));
    say(`# under the profiler: ${fmtInt(profile.result.rps)} rps`);
    say(profile.table);
  }

  const endLoad = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  const rawRows = [];
  for (const [key, rs] of runs) {
    for (const [i, r] of rs.entries()) rawRows.push([key.replace('/', ' P'), i + 1, fmtInt(r.rps), fmtMs(r.p50), fmtMs(r.p99), fmtMs(r.max), r.cpuUsPerOp.toFixed(3), r.seconds.toFixed(1)]);
  }
  const commands = PIPELINES.flatMap((p) =>
    targets.map((t) => shellQuote([...(PIN ? ['taskset', '-c', '1'] : []), 'redis-benchmark', ...benchmarkArgs(`<${t.id === 'cellgate' ? 'cellgate' : 'redis'}-port>`, p, requests.get(`${t.id}/${p}`), t.cmd)])),
  );

  if (WRITE) {
    const md = `# CL.THROTTLE benchmark

Produced by \`npm run bench\` (\`${invocation}\`) on ${started.toISOString()} (${((Date.now() - started.getTime()) / 1000).toFixed(0)} s).

## Machine

- CPU: ${facts.cpu}, ${facts.cores} CPUs available; RAM ${facts.ramGiB} GiB
- Kernel: ${facts.kernel}; ${facts.distro}
- node ${facts.node}; redis-server ${facts.redis}; ${facts.redisBenchmark}
- cellgate: commit ${facts.revision}
- Load average at start: ${facts.loadavg}
- Pinning: ${PIN ? 'both servers on CPU 0, redis-benchmark on CPU 1 (`taskset`), so client and server do not fight for a core' : 'none'}

## What runs

Both servers on 127.0.0.1, started by the script: cellgate \`${Object.entries(NODE_ENV).map(([k, v]) => `${k}=${v}`).join(' ')} node ${NODE_FLAGS.join(' ')} dist/main.js --port 0 --bind 127.0.0.1 --dir <tmp> --save ''\`,
redis-server \`--save '' --appendonly no --dir <tmp>\`. ${CLIENTS} clients, ${KEYS.toLocaleString('en-US')} random keys,
one calibration/warm-up run per target and pipeline sizing \`-n\` for ≈ ${SECONDS} s, then ${ROUNDS} measured rounds
interleaved (cellgate, Lua, INCR, then reversed). Medians reported. redis-server is FLUSHALLed before each run.

\`\`\`
${commands.join('\n')}
\`\`\`

The Lua script (loaded with SCRIPT LOAD; capacity ${CAPACITY}, ${RATE_PER_S.toFixed(4)} tokens/s = the same limit as
\`CL.THROTTLE key ${MAX_BURST} ${COUNT} ${PERIOD_S} 1\`):

\`\`\`lua
${LUA_TOKEN_BUCKET}
\`\`\`

## Results (medians of ${ROUNDS} rounds)

${resultTable}

${ratioTable}

Targets:

${verdict}

${allMet ? `cellgate meets every target on this machine.` : `**cellgate misses ${missed} of the ${checks.length} targets on this machine**: at pipeline ${p16} it serves
${fmtInt(med.get(`cellgate/${p16}`).rps)} CL.THROTTLE/s against ${fmtInt(med.get(`incr/${p16}`).rps)} INCR/s and ${fmtInt(med.get(`lua/${p16}`).rps)} Lua token-bucket calls/s.
${profile ? 'The CPU profile below shows where its time goes.' : 'Run with BENCH_PROFILE=1 for a CPU profile.'}`}

How to read these numbers:
- ${facts.cores} CPUs for everything: ${PIN ? 'the servers on CPU 0, redis-benchmark on CPU 1' : 'servers and redis-benchmark unpinned'}. redis-benchmark is one
  thread; at pipeline ${p16} against INCR it may be the bottleneck itself, so the INCR figure is a lower bound on
  Redis's ceiling and cellgate / INCR an upper bound.
- cellgate is one Node.js thread (plus V8's GC helper threads${PIN ? ', here confined to the same CPU' : ''}); redis-server is one thread.
- The machine may be shared: load average ${facts.loadavg} at the start, ${endLoad} at the end. The interleaved
  rounds and medians are meant to spread such noise over all targets; "Every run" below shows the spread.

${profile ? `## CPU profile of cellgate under the pipeline-${p16} load

\`node --cpu-prof dist/main.js ...\` while \`${profile.command}\` ran (after a warm-up run);
${fmtInt(profile.result.rps)} rps under the profiler. Top 10 functions by self time
(share of the busy, non-idle samples over the server's whole life, warm-up included; busy
${profile.busyMs.toFixed(0)} ms, idle ${profile.idleMs.toFixed(0)} ms):

${profile.table}

The same self time by script (functions without a script are native code or V8's own buckets):

${profile.fileTable}
` : ''}
## Every run

${table(['target', 'round', 'requests/s', 'p50 ms', 'p99 ms', 'max ms', 'server CPU µs/op', 'seconds'], rawRows)}
`;
    // This script owns the first section (up to the next top-level heading); other benchmarks
    // (ratelimit.mjs, snapshot.mjs) keep theirs after it.
    const previous = existsSync(RESULTS) ? readFileSync(RESULTS, 'utf8') : '';
    const others = previous.search(/^# (?!CL\.THROTTLE benchmark)/m);
    writeFileSync(RESULTS, md.trimEnd() + '\n' + (others === -1 ? '' : '\n' + previous.slice(others)));
    say();
    say(`# wrote ${relative(process.cwd(), RESULTS) || RESULTS}`);
  }
}

main()
  .then(() => {
    killAll();
    process.exit(0);
  })
  .catch((e) => {
    process.stderr.write(`bench: ${e.stack ?? e}\n`);
    killAll();
    process.exit(1);
  });
