#!/usr/bin/env node
/**
 * npm run bench:backend  (= npm run build && node bench/backend.mjs)
 *
 * What does sharing limits through a Redis cost, next to what applications do today? Everything runs on
 * this machine in one run, on loopback, started here and killed at the end (also on error, Ctrl-C and the
 * global timeout). The configurations, one measured run each:
 *
 *   local          3 cellgate sidecars, no backend: each its own keyspace (the ceiling; not shared)
 *   lua            the applications call one redis-server directly: EVALSHA of the classic Lua token
 *                  bucket (bench/lua-token-bucket.mjs, the script bench/throttle.mjs measures): the incumbent
 *   lua-cluster    the same script called directly on the 3-master Cluster `cluster` uses (an ioredis Cluster
 *                  client per connection, EVALSHA with the key): the incumbent on the same Redis as `cluster`
 *   redis          3 sidecars, --backend redis://  (one redis-server), CL.THROTTLE
 *   redis-rl       the same, RL.TOKENBUCKET
 *   cluster        3 sidecars, --backend redis-cluster:// (3 masters, no replicas), CL.THROTTLE
 *   flood          3 sidecars on one redis-server; 90% of the calls on a few hot keys that are refused
 *                  (the same limit, emptied: a token comes back every 60 ms)
 *   flood-quota    the same, the hot keys over an hourly quota (100 per hour, emptied: refused for ~36 s)
 *   hot            3 sidecars on one redis-server; 90% of the calls on a few hot keys that are allowed (a limit
 *                  they never reach), 10% on random keys: every call goes to the backend, and a batch holds
 *                  several calls of one key
 *   <id>-before    with BENCH_COMPARE: redis, cluster and hot again with another build's sidecars (the build
 *                  before a change), run right after their own row
 *   script         diagnostic: the applications call redis-server directly with cellgate's limiter script,
 *                  the EVALSHA a sidecar sends for CL.THROTTLE (captured with MONITOR), on random keys:
 *                  the script's own Redis cost at the load generator's batching
 *
 * The load generator is this process (ioredis, BENCH_CONNECTIONS connections spread over the sidecars,
 * or all to Redis for `lua`, or BENCH_CONNECTIONS Cluster clients for `lua-cluster`, auto-pipelined with BENCH_INFLIGHT requests in flight per connection,
 * random keys out of BENCH_KEYS). Each configuration first checks exactness (300 calls at once, split over
 * the sidecars, on one key whose limit is 100: a shared limit allows exactly 100), then warms up, then
 * measures for BENCH_SECONDS. Reported per configuration: requests/s, p50/p99 latency (as the application
 * sees it), redis-server CPU per request (utime + stime from /proc/<pid>/stat over the measured window,
 * summed over every redis-server process, divided by the requests), the sidecars' CPU per request (the
 * three summed), backend scripts per request (INFO commandstats: eval + evalsha calls) and the sidecars'
 * INFO backend counters.
 *
 * Environment (defaults in brackets):
 *   BENCH_SECONDS [12]       measured seconds per configuration (warm-up: a quarter of it, at most 3 s)
 *   BENCH_CONNECTIONS [12]   load-generator connections (spread evenly over the 3 sidecars)
 *   BENCH_INFLIGHT [16]      requests in flight per connection
 *   BENCH_KEYS [100000]      random keys
 *   BENCH_HOT_KEYS [4]       the flood's hot keys (90% of its calls)
 *   BENCH_BACKEND_TIMEOUT [1000]  the sidecars' --backend-timeout in ms (the default 100 is for production;
 *                            a loaded 2-core machine should not turn decisions into policy answers here)
 *   BENCH_CONFIGS [all]      comma-separated subset, e.g. lua,redis
 *   BENCH_CLUSTER_MASTERS [3]  the Cluster's masters for cluster and lua-cluster; 1: one master serving
 *                            every slot (a diagnostic: cluster mode without the split over three masters)
 *   BENCH_PIN [auto]         auto: with >= 2 CPUs, redis-server on CPU 0, this load generator and the
 *                            sidecars on CPU 1 (taskset); 0: no pinning
 *   BENCH_WRITE [1]          write the "## Shared backend" section of bench/RESULTS.md (0: print only)
 *   BENCH_LATENCY_RATE [10000]  the open-loop latency phase's requests per second (0: none)
 *   BENCH_LATENCY_SECONDS [6]   its length
 *   BENCH_LATENCY_SERIAL [20000]  requests sent one at a time on one connection (0: none)
 *   BENCH_SIDECAR_PROFILE [none]  a directory: every cellgate process runs under `node --cpu-prof` and writes its
 *                            profile there when it stops (bench/cpuprofile-top.mjs reads one), for where the
 *                            sidecars' CPU per request goes
 *   BENCH_TIMEOUT [900]      seconds before everything is killed
 *   BENCH_MAIN [dist/main.js]
 *   BENCH_COMPARE [none]     another build's main.js (a directory with its dist/, a node_modules symlink and its
 *                            package.json), e.g. main before a change: redis, cluster and hot run with it too
 *   BENCH_COMPARE_LABEL [the path]  how that build is named in the table (e.g. its commit)
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { join, relative } from 'node:path';
import { Cluster, Redis } from 'ioredis';
import { LUA_TOKEN_BUCKET } from './lua-token-bucket.mjs';
import { NODE_ENV, NODE_FLAGS } from './node-flags.mjs';
import { CPUS, PIN, ROOT, cpuSeconds, env, machine, pinned, run, shellQuote, stop, table, tempDir, track, watchdog } from './harness.mjs';

const MAIN = process.env.BENCH_MAIN ?? join(ROOT, 'dist', 'main.js');
const RESULTS = join(ROOT, 'bench', 'RESULTS.md');

const SECONDS = Number(env.BENCH_SECONDS ?? 12);
const WARM_S = Math.min(3, SECONDS / 4);
const CONNECTIONS = Number(env.BENCH_CONNECTIONS ?? 12);
const INFLIGHT = Number(env.BENCH_INFLIGHT ?? 16);
const KEYS = Number(env.BENCH_KEYS ?? 100_000);
const HOT_KEYS = Number(env.BENCH_HOT_KEYS ?? 4);
const BACKEND_TIMEOUT = String(env.BENCH_BACKEND_TIMEOUT ?? 1000);
const WRITE = env.BENCH_WRITE !== '0';
const TIMEOUT_S = Number(env.BENCH_TIMEOUT ?? 900);
const COMPARE = env.BENCH_COMPARE ?? null;
const COMPARE_LABEL = env.BENCH_COMPARE_LABEL ?? COMPARE;
/**
 * Latency at the same load: after its closed-loop run, each configuration of LATENCY_CONFIGS is sent
 * LATENCY_RATE requests per second (open loop, below every configuration's capacity here) for
 * LATENCY_SECONDS; p50/p99 of those compare the paths themselves, where the closed loop's mostly
 * measure queueing at saturation. 0 turns it off.
 */
const LATENCY_RATE = Number(env.BENCH_LATENCY_RATE ?? 10_000);
const LATENCY_SECONDS = Number(env.BENCH_LATENCY_SECONDS ?? 6);
const LATENCY_CONFIGS = new Set(['lua', 'lua-cluster', 'redis', 'redis-rl', 'cluster', 'hot']);
/**
 * The path alone: the same configurations then send LATENCY_SERIAL requests one after the other on one
 * connection (one in flight, nothing queued behind it, no other load): the latency a request has
 * when neither side is busy, which the open loop above cannot show once the load generator and three
 * sidecars share one core. 0 turns it off.
 */
const LATENCY_SERIAL = Number(env.BENCH_LATENCY_SERIAL ?? 20_000);
const SIDECARS = 3;
const SIDECAR_PROFILE_DIR = env.BENCH_SIDECAR_PROFILE ?? null;
/**
 * The Cluster's masters: 3, or 1 (a diagnostic: the same cluster-mode server and Cluster clients without
 * the split of each turn's calls over three masters sharing Redis's core).
 */
const CLUSTER_MASTERS = Number(env.BENCH_CLUSTER_MASTERS ?? 3);
if (CLUSTER_MASTERS !== 1 && CLUSTER_MASTERS !== 3) throw new Error('BENCH_CLUSTER_MASTERS is 1 or 3');
/**
 * The targets: requests per Redis CPU-second through the sidecars ≥ 1.5× the direct Lua's on one Redis, ≥ 1×
 * on the Cluster (read against the direct Lua on one Redis, as the target was set, and against the direct
 * Lua on the same Cluster, `lua-cluster`, the like-for-like comparison); the sidecars' CPU per request ≤ 3× local mode's; p99 ≤ the direct Lua's + 1 ms; the
 * flood ≥ 5× fewer backend calls than requests.
 */
const TARGET_PER_REDIS_CORE_VS_LUA = { redis: 1.5, cluster: 1 };
const TARGET_SIDECAR_VS_LOCAL = 3;
const TARGET_P99_OVER_LUA_MS = 1;
const TARGET_FLOOD_SAVING = 5;

// The limit every configuration enforces (the one bench/throttle.mjs uses): burst 100 (capacity 101), 1000 per 60 s.
const MAX_BURST = 100;
const COUNT = 1000;
const PERIOD_S = 60;
const CAPACITY = MAX_BURST + 1;
const RATE_PER_S = COUNT / PERIOD_S;
const THROTTLE_ARGS = [String(MAX_BURST), String(COUNT), String(PERIOD_S), '1'];
const TOKENBUCKET_ARGS = [String(COUNT), String(PERIOD_S * 1000), 'BURST', String(CAPACITY)];
// The exactness check: 300 calls at once on one key allowed 100 per hour (no refill while it runs).
const EXACT_CALLS = 300;
const EXACT_LIMIT = 100;

// ---------------------------------------------------------------------------------------------------
// Processes and their CPU (bench/harness.mjs kills every child on the way out).

watchdog(TIMEOUT_S);
const sumCpu = (pids) => pids.reduce((s, pid) => s + cpuSeconds(pid), 0);

/** Redis on CPU 0 (its own core, as it would have its own host); the application side (load generator, sidecars) on CPU 1. */
const REDIS_CPU = 0;
const APP_CPU = 1;

function canListen(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** A random loopback port in 20000–50000 that is free now (and, for a cluster node, its bus port + 10000 too). */
async function freePort(withBus = false) {
  for (let i = 0; i < 200; i++) {
    const port = 20000 + Math.floor(Math.random() * 30000);
    if ((await canListen(port)) && (!withBus || (await canListen(port + 10000)))) return port;
  }
  throw new Error('no free port found');
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** RESP2: the RL.* replies are arrays (in RESP3, maps that ioredis flattens into name, value pairs). */
function client(port, opts = {}) {
  const c = new Redis({ host: '127.0.0.1', port, protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null, ...opts });
  c.on('error', () => {}); // a failed command rejects its promise; the event would only repeat it
  return c;
}

/** One command on a short-lived connection (control traffic, not measured). */
async function command(port, ...args) {
  const c = client(port);
  try {
    await c.connect();
    return await c.call(...args);
  } finally {
    c.disconnect();
  }
}

async function waitForPong(port, child, what) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${what} exited with code ${child.exitCode} before answering PING`);
    try {
      if ((await command(port, 'PING')) === 'PONG') return;
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) throw new Error(`${what} did not answer PING on port ${port} within 15 s`);
    await sleep(50);
  }
}

/** `field:value` lines of an INFO reply → { field: value } (numbers where they are numbers). */
function parseInfo(text) {
  const out = {};
  for (const line of String(text).split('\r\n')) {
    const i = line.indexOf(':');
    if (i <= 0 || line.startsWith('#')) continue;
    const v = line.slice(i + 1);
    out[line.slice(0, i)] = /^-?\d+(\.\d+)?$/.test(v) ? Number(v) : v;
  }
  return out;
}

/** Script calls (EVAL, EVALSHA and their _RO forms, FCALL) the Redis server has run so far, and the µs it spent in them (its own timing). */
async function scriptCalls(port) {
  const info = String(await command(port, 'INFO', 'commandstats'));
  let calls = 0;
  let usec = 0;
  for (const m of info.matchAll(/^cmdstat_(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro):calls=(\d+),usec=(\d+)/gm)) {
    calls += Number(m[2]);
    usec += Number(m[3]);
  }
  return { calls, usec };
}
const sumStats = (list) => list.reduce((a, b) => ({ calls: a.calls + b.calls, usec: a.usec + b.usec }), { calls: 0, usec: 0 });

// ---------------------------------------------------------------------------------------------------
// Servers.

const redisArgs = (port, dir, extra = []) => [
  '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--loglevel', 'warning', ...extra,
];

async function startRedis(extra = [], cluster = false) {
  for (let attempt = 0; ; attempt++) {
    const port = await freePort(cluster);
    const dir = tempDir('redis-bench-');
    const clusterArgs = cluster ? ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, 'nodes.conf'), '--cluster-node-timeout', '5000'] : [];
    const [cmd, args] = pinned(REDIS_CPU, 'redis-server', redisArgs(port, dir, [...clusterArgs, ...extra]));
    const child = track(spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] }));
    try {
      await waitForPong(port, child, 'redis-server');
      return { port, child, dir };
    } catch (e) {
      await stop(child);
      if (attempt >= 3) throw e;
    }
  }
}

/**
 * Three masters, slots split by `redis-cli --cluster create`, no replicas (or with BENCH_CLUSTER_MASTERS=1
 * one master given every slot, which `--cluster create` refuses); resolves once every node says cluster_state:ok.
 */
async function startCluster() {
  const nodes = [];
  // A node that never met another does not know its own address (CLUSTER SLOTS would name it ""): told here.
  const announce = CLUSTER_MASTERS === 1 ? ['--cluster-announce-ip', '127.0.0.1'] : [];
  for (let i = 0; i < CLUSTER_MASTERS; i++) nodes.push(await startRedis(announce, true));
  const create = CLUSTER_MASTERS === 1
    ? ['-p', String(nodes[0].port), 'CLUSTER', 'ADDSLOTSRANGE', '0', '16383']
    : ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'];
  const r = spawnSync('redis-cli', create, { encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) throw new Error(`redis-cli ${create.join(' ')} failed: ${r.stdout}${r.stderr}`);
  const deadline = Date.now() + 20_000;
  for (const n of nodes) {
    while (parseInfo(await command(n.port, 'CLUSTER', 'INFO')).cluster_state !== 'ok') {
      if (Date.now() > deadline) throw new Error(`cluster node ${n.port} never reached cluster_state:ok`);
      await sleep(100);
    }
  }
  // As printed: the ports are the run's own.
  return { nodes, createCommand: ['redis-cli', ...create.map((w) => (CLUSTER_MASTERS === 1 && w === String(nodes[0].port) ? '<port>' : w))] };
}

/** The sidecar's flags (also printed in RESULTS.md). */
function sidecarArgs(dir, backendArgs) {
  return ['--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--log-format', 'json', ...backendArgs];
}

async function startSidecar(backendArgs, main = MAIN) {
  const dir = tempDir('cellgate-bench-');
  const profile = SIDECAR_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${SIDECAR_PROFILE_DIR}`] : [];
  const [cmd, args] = pinned(APP_CPU, process.execPath, [...NODE_FLAGS, ...profile, main, ...sidecarArgs(dir, backendArgs)]);
  const child = track(spawn(cmd, args, { cwd: ROOT, env: { ...process.env, ...NODE_ENV }, stdio: ['ignore', 'pipe', 'pipe'] }));
  const logs = [];
  const port = await new Promise((resolve, reject) => {
    let buf = '';
    const t = setTimeout(() => reject(new Error(`cellgate did not start:\n${logs.join('\n')}`)), 15_000);
    const onLine = (line) => {
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
    };
    child.stdout.on('data', (chunk) => {
      buf += chunk.toString('utf8');
      let nl;
      while ((nl = buf.indexOf('\n')) !== -1) {
        onLine(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    });
    child.stderr.on('data', (c) => logs.push(c.toString('utf8').trimEnd()));
    child.on('exit', (code) => {
      clearTimeout(t);
      reject(new Error(`cellgate exited with code ${code}:\n${logs.join('\n')}`));
    });
  });
  await waitForPong(port, child, 'cellgate');
  return { port, child, dir, logs };
}

/** Waits until INFO backend says backend_state:up (the first connection is made in the background). */
async function waitBackendUp(sidecar) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const info = parseInfo(await command(sidecar.port, 'INFO', 'backend'));
    if (info.backend_state === 'up') return;
    if (Date.now() > deadline) throw new Error(`sidecar ${sidecar.port}: backend_state ${info.backend_state} after 15 s:\n${sidecar.logs.join('\n')}`);
    await sleep(50);
  }
}

async function backendInfo(sidecars) {
  const sum = {};
  for (const s of sidecars) {
    const info = parseInfo(await command(s.port, 'INFO', 'backend'));
    for (const [k, v] of Object.entries(info)) if (typeof v === 'number') sum[k] = (sum[k] ?? 0) + v;
    // backend_batch_sizes: `1=5,2-3=0,...` (a build without batches has none).
    for (const part of String(info.backend_batch_sizes ?? '').split(',')) {
      const [label, n] = part.split('=');
      if (n !== undefined) sum[`batch ${label}`] = (sum[`batch ${label}`] ?? 0) + Number(n);
    }
  }
  return sum;
}

/** Whether this build knows the `backend` option (before the integration it stops at the unknown flag). */
function buildHasBackend() {
  const r = spawnSync(process.execPath, [MAIN, '--help'], { encoding: 'utf8', timeout: 10_000 });
  return /\bbackend-unavailable\b/.test(`${r.stdout}${r.stderr}`);
}

/**
 * The EVALSHA a sidecar sends for `CL.THROTTLE <key> 100 1000 60 1`, read from redis-server's MONITOR:
 * { sha, argv } (the script's ARGV; the key is the only KEYS entry).
 */
async function captureScriptCall(redisPort) {
  const sidecar = await startSidecar(['--backend', `redis://127.0.0.1:${redisPort}`]);
  try {
    await waitBackendUp(sidecar);
    await command(sidecar.port, 'CL.THROTTLE', 'probe:first', ...THROTTLE_ARGS); // loads the script (EVALSHA, then EVAL on NOSCRIPT)
    const monitor = net.connect(redisPort, '127.0.0.1');
    let text = '';
    monitor.on('data', (c) => (text += c.toString('latin1')));
    await new Promise((r) => monitor.once('connect', r));
    monitor.write('MONITOR\r\n');
    while (!text.includes('+OK')) await sleep(10);
    await command(sidecar.port, 'CL.THROTTLE', 'probe:key', ...THROTTLE_ARGS);
    const deadline = Date.now() + 5000;
    let line;
    while (!(line = text.split('\r\n').find((l) => /"evalsha"/i.test(l) && l.includes('probe:key')))) {
      if (Date.now() > deadline) throw new Error(`no EVALSHA seen by MONITOR:\n${text}`);
      await sleep(10);
    }
    monitor.destroy();
    const words = [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) =>
      m[1].replace(/\\x([0-9a-f]{2})/gi, (_, h) => String.fromCharCode(parseInt(h, 16))).replace(/\\(.)/g, (_, ch) => ({ n: '\n', r: '\r', t: '\t' })[ch] ?? ch));
    const at = words.findIndex((w) => w.toLowerCase() === 'evalsha');
    // A batch of one call (no KEYS: header, the call's element, its key), or (a build before
    // batches) one call with its key as KEYS[1]. Binary: sent back as the same bytes.
    const bytes = (w) => Buffer.from(w, 'latin1');
    if (words[at + 2] === '0' && words.length === at + 6) {
      return { sha: words[at + 1], argsFor: (key) => ['0', bytes(words[at + 3]), bytes(words[at + 4]), key] };
    }
    if (words[at + 2] !== '1') throw new Error(`unexpected script call: ${line}`);
    const argv = words.slice(at + 4).map(bytes);
    return { sha: words[at + 1], argsFor: (key) => ['1', key, ...argv] };
  } finally {
    await stop(sidecar.child);
  }
}

// ---------------------------------------------------------------------------------------------------
// The load generator.

const randomKey = () => `key:${Math.floor(Math.random() * KEYS)}`;

/**
 * Keeps INFLIGHT requests in flight on each connection for `seconds` and counts them; with
 * `measure`, latencies go into a 1 µs histogram and the window's CPU and counters are read around it.
 */
async function drive(conns, nextArgs, isRefused, seconds, window) {
  const hist = window ? new Uint32Array(1_000_001) : null;
  let done = 0;
  let refused = 0;
  let errors = 0;
  let firstError = null;
  let running = true;
  const before = window ? await window.before() : null;
  const started = performance.now();
  const loops = conns.map(
    (conn) =>
      new Promise((resolve) => {
        let inflight = 0;
        const launch = () => {
          inflight++;
          const t0 = performance.now();
          conn.call(...nextArgs()).then(
            (reply) => {
              done++;
              if (hist !== null) hist[Math.min(1_000_000, Math.round((performance.now() - t0) * 1000))]++;
              if (isRefused(reply)) refused++;
              settle();
            },
            (e) => {
              errors++;
              firstError ??= e;
              settle();
            },
          );
        };
        const settle = () => {
          inflight--;
          if (running) launch();
          else if (inflight === 0) resolve();
        };
        for (let i = 0; i < INFLIGHT; i++) launch();
      }),
  );
  await sleep(seconds * 1000);
  const counted = done;
  const elapsed = (performance.now() - started) / 1000;
  const after = window ? await window.after() : null;
  running = false;
  await Promise.all(loops);
  return { requests: counted, elapsed, refused, errors, firstError, hist, before, after };
}

/**
 * Sends `rate` requests per second for `seconds`, round-robin over the connections, whatever the
 * replies' pace (open loop: a slow reply does not slow the sending); the latency of each is from the
 * moment it was due (so a late send counts against the path, not hidden by it).
 */
async function driveAtRate(conns, nextArgs, rate, seconds) {
  const hist = new Uint32Array(1_000_001);
  const total = Math.round(rate * seconds);
  let sent = 0;
  let settled = 0;
  let errors = 0;
  const started = performance.now();
  await new Promise((resolve) => {
    const finish = () => {
      if (++settled === total) resolve();
    };
    const tick = () => {
      const due = Math.min(total, Math.floor(((performance.now() - started) / 1000) * rate));
      while (sent < due) {
        const dueAt = started + (sent / rate) * 1000;
        conns[sent % conns.length].call(...nextArgs()).then(
          () => {
            hist[Math.min(1_000_000, Math.round((performance.now() - dueAt) * 1000))]++;
            finish();
          },
          () => {
            errors++;
            finish();
          },
        );
        sent++;
      }
      if (sent < total) setTimeout(tick, 1);
    };
    tick();
  });
  const answered = total - errors;
  return { rate: total / ((performance.now() - started) / 1000), ...latencies(hist, answered), errors };
}

/**
 * Sends `count` requests on one connection, each after the reply to the one before, after a tenth as
 * many unmeasured (so that the garbage of the loaded phases before is collected outside the window).
 */
async function driveSerially(conn, nextArgs, count) {
  const hist = new Uint32Array(1_000_001);
  let errors = 0;
  for (let i = 0; i < count / 10; i++) await conn.call(...nextArgs()).catch(() => {});
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    try {
      await conn.call(...nextArgs());
      hist[Math.min(1_000_000, Math.round((performance.now() - t0) * 1000))]++;
    } catch {
      errors++;
    }
  }
  const answered = count - errors;
  return { requests: count, ...latencies(hist, answered), errors };
}

/** p50, p99 and p99.9 in ms of a 1 µs histogram of `total` latencies. */
function latencies(hist, total) {
  return { p50: percentile(hist, total, 0.5), p99: percentile(hist, total, 0.99), p999: percentile(hist, total, 0.999) };
}

function percentile(hist, total, q) {
  const want = Math.ceil(total * q);
  let seen = 0;
  for (let us = 0; us < hist.length; us++) {
    seen += hist[us];
    if (seen >= want) return us / 1000;
  }
  return NaN;
}

async function connectAll(ports) {
  const conns = [];
  for (let i = 0; i < CONNECTIONS; i++) {
    const c = client(ports[i % ports.length], { enableAutoPipelining: true });
    await c.connect();
    conns.push(c);
  }
  return conns;
}

/**
 * CONNECTIONS ioredis Cluster clients on the Cluster (each with a connection to every master, auto-pipelined
 * per master), as an application calling the Cluster directly has: each request goes to its key's master.
 */
async function connectCluster(ports) {
  const conns = [];
  for (let i = 0; i < CONNECTIONS; i++) {
    const c = new Cluster(ports.map((port) => ({ host: '127.0.0.1', port })), {
      lazyConnect: true, enableAutoPipelining: true, enableOfflineQueue: true, clusterRetryStrategy: () => null,
      redisOptions: { protocol: 2, maxRetriesPerRequest: 0 },
    });
    c.on('error', () => {});
    await c.connect();
    conns.push(c);
  }
  return conns;
}

/** CL.THROTTLE and RL.* (RESP2) answer `limited` first; the Lua script answers {allowed, tokens}. */
const refusedBy = (c) => (c.id === 'script' ? () => false : c.direct ? (reply) => reply[0] === 0 : (reply) => reply[0] === 1);

/** EXACT_CALLS calls at once on one key through the given connections (round-robin): how many were allowed. */
async function exactness(conns, args) {
  const replies = await Promise.allSettled(Array.from({ length: EXACT_CALLS }, (_, i) => conns[i % conns.length].call(...args)));
  const failed = replies.find((r) => r.status === 'rejected');
  if (failed) throw new Error(`exactness check: ${args.join(' ')} → ${failed.reason.message}`);
  return replies.filter((r) => (args[0] === 'EVALSHA' ? r.value[0] === 1 : r.value[0] === 0)).length;
}

/** The sizes INFO backend_batch_sizes counts batches by (src/backend/batch-stats.ts). */
const BATCH_LABELS = ['1', '2-3', '4-7', '8-15', '16-31', '32-63', '64-127', '128-255', '256'];

/** The hot configuration's limit, which its keys never reach in a run (a billion per minute). */
const ALLOWED_ARGS_TEXT = '1000000000 1000000000 60 1';

// ---------------------------------------------------------------------------------------------------
// Machine facts and formatting.

/** The harness's machine facts, and the ioredis version the load generator and the sidecars use. */
function machineFacts() {
  return { ...machine(process.env.BENCH_MAIN), ioredis: JSON.parse(readFileSync(join(ROOT, 'node_modules', 'ioredis', 'package.json'), 'utf8')).version };
}

const fmtInt = (x) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '—');
const fmtMs = (x) => (Number.isFinite(x) ? x.toFixed(3) : '—');
const fmtUs = (x) => (Number.isFinite(x) ? x.toFixed(2) : '—');

// ---------------------------------------------------------------------------------------------------

async function main() {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run npm run build (npm run bench:backend does)`);
  if (spawnSync('redis-server', ['--version']).error) throw new Error('redis-server not found (apt-get install redis-server)');
  // The load generator (this process, every thread) shares CPU 1 with the sidecars; Redis has CPU 0.
  if (PIN) spawnSync('taskset', ['-a', '-p', '-c', String(APP_CPU), String(process.pid)], { stdio: 'ignore' });
  const started = new Date();
  const facts = machineFacts();
  const invocation = `${Object.entries(env).filter(([k]) => k.startsWith('BENCH_')).map(([k, v]) => `${k}=${shellQuote([v])} `).join('')}node bench/backend.mjs`;
  const say = (s = '') => process.stdout.write(s + '\n');
  say(`# ${invocation}   (npm run bench:backend)`);
  say(`# ${started.toISOString()}  ${facts.cpu}, ${facts.cores} CPUs, ${facts.ramGiB} GiB, ${facts.kernel}, ${facts.distro}`);
  say(`# node ${facts.node}, redis-server ${facts.redis}, ioredis ${facts.ioredis}, load average ${facts.loadavg}`);
  say(`# cellgate ${facts.revision}`);
  say(`# pinning: ${PIN ? `redis-server on CPU ${REDIS_CPU}; load generator and sidecars on CPU ${APP_CPU} (taskset)` : 'none'}`);

  const hasBackend = buildHasBackend();
  if (!hasBackend) say('# this build has no backend option: only the local and lua configurations run');
  const wanted = new Set((env.BENCH_CONFIGS ?? 'local,lua,lua-cluster,script,redis,redis-rl,cluster,flood,flood-quota,hot').split(','));

  const redis = await startRedis();
  const sha = await command(redis.port, 'SCRIPT', 'LOAD', LUA_TOKEN_BUCKET);
  let cluster = null;

  const throttle = () => ['CL.THROTTLE', randomKey(), ...THROTTLE_ARGS];
  const script = wanted.has('script') && hasBackend ? await captureScriptCall(redis.port) : null;
  const QUOTA_ARGS = ['99', '100', '3600', '1']; // 100 per hour, burst 100
  const hot = (name, args) => () => (Math.random() < 0.9 ? ['CL.THROTTLE', `${name}:${Math.floor(Math.random() * HOT_KEYS)}`, ...args] : throttle());
  // A limit the hot keys never reach in a run: a billion per minute, burst a billion.
  const ALLOWED_ARGS = ALLOWED_ARGS_TEXT.split(' ');
  const mainConfigs = [
    { id: 'local', label: '3 sidecars, local (no backend; not shared)', backend: null, next: throttle,
      exact: ['CL.THROTTLE', 'exact:check', String(EXACT_LIMIT - 1), '1', '3600', '1'] },
    { id: 'lua', label: 'apps → Redis, Lua token bucket (EVALSHA)', direct: true,
      next: () => ['EVALSHA', sha, '1', randomKey(), String(CAPACITY), String(RATE_PER_S), '1'],
      exact: ['EVALSHA', sha, '1', 'exact:check', String(EXACT_LIMIT), String(1 / 3600), '1'] },
    { id: 'lua-cluster', label: `apps → ${CLUSTER_MASTERS}-master Cluster, Lua token bucket (EVALSHA)`, direct: true, redis: 'cluster',
      next: () => ['EVALSHA', sha, '1', randomKey(), String(CAPACITY), String(RATE_PER_S), '1'],
      exact: ['EVALSHA', sha, '1', 'exact:check', String(EXACT_LIMIT), String(1 / 3600), '1'] },
    { id: 'script', label: "apps → Redis, cellgate's script, one call per run (EVALSHA; diagnostic)", direct: true, exact: null,
      next: () => ['EVALSHA', script.sha, ...script.argsFor(`cellgate:${randomKey()}`)] },
    { id: 'redis', label: '3 sidecars → 1 Redis, CL.THROTTLE', backend: 'redis', next: throttle,
      exact: ['CL.THROTTLE', 'exact:check', String(EXACT_LIMIT - 1), '1', '3600', '1'] },
    { id: 'redis-rl', label: '3 sidecars → 1 Redis, RL.TOKENBUCKET', backend: 'redis', next: () => ['RL.TOKENBUCKET', randomKey(), ...TOKENBUCKET_ARGS],
      exact: ['RL.TOKENBUCKET', 'exact:check', '1', '3600000', 'BURST', String(EXACT_LIMIT)] },
    { id: 'cluster', label: `3 sidecars → ${CLUSTER_MASTERS}-master Cluster, CL.THROTTLE`, backend: 'cluster', next: throttle,
      exact: ['CL.THROTTLE', 'exact:check', String(EXACT_LIMIT - 1), '1', '3600', '1'] },
    { id: 'flood', label: 'flood: 3 sidecars → 1 Redis, 90% on 4 hot keys (a token every 60 ms)', backend: 'redis',
      hot: { name: 'hot', args: THROTTLE_ARGS, drain: CAPACITY }, next: hot('hot', THROTTLE_ARGS),
      exact: ['CL.THROTTLE', 'exact:check', String(EXACT_LIMIT - 1), '1', '3600', '1'] },
    { id: 'flood-quota', label: 'flood: 3 sidecars → 1 Redis, 90% on 4 hot keys (over an hourly quota)', backend: 'redis',
      hot: { name: 'hotq', args: QUOTA_ARGS, drain: 100 }, next: hot('hotq', QUOTA_ARGS),
      exact: ['CL.THROTTLE', 'exact:check', String(EXACT_LIMIT - 1), '1', '3600', '1'] },
    { id: 'hot', label: `hot: 3 sidecars → 1 Redis, 90% on ${HOT_KEYS} hot keys, allowed`, backend: 'redis', next: hot('hota', ALLOWED_ARGS),
      exact: ['CL.THROTTLE', 'exact:check', String(EXACT_LIMIT - 1), '1', '3600', '1'] },
  ];
  // The build before a change, right after each of its rows (the machine's load drifts less in between).
  const configs = mainConfigs.flatMap((c) => (COMPARE !== null && ['redis', 'cluster', 'hot'].includes(c.id)
    ? [c, { ...c, id: `${c.id}-before`, label: `${c.label} (${COMPARE_LABEL})`, main: COMPARE, before: c.id }]
    : [c])).filter((c) => wanted.has(c.before ?? c.id) && (c.id === 'script' ? script !== null : c.direct || c.backend === null || hasBackend));

  const commands = new Map(); // what ran, for RESULTS.md
  commands.set('redis', shellQuote([...(PIN ? ['taskset', '-c', String(REDIS_CPU)] : []), 'redis-server', ...redisArgs('<port>', '<tmp>')]));

  const results = [];
  for (const c of configs) {
    await command(redis.port, 'FLUSHALL');
    let backendArgs = [];
    if (c.backend === 'redis') backendArgs = ['--backend', `redis://127.0.0.1:${redis.port}`, '--backend-timeout', BACKEND_TIMEOUT];
    // The Cluster: the sidecars' backend for `cluster`, the applications' Redis for `lua-cluster`.
    const onCluster = c.backend === 'cluster' || c.redis === 'cluster';
    if (onCluster) {
      cluster ??= await startCluster();
      for (const n of cluster.nodes) {
        await command(n.port, 'FLUSHALL');
        await command(n.port, 'SCRIPT', 'LOAD', LUA_TOKEN_BUCKET);
      }
      commands.set('cluster', [
        `${CLUSTER_MASTERS} × ${shellQuote([...(PIN ? ['taskset', '-c', String(REDIS_CPU)] : []), 'redis-server', ...redisArgs('<port>', '<tmp>', ['--cluster-enabled', 'yes', '--cluster-config-file', '<tmp>/nodes.conf', '--cluster-node-timeout', '5000'])])}`,
        shellQuote(cluster.createCommand.map((w) => w.replace(/^127\.0\.0\.1:\d+$/, '127.0.0.1:<port>'))),
      ].join('\n'));
    }
    if (c.backend === 'cluster') {
      backendArgs = ['--backend', `redis-cluster://${cluster.nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`, '--backend-timeout', BACKEND_TIMEOUT];
    }
    const sidecars = [];
    if (!c.direct) {
      for (let i = 0; i < SIDECARS; i++) sidecars.push(await startSidecar(backendArgs, c.main));
      if (c.backend !== null) for (const s of sidecars) await waitBackendUp(s);
      const shown = backendArgs.map((w) => w.replace(/127\.0\.0\.1:\d+/g, '127.0.0.1:<port>'));
      commands.set(`sidecar ${c.backend ?? 'local'}`, `3 × ${shellQuote([...(PIN ? ['taskset', '-c', String(APP_CPU)] : []), ...Object.entries(NODE_ENV).map(([k, v]) => `${k}=${v}`), 'node', ...NODE_FLAGS, 'dist/main.js', ...sidecarArgs('<tmp>', shown)])}`);
    }
    const redisPids = onCluster ? cluster.nodes.map((n) => n.child.pid) : c.backend === null && !c.direct ? [] : [redis.child.pid];
    const redisPorts = onCluster ? cluster.nodes.map((n) => n.port) : [redis.port];
    const sidecarPids = sidecars.map((s) => s.child.pid);
    const conns = c.redis === 'cluster' ? await connectCluster(redisPorts) : await connectAll(c.direct ? [redis.port] : sidecars.map((s) => s.port));

    const allowedOfExact = c.exact === null ? NaN : await exactness(conns, c.exact);
    if (c.hot) {
      // Empty the hot buckets first: from then on they refuse, and each refusal stays true until its retry time.
      for (let k = 0; k < HOT_KEYS; k++) await conns[0].call('CL.THROTTLE', `${c.hot.name}:${k}`, ...c.hot.args.slice(0, 3), String(c.hot.drain));
    }
    await drive(conns, c.next, refusedBy(c), WARM_S, null);

    const counters = async () => ({
      redisCpu: redisPids.length ? sumCpu(redisPids) : NaN,
      sidecarCpu: sidecarPids.length ? sumCpu(sidecarPids) : NaN,
      genCpu: process.cpuUsage(),
      scripts: c.backend === null && !c.direct ? null : sumStats(await Promise.all(redisPorts.map(scriptCalls))),
      backend: c.backend ? await backendInfo(sidecars) : null,
    });
    const run = await drive(conns, c.next, refusedBy(c), SECONDS, { before: counters, after: counters });
    const timed = LATENCY_CONFIGS.has(c.before ?? c.id);
    const atRate = LATENCY_RATE > 0 && timed ? await driveAtRate(conns, c.next, LATENCY_RATE, LATENCY_SECONDS) : null;
    const serial = LATENCY_SERIAL > 0 && timed ? await driveSerially(conns[0], c.next, LATENCY_SERIAL) : null;
    for (const conn of conns) conn.disconnect();
    for (const s of sidecars) await stop(s.child);

    const { before: b, after: a, requests } = run;
    const total = run.hist.reduce((x, y) => x + y, 0);
    const genCpuS = (a.genCpu.user - b.genCpu.user + a.genCpu.system - b.genCpu.system) / 1e6;
    const d = (k) => (a.backend && b.backend ? (a.backend[k] ?? 0) - (b.backend[k] ?? 0) : NaN);
    const r = {
      ...c,
      allowedOfExact,
      requests,
      rps: requests / run.elapsed,
      p50: percentile(run.hist, total, 0.5),
      p99: percentile(run.hist, total, 0.99),
      redisUsPerOp: ((a.redisCpu - b.redisCpu) * 1e6) / requests,
      sidecarUsPerOp: ((a.sidecarCpu - b.sidecarCpu) * 1e6) / requests,
      genUsPerOp: (genCpuS * 1e6) / requests,
      scripts: a.scripts ? a.scripts.calls - b.scripts.calls : NaN,
      scriptUs: a.scripts ? (a.scripts.usec - b.scripts.usec) / Math.max(1, a.scripts.calls - b.scripts.calls) : NaN,
      backendCalls: d('backend_calls'),
      cacheHits: d('backend_cache_hits'),
      policy: d('backend_policy_decisions'),
      timeouts: d('backend_timeouts'),
      backendErrors: d('backend_errors'),
      refusedShare: run.refused / Math.max(1, run.requests),
      batches: d('backend_batches'),
      batchedCalls: d('backend_batched_calls'),
      batchSizes: BATCH_LABELS.map((l) => d(`batch ${l}`)),
      errors: run.errors,
      firstError: run.firstError,
      atRate,
      serial,
    };
    r.perRedisCore = 1e6 / r.redisUsPerOp;
    results.push(r);
    say(`${c.id.padEnd(9)} ${fmtInt(r.rps).padStart(9)} req/s  p50 ${fmtMs(r.p50)} ms  p99 ${fmtMs(r.p99)} ms  redis ${fmtUs(r.redisUsPerOp)} µs/op (script ${fmtUs(r.scriptUs)})  sidecars ${fmtUs(r.sidecarUsPerOp)} µs/op  generator ${fmtUs(r.genUsPerOp)} µs/op  ` +
      `scripts/req ${Number.isFinite(r.scripts) ? (r.scripts / requests).toFixed(3) : '—'}  exact ${Number.isFinite(allowedOfExact) ? `${allowedOfExact}/${EXACT_CALLS}` : "—"}  errors ${r.errors}${r.firstError ? ` (${r.firstError.message})` : ''}`);
  }
  await stop(redis.child);
  if (cluster) for (const n of cluster.nodes) await stop(n.child);

  // ---- the report
  const lua = results.find((r) => r.id === 'lua');
  const luaCluster = results.find((r) => r.id === 'lua-cluster');
  const rows = results.map((r) => [
    r.label,
    fmtInt(r.rps),
    fmtMs(r.p50),
    fmtMs(r.p99),
    fmtUs(r.redisUsPerOp),
    fmtUs(r.scriptUs),
    fmtInt(r.perRedisCore),
    fmtUs(r.sidecarUsPerOp),
    Number.isFinite(r.scripts) ? (r.scripts / r.requests).toFixed(3) : '—',
    Number.isFinite(r.allowedOfExact) ? `${r.allowedOfExact} of ${EXACT_CALLS}` : '—',
    r.errors + (Number.isFinite(r.policy) ? r.policy : 0),
  ]);
  const resultTable = table(
    ['configuration', 'requests/s', 'p50 ms', 'p99 ms', 'Redis CPU µs/req', 'in the script µs/script', 'req per Redis CPU-s', 'sidecars CPU µs/req', 'scripts/req', `allowed (limit ${EXACT_LIMIT})`, 'errors + policy answers'],
    rows,
  );
  const checks = [];
  const local = results.find((r) => r.id === 'local');
  for (const r of results.filter((x) => x.backend && !x.hot && !x.before)) {
    const target = TARGET_PER_REDIS_CORE_VS_LUA[r.backend];
    if (lua) {
      const ratio = r.perRedisCore / lua.perRedisCore;
      checks.push([`${r.label}: requests per Redis CPU-second / the direct Lua's on one Redis`, `${ratio.toFixed(2)}×`, `≥ ${target}×`, ratio >= target]);
    }
    // The Cluster against the same script on the same three masters: what the sidecars change there.
    if (luaCluster && r.backend === 'cluster') {
      const ratio = r.perRedisCore / luaCluster.perRedisCore;
      checks.push([`${r.label}: requests per Redis CPU-second / the direct Lua's on the same Cluster`, `${ratio.toFixed(2)}×`, `≥ ${target}×`, ratio >= target]);
    }
    if (lua) {
      if (r.atRate && lua.atRate) {
        const over = r.atRate.p99 - lua.atRate.p99;
        checks.push([`${r.label}: p99 at ${fmtInt(LATENCY_RATE)} req/s − the direct Lua's at the same rate`, `${over.toFixed(3)} ms`, `≤ ${TARGET_P99_OVER_LUA_MS} ms`, over <= TARGET_P99_OVER_LUA_MS]);
      } else checks.push([`${r.label}: p99 − the direct Lua's p99 (closed loop, saturated)`, `${(r.p99 - lua.p99).toFixed(3)} ms`, `≤ ${TARGET_P99_OVER_LUA_MS} ms`, r.p99 - lua.p99 <= TARGET_P99_OVER_LUA_MS]);
      if (r.serial && lua.serial) {
        const over = r.serial.p99 - lua.serial.p99;
        checks.push([`${r.label}: p99 one request at a time − the direct Lua's the same way`, `${over.toFixed(3)} ms`, `≤ ${TARGET_P99_OVER_LUA_MS} ms`, over <= TARGET_P99_OVER_LUA_MS]);
      }
    }
    if (local) {
      const ratio = r.sidecarUsPerOp / local.sidecarUsPerOp;
      checks.push([`${r.label}: sidecars' CPU per request / local mode's`, `${ratio.toFixed(2)}×`, `≤ ${TARGET_SIDECAR_VS_LOCAL}×`, ratio <= TARGET_SIDECAR_VS_LOCAL]);
    }
    const exact = r.allowedOfExact === EXACT_LIMIT && r.errors === 0 && r.policy === 0 && r.backendErrors === 0;
    checks.push([`${r.label}: exact (${EXACT_CALLS} calls at once → ${EXACT_LIMIT} allowed; no errors, no policy answers)`, `${r.allowedOfExact} allowed, ${r.errors} errors, ${r.policy} policy answers`, `${EXACT_LIMIT}, 0, 0`, exact]);
  }
  const floods = results.filter((r) => r.hot);
  let floodTable = '';
  if (floods.length) {
    for (const f of floods) {
      const saving = f.requests / f.scripts;
      checks.push([`${f.label}: requests / backend scripts`, `${saving.toFixed(1)}×`, `≥ ${TARGET_FLOOD_SAVING}×`, saving >= TARGET_FLOOD_SAVING]);
    }
    floodTable = table(
      ['flood', 'requests', 'refused', 'backend scripts (Redis INFO commandstats)', 'sidecars backend_calls', 'sidecars backend_cache_hits', 'requests / scripts'],
      floods.map((f) => [f.id, fmtInt(f.requests), `${(f.refusedShare * 100).toFixed(1)}%`, fmtInt(f.scripts), fmtInt(f.backendCalls), fmtInt(f.cacheHits), `${(f.requests / f.scripts).toFixed(1)}×`]),
    );
  }
  const batched = results.filter((r) => r.backend);
  const batchTable = table(
    ['configuration', 'scripts/req', 'batches', 'calls per batch', ...BATCH_LABELS.map((l) => `size ${l}`)],
    batched.map((r) => [r.label, Number.isFinite(r.scripts) ? (r.scripts / r.requests).toFixed(3) : '—',
      r.batches > 0 ? fmtInt(r.batches) : '—', r.batches > 0 ? (r.batchedCalls / r.batches).toFixed(1) : '—',
      ...r.batchSizes.map((n) => (r.batches > 0 ? `${((n / r.batches) * 100).toFixed(1)}%` : '—'))]),
  );
  const timed = results.filter((r) => r.atRate || r.serial);
  const orDash = (x, f) => (x ? f(x) : '—');
  const latencyTable = timed.length === 0 ? '' : table(
    ['configuration', 'sent req/s', 'p50 ms', 'p99 ms', 'p99.9 ms', 'errors', 'one at a time: p50 ms', 'p99 ms', 'p99.9 ms', 'errors'],
    timed.map((r) => [r.label, orDash(r.atRate, (x) => fmtInt(x.rate)), orDash(r.atRate, (x) => fmtMs(x.p50)), orDash(r.atRate, (x) => fmtMs(x.p99)),
      orDash(r.atRate, (x) => fmtMs(x.p999)), orDash(r.atRate, (x) => x.errors), orDash(r.serial, (x) => fmtMs(x.p50)), orDash(r.serial, (x) => fmtMs(x.p99)),
      orDash(r.serial, (x) => fmtMs(x.p999)), orDash(r.serial, (x) => x.errors)]),
  );
  const verdict = checks.map(([what, value, target, met]) => `- ${what}: ${value} (target ${target}): ${met ? 'met' : '**missed**'}`).join('\n');
  const endLoad = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  say();
  say(resultTable);
  if (floodTable) {
    say();
    say(floodTable);
  }
  say();
  say(batchTable);
  if (latencyTable) {
    say();
    say(latencyTable);
  }
  say();
  say(verdict);

  if (WRITE) {
    const md = `## Shared backend

Produced by \`npm run bench:backend\` (\`${invocation}\`) on ${started.toISOString()} (${((Date.now() - started.getTime()) / 1000).toFixed(0)} s).
How the backend mode works and what it guarantees: [docs/backend.md](../docs/backend.md).

### Machine

- CPU: ${facts.cpu}, ${facts.cores} CPUs available; RAM ${facts.ramGiB} GiB
- Kernel: ${facts.kernel}; ${facts.distro}
- node ${facts.node}; redis-server ${facts.redis}; ioredis ${facts.ioredis} (the load generator)
- cellgate: commit ${facts.revision}
- Load average at start: ${facts.loadavg}; at the end: ${endLoad}
- Pinning: ${PIN ? `every redis-server on CPU ${REDIS_CPU} (its own core, as Redis would have its own host); the load generator (this script, all its threads: \`taskset -a -p -c ${APP_CPU}\`) and the three sidecars on CPU ${APP_CPU} (\`taskset -c ${APP_CPU}\`), as the applications and their sidecars share their hosts` : 'none'}

### What runs

Everything on 127.0.0.1, started by the script:

\`\`\`
${[...commands.values()].join('\n')}
\`\`\`

The load generator: ${CONNECTIONS} ioredis connections (\`enableAutoPipelining\`), spread evenly over the three
sidecars (all to redis-server for the direct Lua; for the direct Lua on the Cluster, ${CONNECTIONS} ioredis Cluster clients,
each with a connection to every master, a request going to its key's master), ${INFLIGHT} requests in flight on each, random keys out of
${KEYS.toLocaleString('en-US')}; ${WARM_S} s warm-up, then ${SECONDS} s measured per configuration. The limit everywhere is
\`CL.THROTTLE key:<n> ${THROTTLE_ARGS.join(' ')}\` (burst ${MAX_BURST}, ${COUNT} per ${PERIOD_S} s), \`RL.TOKENBUCKET key:<n> ${TOKENBUCKET_ARGS.join(' ')}\`
for RL.*, and for the incumbent \`EVALSHA <sha> 1 key:<n> ${CAPACITY} ${RATE_PER_S} 1\` of the Lua token bucket in
bench/lua-token-bucket.mjs (the script bench/throttle.mjs measures). The floods send 90% of their calls to
${HOT_KEYS} hot keys, emptied before the run so that they refuse, and 10% to random keys: \`flood\` with the same limit
(${COUNT} per ${PERIOD_S} s: a token comes back every ${(PERIOD_S * 1000 / COUNT).toFixed(0)} ms, so each cached refusal lasts at most that long),
\`flood-quota\` with the hot keys over an hourly quota (\`CL.THROTTLE hotq:<k> 99 100 3600 1\`: refused for ~36 s).
\`hot\` sends 90% of its calls to ${HOT_KEYS} hot keys that are allowed (\`CL.THROTTLE hota:<k> ${ALLOWED_ARGS_TEXT}\`: a limit
they never reach), so every call goes to the backend, and a batch carries several calls of each hot key.${COMPARE ? `
Rows marked (${COMPARE_LABEL}) ran the same configuration right after, with the sidecars of that build
(\`BENCH_COMPARE=${COMPARE}\`): the build before batching.` : ''}
\`script\` is a diagnostic: the load generator sends redis-server the very EVALSHA a sidecar sends for
\`CL.THROTTLE key:<n> ${THROTTLE_ARGS.join(' ')}\` alone in its turn (a batch of one call; captured with MONITOR), on random
keys: the cost of cellgate's script itself for one call per run, without the sidecars and without batching.
Before each run, ${EXACT_CALLS} calls at once on one key allowed ${EXACT_LIMIT} per hour, round-robin over the connections
(so over the three sidecars): a shared, exact limit allows exactly ${EXACT_LIMIT}.

CPU per request: utime + stime (\`/proc/<pid>/stat\`) over the measured window ÷ the requests answered in it;
"Redis" sums every redis-server process (three for the cluster), "sidecars" the three cellgate processes.
"Requests per Redis CPU-second" is 10⁶ ÷ Redis CPU µs per request: the throughput one Redis core would
carry. "In the script": Redis's own timing of the script runs (INFO commandstats usec ÷ calls: wall clock
around each run, so a loaded machine's preemption inflates it; a batch is one run for all its calls). "Scripts/req": INFO commandstats
eval + evalsha calls on the backend over the window ÷ requests.

### Results

${resultTable}
${floodTable ? `\nThe flood (requests answered vs backend calls over the measured window):\n\n${floodTable}\n` : ''}
The batches (INFO backend over the measured window: \`backend_batches\`, \`backend_batched_calls\`, and the share of
batches by size from \`backend_batch_sizes\`; none for a build without them):

${batchTable}
${latencyTable ? `\nLatency at the same load: after its measured window, each of these configurations was sent ${fmtInt(LATENCY_RATE)} requests per
second for ${LATENCY_SECONDS} s (open loop, round-robin over the same connections, below every configuration's capacity on this machine;
each latency runs from the moment the request was due, so a late send counts), then ${fmtInt(LATENCY_SERIAL)} requests one at a time on one
connection (each sent when the one before was answered: the path itself, with nothing queued and no other load):\n\n${latencyTable}\n` : ''}
Targets:

${verdict}

How to read these numbers:
- ${facts.cores} CPUs for everything. ${PIN ? `The application side (the load generator and three Node sidecars) shares CPU ${APP_CPU}, so requests/s
  is bounded by that one core, and the load generator's own cost (${results.map((r) => `${r.id} ${fmtUs(r.genUsPerOp)}`).join(', ')} µs/req)
  is part of it: requests/s compares configurations on this machine, not a deployment.` : 'Nothing is pinned: servers and the load generator share both CPUs.'}
- The CPU per request is the figure to carry over: Redis's µs per request says how many requests one
  Redis core carries in each mode; the sidecars' says what the application hosts pay.
- The \`script\` row is cellgate's script without the sidecars: where its Redis CPU per request is close to
  the sidecars' rows, the sidecars add nothing on Redis's side, and the distance to the Lua token bucket
  is the script's own cost (the \`in the script\` column).
- The results table's latency is what the application sees, with ${INFLIGHT} requests queued on each connection (closed loop),
  so it measures queueing under saturation as much as the path itself; the p99 target is read at the same
  fixed rate for both paths and one request at a time (the table above it). At 10,000 req/s the load
  generator and three sidecars share one core, and a request through a sidecar waits for that core twice
  more than a direct one (in and out): the difference there is the scheduler's on a shared core. One at a
  time, nothing waits for anything else, and the difference is the path's.
- The machine was shared with other work (other builds and test runs): load average ${facts.loadavg} at the start,
  ${endLoad} at the end. Figures of one configuration move by tens of percent from run to run; compare rows
  that ran next to each other (a build and the build before it) rather than across runs.
`;
    const previous = existsSync(RESULTS) ? readFileSync(RESULTS, 'utf8') : '';
    // This script owns the "## Shared backend" section, up to the next heading of level 1 or 2.
    const at = previous.search(/^## Shared backend$/m);
    let next;
    if (at === -1) next = previous.trimEnd() + '\n\n' + md;
    else {
      const rest = previous.slice(at + '## Shared backend'.length);
      const end = rest.search(/^#{1,2} /m);
      next = previous.slice(0, at) + md + (end === -1 ? '' : '\n' + rest.slice(end));
    }
    writeFileSync(RESULTS, next.trimEnd() + '\n');
    say();
    say(`# wrote ${relative(process.cwd(), RESULTS) || RESULTS}`);
  }
}

run(main);
