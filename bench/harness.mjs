/**
 * What the benchmarks share: servers started on free loopback ports with temp directories (killed at
 * the end, on error, on Ctrl-C and on a global timeout), redis-benchmark runs with the server's CPU
 * per operation from /proc, a minimal RESP client, machine facts, CPU profile summaries, tables.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NODE_ENV, NODE_FLAGS } from './node-flags.mjs';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const env = process.env;
export const CPUS = os.availableParallelism?.() ?? os.cpus().length;
const HAVE_TASKSET = spawnSync('taskset', ['-V']).status === 0;
/** auto: with >= 2 CPUs, servers on CPU 0 and the load generator on CPU 1 (taskset); BENCH_PIN=0: no pinning. */
export const PIN = (env.BENCH_PIN ?? 'auto') !== '0' && CPUS >= 2 && HAVE_TASKSET;
export { NODE_ENV, NODE_FLAGS };

// ---------------------------------------------------------------------------------------------------
// Process bookkeeping: every child is killed on the way out, whatever the way out is.

const children = new Set();
const tempDirs = [];

export function killAll() {
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
/** Kills everything after `seconds` (BENCH_TIMEOUT). */
export function watchdog(seconds) {
  const t = setTimeout(() => {
    process.stderr.write(`bench: timeout after ${seconds}s, stopping servers\n`);
    killAll();
    process.exit(124);
  }, seconds * 1000);
  t.unref();
}

/** A temp dir removed with everything else on the way out. */
export function tempDir(prefix) {
  const d = mkdtempSync(join(os.tmpdir(), prefix));
  tempDirs.push(d);
  return d;
}

/** Runs a benchmark's main(): exit 0 when it resolves, 1 with its stack when it throws; children killed either way. */
export function run(main) {
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
}

export function track(child) {
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;

/**
 * CPU seconds the process has used so far, all its threads: the sum of /proc/<pid>/task/<tid>/schedstat
 * (nanoseconds on CPU, user and system), which is far finer than utime + stime in /proc/<pid>/stat (clock
 * ticks, 10 ms here: ±7% on a 1.5 s run at pipeline 1). Falls back to /proc/<pid>/stat.
 */
export function cpuSeconds(pid) {
  try {
    let ns = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        /* the thread ended meanwhile */
      }
    }
    if (ns > 0) return ns / 1e9;
  } catch {
    /* no schedstat: below */
  }
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

export function pinned(cpu, cmd, args) {
  return PIN ? ['taskset', ['-c', String(cpu), cmd, ...args]] : [cmd, args];
}

/** Stops a child with SIGTERM and waits for it (SIGKILL after 5 s). Resolves with its exit code. */
export function stop(child) {
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

export function freePort() {
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

export function parseReply(buf, i) {
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

export function command(port, args, timeoutMs = 2000) {
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

/**
 * Starts the cellgate build `main` on a free port (--port 0, port read from its JSON ready line).
 * Resolves with {port, child, dir, logs, readyMs} (readyMs: spawn to ready line). `pin: false` leaves
 * it on every CPU (see PIN), for a measure without a client on the other one (a journal load).
 */
export async function startCellgate(main, { nodeArgs = [], args: serverArgs = [], cwd = ROOT, readyTimeoutMs = 10_000, pin = true } = {}) {
  const spawnedAt = performance.now();
  const dir = mkdtempSync(join(os.tmpdir(), 'cellgate-bench-'));
  tempDirs.push(dir);
  const argv = [...NODE_FLAGS, ...nodeArgs, main, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--log-format', 'json', ...serverArgs];
  const [cmd, args] = pin ? pinned(0, process.execPath, argv) : [process.execPath, argv];
  const child = track(spawn(cmd, args, { cwd, env: { ...process.env, ...NODE_ENV }, stdio: ['ignore', 'pipe', 'pipe'] }));
  const logs = [];
  const port = await new Promise((resolve, reject) => {
    let buf = '';
    const t = setTimeout(() => reject(new Error(`cellgate did not start:\n${logs.join('\n')}`)), readyTimeoutMs);
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
  const readyMs = performance.now() - spawnedAt;
  await waitForPong(port, child, 'cellgate');
  return { name: 'cellgate', port, child, dir, logs, readyMs };
}

export async function startRedis() {
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

/** redis-benchmark's arguments; `opts`: {clients [50], keys [100000], auth: [user, password]}. */
export function benchmarkArgs(port, pipeline, requests, cmd, { clients = 50, keys = 100_000, auth } = {}) {
  return [
    '-h', '127.0.0.1', '-p', String(port), '-c', String(clients), '-n', String(requests), '-r', String(keys),
    '-P', String(pipeline), ...(auth ? ['--user', auth[0], '-a', auth[1]] : []), '--precision', '3', '--csv', ...cmd,
  ];
}

export function shellQuote(words) {
  return words.map((w) => (/^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/**
 * Runs redis-benchmark once; resolves with {rps, p50, p99, avg, max, seconds, cpuUsPerOp} (the server's
 * CPU per request when `serverPid` is given).
 */
export function runBenchmark(port, pipeline, requests, cmd, serverPid) {
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
      if (/error/i.test(err.replace(/Warning: Using a password[^\n]*\n?/g, ''))) return reject(new Error(`redis-benchmark reported: ${err.trim()}`));
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
function revision(main) {
  if (main !== undefined && main !== join(ROOT, 'dist', 'main.js')) return `the build at ${main}`;
  const head = spawnSync('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  if (head.status !== 0) return 'unknown (not a git checkout)';
  const dirty = spawnSync('git', ['-C', ROOT, 'status', '--porcelain', '--', 'src'], { encoding: 'utf8' }).stdout.trim();
  return `${head.stdout.trim()}${dirty ? ` with uncommitted changes in src/ (${dirty.split('\n').length} files)` : ''}`;
}

export function machine(main) {
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
    revision: revision(main),
  };
}

// ---------------------------------------------------------------------------------------------------
// CPU profile summary (node --cpu-prof).

/**
 * Summary of a .cpuprofile: the top self-time functions [{name, location, ms, pct}] and self time per
 * script ({file, ms, pct}; native code and V8's own buckets under their names).
 */
export function summarizeProfile(file, top = 10) {
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

export async function profileCellgate(main, cmd, requests, opts = {}) {
  const profDir = mkdtempSync(join(os.tmpdir(), 'cellgate-prof-'));
  tempDirs.push(profDir);
  const server = await startCellgate(main, { nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profDir] });
  await runBenchmark(server.port, 16, Math.round(requests / 3), cmd, undefined, opts); // warm up the JIT first
  const result = await runBenchmark(server.port, 16, requests, cmd, undefined, opts);
  const code = await stop(server.child);
  const files = readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile'));
  if (files.length === 0) throw new Error(`cellgate (exit ${code}) wrote no .cpuprofile`);
  return { result, ...summarizeProfile(join(profDir, files[0])) };
}

// ---------------------------------------------------------------------------------------------------

export const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
export const fmtInt = (x) => Math.round(x).toLocaleString('en-US');
export const fmtMs = (x) => x.toFixed(3);
export const fmtRatio = (x) => `${x.toFixed(2)}×`;

export function table(headers, rows) {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells) => `| ${cells.map((c, i) => String(c).padEnd(widths[i])).join(' | ')} |`;
  return [line(headers), `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`, ...rows.map(line)].join('\n');
}

