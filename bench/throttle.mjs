#!/usr/bin/env node
/**
 * npm run bench  (= npm run build && node bench/throttle.mjs)
 *
 * How fast is cellgate's CL.THROTTLE next to what services run in Redis today, at the key counts
 * services have (1k to 1M keys)? Three targets, driven by the same redis-benchmark (50 clients,
 * random keys), at pipeline 1 and 16:
 *   cellgate  CL.THROTTLE key:__rand_int__ 100 1000 60 1             (this repo's dist/main.js)
 *   lua       EVALSHA <sha> 1 key:__rand_int__ 101 16.67 1           (the classic Lua token bucket, redis-server)
 *   incr      INCR key:__rand_int__                                  (redis-server: the ceiling)
 * For each key count and pipeline the runs are interleaved (A/B/C, then C/B/A) over BENCH_ROUNDS
 * rounds and the medians are reported: requests/s, p50/p99/max latency, and each server's CPU per
 * operation (CPU time of all its threads over the run, /proc/<pid>/task/<tid>/schedstat, ÷ requests). Both servers are FLUSHALLed
 * before each run. Then a cold start: a fresh process of each server and 5 s of the pipeline-16
 * load from its first second, max latency reported. The script writes bench/chart.svg (throughput and
 * CPU per op against key count) and its section of bench/RESULTS.md.
 *
 * Environment (defaults in brackets):
 *   BENCH_KEY_COUNTS [1000,10000,100000,1000000]
 *   BENCH_PIPELINES [1,16]
 *   BENCH_ROUNDS [3]      measured rounds per (key count, target, pipeline)
 *   BENCH_SECONDS [1.5]   target duration of one measured run (-n is sized from a calibration run)
 *   BENCH_COLD_SECONDS [5]  the cold-start load (0: skip the cold start)
 *   BENCH_CLIENTS [50]    redis-benchmark -c
 *   BENCH_TARGETS [cellgate,lua,incr]
 *   BENCH_COMPARE [none]  another cellgate build's main.js (e.g. an older commit's): measured as target
 *                         `base` in the same rounds, alternating with this one (A/B), cold start included
 *   BENCH_PIN [auto]      auto: with >= 2 CPUs, servers on CPU 0 and redis-benchmark on CPU 1 (taskset); 0: no pinning
 *   BENCH_PROFILE [auto]  auto: when a target is missed, profile cellgate (node --cpu-prof) under the
 *                         pipeline-16 load at the smallest key count; 1: always; 0: never
 *   BENCH_WRITE [1]       write bench/RESULTS.md and bench/chart.svg (0: print only)
 *   BENCH_TIMEOUT [900]   seconds before everything is killed
 *   BENCH_MAIN [dist/main.js]  the cellgate build to measure
 * The defaults take ~5 minutes on a 2-core machine; lengthen with BENCH_ROUNDS / BENCH_SECONDS.
 * Throughput on a shared machine is noisy; CPU per operation much less so.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join, relative } from 'node:path';
import {
  CPUS, NODE_ENV, NODE_FLAGS, PIN, ROOT, benchmarkArgs, command, env, fmtInt, fmtMs, fmtRatio, machine, median, run,
  profileCellgate, runBenchmark, shellQuote, startCellgate, startRedis, stop, table, watchdog,
} from './harness.mjs';
import { svgChart } from './chart.mjs';

const MAIN = env.BENCH_MAIN ?? join(ROOT, 'dist', 'main.js');
const COMPARE = env.BENCH_COMPARE;
const RESULTS = join(ROOT, 'bench', 'RESULTS.md');
const CHART = join(ROOT, 'bench', 'chart.svg');
const KEY_COUNTS = (env.BENCH_KEY_COUNTS ?? '1000,10000,100000,1000000').split(',').map(Number);
const PIPELINES = (env.BENCH_PIPELINES ?? '1,16').split(',').map(Number);
const ROUNDS = Math.max(1, Number(env.BENCH_ROUNDS ?? 3));
const SECONDS = Number(env.BENCH_SECONDS ?? 1.5);
const COLD_SECONDS = Number(env.BENCH_COLD_SECONDS ?? 5);
const CLIENTS = Number(env.BENCH_CLIENTS ?? 50);
const TARGET_IDS = (env.BENCH_TARGETS ?? 'cellgate,lua,incr').split(',');
const PROFILE = env.BENCH_PROFILE ?? 'auto';
const WRITE = env.BENCH_WRITE !== '0';
watchdog(Number(env.BENCH_TIMEOUT ?? 900));

/**
 * The targets (docs/benchmarks.md): at pipeline 16 over 1k and 10k keys CL.THROTTLE serves at
 * least this share of INCR's requests/s at most this multiple of INCR's server CPU per op; at pipeline 1
 * at most this multiple of INCR's CPU per op; in the first seconds after a start, a max latency of at most this.
 */
const TARGET_P16_RPS_VS_INCR = 0.9;
const TARGET_P16_CPU_VS_INCR = 1.1;
const TARGET_P1_CPU_VS_INCR = 1.05;
const TARGET_COLD_MAX_MS = 10;
const SMALL_KEY_COUNTS = [1000, 10000];

// The limit every target enforces: burst 100 (capacity 101), 1000 per 60 s.
const MAX_BURST = 100;
const COUNT = 1000;
const PERIOD_S = 60;
const CAPACITY = MAX_BURST + 1;
const RATE_PER_S = COUNT / PERIOD_S;

// The incumbent: the classic token bucket in Redis, shared with bench/backend.mjs.
import { LUA_TOKEN_BUCKET } from './lua-token-bucket.mjs';

const say = (s = '') => process.stdout.write(s + '\n');
const keyLabel = (k) => (k >= 1e6 ? `${k / 1e6}M` : k >= 1e3 ? `${k / 1e3}k` : String(k));
const cellgateCmd = ['CL.THROTTLE', 'key:__rand_int__', String(MAX_BURST), String(COUNT), String(PERIOD_S), '1'];
const incrCmd = ['INCR', 'key:__rand_int__'];

/**
 * A fresh server and COLD_SECONDS of the pipeline-16 load over the smallest key count from the moment
 * it answers PING, in back-to-back redis-benchmark runs of ~0.5 s. Resolves with the max latency of the
 * first run and of all, the median p99, and how long the start took.
 */
async function coldStart(label, start, cmd) {
  const server = await start();
  const started = performance.now();
  const chunks = [];
  let n = 200_000;
  while (performance.now() - started < COLD_SECONDS * 1000) {
    const r = await runBenchmark(server.port, 16, n, cmd, undefined, { clients: CLIENTS, keys: KEY_COUNTS[0] });
    chunks.push(r);
    n = Math.max(20_000, Math.round((r.rps * 0.5) / 10_000) * 10_000);
  }
  await stop(server.child);
  const result = {
    label,
    readyMs: server.readyMs,
    firstMax: chunks[0].max,
    max: Math.max(...chunks.map((c) => c.max)),
    p99: median(chunks.map((c) => c.p99)),
    rps: median(chunks.map((c) => c.rps)),
    runs: chunks.length,
    seconds: (performance.now() - started) / 1000,
  };
  say(`# cold start ${label}: max ${fmtMs(result.max)} ms (first run ${fmtMs(result.firstMax)} ms), p99 ${fmtMs(result.p99)} ms, ${result.runs} runs in ${result.seconds.toFixed(1)} s${result.readyMs ? `; ready ${result.readyMs.toFixed(0)} ms after spawn` : ''}`);
  return result;
}

async function main() {
  for (const m of [MAIN, COMPARE].filter(Boolean)) {
    if (!existsSync(m)) throw new Error(`${m} is missing: run npm run build (npm run bench does)`);
  }
  const started = new Date();
  const facts = machine(MAIN);
  const invocation = `${Object.entries(env).filter(([k]) => k.startsWith('BENCH_')).map(([k, v]) => `${k}=${shellQuote([v])} `).join('')}node bench/throttle.mjs`;
  say(`# ${invocation}   (npm run bench)`);
  say(`# ${started.toISOString()}  ${facts.cpu}, ${facts.cores} CPUs, ${facts.ramGiB} GiB, ${facts.kernel}, ${facts.distro}`);
  say(`# node ${facts.node}, redis-server ${facts.redis}, ${facts.redisBenchmark}, load average ${facts.loadavg}`);
  say(`# cellgate ${facts.revision}${COMPARE ? `; base (A/B) ${COMPARE}` : ''}`);
  say(`# pinning: ${PIN ? 'servers on CPU 0, redis-benchmark on CPU 1 (taskset)' : 'none'}`);

  // Cold starts first, on an otherwise idle pair of servers.
  const cold = [];
  if (COLD_SECONDS > 0) {
    cold.push(await coldStart('cellgate CL.THROTTLE', () => startCellgate(MAIN), cellgateCmd));
    cold.push(await coldStart('redis INCR', () => startRedis(), incrCmd));
    if (COMPARE) cold.push(await coldStart('base CL.THROTTLE', () => startCellgate(COMPARE), cellgateCmd));
  }

  const cellgate = await startCellgate(MAIN);
  const base = COMPARE ? await startCellgate(COMPARE) : null;
  const redis = await startRedis();
  const sha = await command(redis.port, ['SCRIPT', 'LOAD', LUA_TOKEN_BUCKET]);
  if (sha instanceof Error) throw sha;
  const all = [
    { id: 'cellgate', label: 'cellgate CL.THROTTLE', server: cellgate, cmd: cellgateCmd, color: '#d62728' },
    ...(base ? [{ id: 'base', label: 'base build CL.THROTTLE', server: base, cmd: cellgateCmd, color: '#ff9896' }] : []),
    { id: 'lua', label: 'redis Lua token bucket', server: redis, cmd: ['EVALSHA', sha, '1', 'key:__rand_int__', String(CAPACITY), String(RATE_PER_S), '1'], color: '#2ca02c' },
    { id: 'incr', label: 'redis INCR', server: redis, cmd: incrCmd, color: '#1f77b4' },
  ];
  const targets = all.filter((t) => TARGET_IDS.includes(t.id) || t.id === 'base');
  // Every run starts from an empty keyspace (the Lua hashes and INCR counters share key names, and
  // each run's key count differs).
  const prepare = (t) => command(t.server.port, ['FLUSHALL']);

  for (const t of targets) {
    await prepare(t);
    const probe = t.cmd.map((w) => w.replace('__rand_int__', '000000000001'));
    const reply = await command(t.server.port, probe);
    if (reply instanceof Error) throw new Error(`${t.label}: ${probe.join(' ')} → ${reply.message}`);
    say(`# check: ${probe.join(' ')} → ${JSON.stringify(reply)}`);
  }
  // Warm-up of the JIT before anything is measured, then -n sized for BENCH_SECONDS per run.
  for (const t of targets.filter((x) => x.server !== redis)) {
    await runBenchmark(t.server.port, 16, 300_000, t.cmd, undefined, { clients: CLIENTS, keys: 10_000 });
    await runBenchmark(t.server.port, 1, 30_000, t.cmd, undefined, { clients: CLIENTS, keys: 10_000 });
  }
  const requests = new Map();
  for (const p of PIPELINES) {
    for (const t of targets) {
      await prepare(t);
      const r = await runBenchmark(t.server.port, p, p === 1 ? 50_000 : 300_000, t.cmd, undefined, { clients: CLIENTS, keys: 10_000 });
      const n = Math.max(10_000, Math.round((r.rps * SECONDS) / 10_000) * 10_000);
      requests.set(`${t.id}/${p}`, n);
      say(`# calibrate ${t.id} P${p}: ${fmtInt(r.rps)} rps → -n ${n}`);
    }
  }

  const runs = new Map(); // `${id}/${p}/${keys}` → [result...]
  let flip = false;
  for (let round = 1; round <= ROUNDS; round++) {
    for (const keys of KEY_COUNTS) {
      for (const p of PIPELINES) {
        // A/B/C then C/B/A: no target always runs right after another.
        const order = flip ? [...targets].reverse() : targets;
        flip = !flip;
        for (const t of order) {
          await prepare(t);
          const key = `${t.id}/${p}/${keys}`;
          const r = await runBenchmark(t.server.port, p, requests.get(`${t.id}/${p}`), t.cmd, t.server.child.pid, { clients: CLIENTS, keys });
          if (!runs.has(key)) runs.set(key, []);
          runs.get(key).push(r);
          say(`round ${round} ${keyLabel(keys).padStart(4)} keys P${String(p).padEnd(2)} ${t.id.padEnd(8)} ${fmtInt(r.rps).padStart(11)} rps  p50 ${fmtMs(r.p50)}  p99 ${fmtMs(r.p99)}  max ${fmtMs(r.max)} ms  CPU ${r.cpuUsPerOp.toFixed(3)} µs/op`);
        }
      }
    }
  }
  for (const s of [cellgate, base, redis].filter(Boolean)) await stop(s.child);

  const med = new Map();
  for (const [key, rs] of runs) {
    med.set(key, { rps: median(rs.map((r) => r.rps)), p50: median(rs.map((r) => r.p50)), p99: median(rs.map((r) => r.p99)), max: Math.max(...rs.map((r) => r.max)), cpu: median(rs.map((r) => r.cpuUsPerOp)) });
  }
  const m = (id, p, keys) => med.get(`${id}/${p}/${keys}`);
  const has = (id) => targets.some((t) => t.id === id);

  const resultTables = PIPELINES.map((p) => {
    const rows = [];
    for (const keys of KEY_COUNTS) {
      for (const t of targets) {
        const x = m(t.id, p, keys);
        rows.push([keyLabel(keys), t.label, fmtInt(x.rps), fmtMs(x.p50), fmtMs(x.p99), fmtMs(x.max), x.cpu.toFixed(3)]);
      }
    }
    return `Pipeline ${p}:\n\n` + table(['keys', 'target', 'requests/s', 'p50 ms', 'p99 ms', 'max ms', 'server CPU µs/op'], rows);
  });
  const ratioRows = [];
  for (const p of PIPELINES) {
    for (const keys of KEY_COUNTS) {
      const c = m('cellgate', p, keys);
      const row = [p, keyLabel(keys)];
      if (has('incr')) row.push(fmtRatio(c.rps / m('incr', p, keys).rps), fmtRatio(c.cpu / m('incr', p, keys).cpu));
      if (has('lua')) row.push(fmtRatio(c.rps / m('lua', p, keys).rps));
      if (base) row.push(fmtRatio(c.rps / m('base', p, keys).rps), fmtRatio(c.cpu / m('base', p, keys).cpu));
      ratioRows.push(row);
    }
  }
  const ratioHeaders = ['pipeline', 'keys', ...(has('incr') ? ['rps: cellgate / INCR', 'CPU/op: cellgate / INCR'] : []), ...(has('lua') ? ['rps: cellgate / Lua'] : []), ...(base ? ['rps: this / base', 'CPU/op: this / base'] : [])];
  const ratioTable = table(ratioHeaders, ratioRows);

  const checks = [];
  if (has('incr')) {
    for (const keys of SMALL_KEY_COUNTS.filter((k) => KEY_COUNTS.includes(k))) {
      if (PIPELINES.includes(16)) {
        const rps = m('cellgate', 16, keys).rps / m('incr', 16, keys).rps;
        const cpu = m('cellgate', 16, keys).cpu / m('incr', 16, keys).cpu;
        checks.push([`pipeline 16, ${keyLabel(keys)} keys: requests/s cellgate / INCR`, rps, `≥ ${TARGET_P16_RPS_VS_INCR}`, rps >= TARGET_P16_RPS_VS_INCR]);
        checks.push([`pipeline 16, ${keyLabel(keys)} keys: CPU per op cellgate / INCR`, cpu, `≤ ${TARGET_P16_CPU_VS_INCR}`, cpu <= TARGET_P16_CPU_VS_INCR]);
      }
    }
    if (PIPELINES.includes(1)) {
      for (const keys of KEY_COUNTS) {
        const cpu = m('cellgate', 1, keys).cpu / m('incr', 1, keys).cpu;
        checks.push([`pipeline 1, ${keyLabel(keys)} keys: CPU per op cellgate / INCR`, cpu, `≤ ${TARGET_P1_CPU_VS_INCR}`, cpu <= TARGET_P1_CPU_VS_INCR]);
      }
    }
  }
  if (base) {
    for (const keys of KEY_COUNTS.filter((k) => k >= 100_000)) {
      for (const p of PIPELINES) {
        const cpu = m('cellgate', p, keys).cpu / m('base', p, keys).cpu;
        checks.push([`pipeline ${p}, ${keyLabel(keys)} keys: CPU per op this / base (no regression)`, cpu, '≤ 1.03', cpu <= 1.03]);
      }
    }
  }
  for (const c of cold.filter((x) => !x.label.startsWith('redis'))) {
    checks.push([`cold start, ${c.label}: max latency in the first ${COLD_SECONDS} s (ms)`, c.max, `≤ ${TARGET_COLD_MAX_MS}`, c.max <= TARGET_COLD_MAX_MS]);
  }
  const allMet = checks.every((c) => c[3]);
  const verdict = checks.map(([what, value, target, met]) => `- ${what} = ${value.toFixed(2)} (target ${target}): ${met ? 'met' : '**missed**'}`).join('\n');
  const coldTable = cold.length === 0 ? '' : table(['fresh process', 'max ms (all runs)', 'max ms (first run)', 'p99 ms (median)', 'requests/s (median)', 'runs', 'ready after spawn ms'],
    cold.map((c) => [c.label, fmtMs(c.max), fmtMs(c.firstMax), fmtMs(c.p99), fmtInt(c.rps), c.runs, c.readyMs ? c.readyMs.toFixed(0) : '']));

  say();
  for (const t of resultTables) say(t + '\n');
  say(ratioTable);
  say();
  if (coldTable) say(coldTable + '\n');
  say(verdict);

  let profile = null;
  if (PROFILE === '1' || (PROFILE === 'auto' && !allMet)) {
    const keys = KEY_COUNTS[0];
    say();
    say(`# profiling cellgate (node --cpu-prof) under pipeline 16 load over ${keyLabel(keys)} keys...`);
    const n = requests.get('cellgate/16') ?? 1_000_000;
    profile = await profileCellgate(MAIN, cellgateCmd, n, { clients: CLIENTS, keys });
    profile.command = shellQuote(['redis-benchmark', ...benchmarkArgs('<port>', 16, n, cellgateCmd, { clients: CLIENTS, keys })]);
    profile.table = table(['#', 'function', 'where', 'self ms', 'self %'], profile.functions.map((f, i) => [i + 1, f.name, f.location, f.ms.toFixed(0), `${f.pct.toFixed(1)}%`]));
    profile.fileTable = table(['script', 'self ms', 'self %'], profile.files.map((f) => [f.file, f.ms.toFixed(0), `${f.pct.toFixed(1)}%`]));
    say(`# under the profiler: ${fmtInt(profile.result.rps)} rps`);
    say(profile.table);
  }

  const endLoad = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  const rawRows = [];
  for (const [key, rs] of runs) {
    const [id, p, keys] = key.split('/');
    for (const [i, r] of rs.entries()) rawRows.push([id, `P${p}`, keyLabel(Number(keys)), i + 1, fmtInt(r.rps), fmtMs(r.p50), fmtMs(r.p99), fmtMs(r.max), r.cpuUsPerOp.toFixed(3), r.seconds.toFixed(1)]);
  }
  const commands = PIPELINES.flatMap((p) =>
    targets.filter((t) => t.id !== 'base').map((t) => shellQuote([...(PIN ? ['taskset', '-c', '1'] : []), 'redis-benchmark', ...benchmarkArgs(`<${t.server === redis ? 'redis' : 'cellgate'}-port>`, p, requests.get(`${t.id}/${p}`), t.cmd, { clients: CLIENTS, keys: 0 }).map((w) => (w === '0' ? '<keys>' : w))])),
  );
  const series = [];
  for (const t of targets) {
    for (const p of PIPELINES) {
      series.push({ label: `${t.label}, P${p}`, color: t.color, dashed: p === 1, points: KEY_COUNTS.map((keys) => ({ x: keys, rps: m(t.id, p, keys).rps, cpu: m(t.id, p, keys).cpu })) });
    }
  }

  if (WRITE) {
    const svg = svgChart({ title: `CL.THROTTLE vs Redis INCR and a Lua token bucket (${facts.cores}-CPU VM, ${CLIENTS} clients, medians of ${ROUNDS} rounds, ${started.toISOString().slice(0, 10)})`, series });
    writeFileSync(CHART, svg);
    const md = `# CL.THROTTLE benchmark

Produced by \`npm run bench\` (\`${invocation}\`) on ${started.toISOString()} (${((Date.now() - started.getTime()) / 1000).toFixed(0)} s).

![requests/s and server CPU per operation against key count](chart.svg)

## Machine

- CPU: ${facts.cpu}, ${facts.cores} CPUs available; RAM ${facts.ramGiB} GiB
- Kernel: ${facts.kernel}; ${facts.distro}
- node ${facts.node}; redis-server ${facts.redis}; ${facts.redisBenchmark}
- cellgate: ${facts.revision}${COMPARE ? `; base build (A/B, same rounds): ${COMPARE}` : ''}
- Load average at start: ${facts.loadavg}; at the end: ${endLoad}
- Pinning: ${PIN ? 'both servers on CPU 0, redis-benchmark on CPU 1 (`taskset`), so client and server do not fight for a core' : 'none'}

## What runs

Both servers on 127.0.0.1, started by the script: cellgate \`${Object.entries(NODE_ENV).map(([k, v]) => `${k}=${v}`).join(' ')} node ${NODE_FLAGS.join(' ')} dist/main.js --port 0 --bind 127.0.0.1 --dir <tmp> --save ''\`,
redis-server \`--save '' --appendonly no --dir <tmp>\`. ${CLIENTS} clients; ${KEY_COUNTS.map(keyLabel).join(', ')} random keys; one
calibration run per target and pipeline sizing \`-n\` for ≈ ${SECONDS} s, then ${ROUNDS} measured rounds, each over every key
count and pipeline with the targets interleaved (in order, then reversed). Both servers are FLUSHALLed before each run.
Server CPU per op: CPU time (user + system) of all the server process's threads over the run (/proc/<pid>/task/<tid>/schedstat, ns; utime + stime in clock ticks is too coarse for 1.5 s runs) ÷ requests. Medians reported
(max: the largest of the rounds).

\`\`\`
${commands.join('\n')}
\`\`\`

The Lua script (loaded with SCRIPT LOAD; capacity ${CAPACITY}, ${RATE_PER_S.toFixed(4)} tokens/s = the same limit as
\`CL.THROTTLE key ${MAX_BURST} ${COUNT} ${PERIOD_S} 1\`):

\`\`\`lua
${LUA_TOKEN_BUCKET}
\`\`\`

## Results (medians of ${ROUNDS} rounds)

${resultTables.join('\n\n')}

${ratioTable}
${coldTable ? `
## Cold start

A fresh process of each server, then ${COLD_SECONDS} s of the pipeline-16 load over ${keyLabel(KEY_COUNTS[0])} keys from the moment it answers
PING, in back-to-back ~0.5 s redis-benchmark runs (each with 50 new connections):

${coldTable}
` : ''}
## Targets

${verdict}

${allMet ? 'cellgate meets every target on this machine.' : `**cellgate misses ${checks.filter((c) => !c[3]).length} of the ${checks.length} targets on this machine.** ${profile ? 'The CPU profile below shows where its time goes; "Performance notes" below says what was tried.' : 'Run with BENCH_PROFILE=1 for a CPU profile.'}`}

How to read these numbers:
- ${facts.cores} CPUs for everything: ${PIN ? 'the servers on CPU 0, redis-benchmark on CPU 1' : 'servers and redis-benchmark unpinned'}. redis-benchmark is one
  thread; at pipeline 16 against INCR it may be the bottleneck itself, so the INCR figure is a lower bound on
  Redis's ceiling.
- cellgate is one Node.js thread (plus V8's compiler and GC helper threads${PIN ? ', here confined to the same CPU' : ''}); redis-server is one thread.
- The machine may be shared (load average ${facts.loadavg} at the start, ${endLoad} at the end): the interleaved
  rounds and medians spread such noise over all targets; "Every run" below shows the spread.
${profile ? `
## CPU profile of cellgate under the pipeline-16 load over ${keyLabel(KEY_COUNTS[0])} keys

\`node --cpu-prof dist/main.js ...\` while \`${profile.command}\` ran (after a warm-up run);
${fmtInt(profile.result.rps)} rps under the profiler. Top functions by self time (share of the busy, non-idle samples
over the server's whole life, warm-up included; busy ${profile.busyMs.toFixed(0)} ms, idle ${profile.idleMs.toFixed(0)} ms;
\`node bench/cpuprofile-top.mjs FILE.cpuprofile\` prints the same for any profile):

${profile.table}

The same self time by script (functions without a script are native code or V8's own buckets):

${profile.fileTable}
` : ''}
## Every run

${table(['target', 'pipeline', 'keys', 'round', 'requests/s', 'p50 ms', 'p99 ms', 'max ms', 'server CPU µs/op', 'seconds'], rawRows)}
`;
    // This script owns the first section (up to the next top-level heading); other benchmarks
    // (ratelimit.mjs, snapshot.mjs, variants.mjs) keep theirs after it.
    const previous = existsSync(RESULTS) ? readFileSync(RESULTS, 'utf8') : '';
    const others = previous.search(/^# (?!CL\.THROTTLE benchmark)/m);
    writeFileSync(RESULTS, md.trimEnd() + '\n' + (others === -1 ? '' : '\n' + previous.slice(others)));
    say();
    say(`# wrote ${relative(process.cwd(), RESULTS) || RESULTS} and ${relative(process.cwd(), CHART) || CHART}`);
  }
}

run(main);
