#!/usr/bin/env node
/**
 * npm run bench:concurrency  (= npm run build && node bench/concurrency.mjs)
 *
 * What does a lease cost? ACQUIRE+RELEASE pairs per second and CPU per pair, in one run, on loopback:
 *
 *   throttle2  cellgate (no backend): two CL.THROTTLE calls per "pair" (the local target's yardstick)
 *   local      cellgate (no backend): RL.ACQUIRE key limit lease_ms, then RL.RELEASE key <its id>
 *   lua        redis-server called directly: EVALSHA of the sorted-set semaphore (bench/lua-semaphore.mjs:
 *              ZREMRANGEBYSCORE of the expired, ZCARD < limit, ZADD, PEXPIRE), then ZREM key id: the incumbent
 *   backend    a cellgate sidecar with --backend redis:// on that same redis-server: RL.ACQUIRE then RL.RELEASE
 *
 * The load generator is this process (ioredis, auto-pipelined): BENCH_CONNECTIONS connections, BENCH_INFLIGHT
 * chains on each; a chain acquires a slot of a random key (BENCH_KEYS keys, limit BENCH_LIMIT, so a slot is
 * almost always free), releases it as soon as the grant arrives, and starts again. The targets are
 * interleaved over BENCH_ROUNDS rounds (in order, then reversed); each round measures each target for
 * BENCH_SECONDS after a warm-up. CPU per pair: the CPU time of the server's threads over the window
 * (bench/harness.mjs cpuSeconds: /proc/<pid>/task/<tid>/schedstat, else /proc/<pid>/stat) ÷ pairs.
 * Medians and ranges (min–max) over the rounds.
 *
 * Targets: local's cellgate CPU per pair ≤ 2× throttle2's (two CL.THROTTLE calls); backend's Redis CPU per
 * pair ≤ 0.5× lua's.
 *
 * Environment (defaults in brackets):
 *   BENCH_ROUNDS [5]  BENCH_SECONDS [3]  BENCH_CONNECTIONS [8]  BENCH_INFLIGHT [16]  BENCH_KEYS [10000]
 *   BENCH_LIMIT [8]  BENCH_LEASE_MS [60000]  BENCH_TARGETS [throttle2,local,lua,backend]
 *   BENCH_PIN [auto]  auto: with >= 2 CPUs, the servers measured on CPU 0, this load generator and the
 *                     backend sidecar on CPU 1 (the sidecar is the application's side, as in bench/backend.mjs)
 *   BENCH_WRITE [1]   write the "# Concurrency benchmark" section of bench/RESULTS.md (0: print only)
 *   BENCH_TIMEOUT [900]  BENCH_MAIN [dist/main.js]
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { PIN, ROOT, command, cpuSeconds, env, fmtInt, machine, median, run, shellQuote, startCellgate, startRedis, stop, table, watchdog } from './harness.mjs';
import { LUA_SEMAPHORE_ACQUIRE } from './lua-semaphore.mjs';

const MAIN = env.BENCH_MAIN ?? join(ROOT, 'dist', 'main.js');
const RESULTS = join(ROOT, 'bench', 'RESULTS.md');
const ROUNDS = Math.max(1, Number(env.BENCH_ROUNDS ?? 5));
const SECONDS = Number(env.BENCH_SECONDS ?? 3);
const WARM_S = Math.min(1, SECONDS / 3);
const CONNECTIONS = Number(env.BENCH_CONNECTIONS ?? 8);
const INFLIGHT = Number(env.BENCH_INFLIGHT ?? 16);
const KEYS = Number(env.BENCH_KEYS ?? 10_000);
const LIMIT = String(env.BENCH_LIMIT ?? 8);
const LEASE_MS = String(env.BENCH_LEASE_MS ?? 60_000);
const WANTED = new Set((env.BENCH_TARGETS ?? 'throttle2,local,lua,backend').split(','));
const WRITE = env.BENCH_WRITE !== '0';
watchdog(Number(env.BENCH_TIMEOUT ?? 900));

const TARGET_LOCAL_VS_THROTTLE2 = 2;
const TARGET_BACKEND_VS_LUA = 0.5;
const APP_CPU = 1;

const say = (s = '') => process.stdout.write(s + '\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const randomKey = () => `sem:${Math.floor(Math.random() * KEYS)}`;

function client(port) {
  const c = new Redis({ host: '127.0.0.1', port, protocol: 2, lazyConnect: true, enableAutoPipelining: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on('error', () => {});
  return c;
}

/**
 * One pair on `conn` per target: resolves true when a slot was taken and given back (or, for
 * throttle2, both calls answered), false when the acquire was refused.
 */
const pairs = {
  async throttle2(conn, key) {
    await conn.call('CL.THROTTLE', key, '100', '1000', '60', '1');
    await conn.call('CL.THROTTLE', key, '100', '1000', '60', '1');
    return true;
  },
  async rl(conn, key) {
    const r = await conn.call('RL.ACQUIRE', key, LIMIT, LEASE_MS);
    if (r[0] !== 0) return false;
    await conn.call('RL.RELEASE', key, r[6]);
    return true;
  },
  lua: (sha) => {
    let n = 0;
    return async (conn, key) => {
      const id = `l${n++}`;
      if ((await conn.evalsha(sha, 1, key, LIMIT, LEASE_MS, id)) !== 1) return false;
      await conn.zrem(key, id);
      return true;
    };
  },
};

/** Runs `pair` in CONNECTIONS × INFLIGHT chains for `seconds`; with `pids`, their CPU over the window. */
async function drive(conns, pair, seconds, pids = {}) {
  let done = 0;
  let refused = 0;
  let errors = 0;
  let firstError = null;
  let running = true;
  const chains = [];
  for (const conn of conns) {
    for (let i = 0; i < INFLIGHT; i++) {
      chains.push((async () => {
        while (running) {
          try {
            if (await pair(conn, randomKey())) done++;
            else refused++;
          } catch (e) {
            errors++;
            firstError ??= e;
            if (errors > 1000) return;
          }
        }
      })());
    }
  }
  const cpu0 = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, cpuSeconds(pid)]));
  const d0 = done;
  const t0 = performance.now();
  await sleep(seconds * 1000);
  const n = done - d0;
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, ((cpuSeconds(pid) - cpu0[k]) * 1e6) / Math.max(1, n)]));
  running = false;
  await Promise.all(chains);
  if (firstError && errors > n / 100) throw new Error(`${errors} errors, the first: ${firstError.message}`);
  return { pairs: n, rate: n / elapsed, refused, errors, cpu };
}

/** INFO commandstats of a redis-server: command → { calls, usec }. */
async function commandStats(port) {
  const info = String(await command(port, ['INFO', 'commandstats']));
  const out = new Map();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) out.set(m[1], { calls: Number(m[2]), usec: Number(m[3]) });
  return out;
}

/**
 * Where redis-server's time went over a window, per pair: each command's usec (INFO commandstats; a
 * script's commands are counted on their own and inside evalsha's) ÷ pairs, the busiest first.
 */
function statsPerPair(before, after, pairs) {
  const out = [];
  for (const [cmd, a] of after) {
    const b = before.get(cmd) ?? { calls: 0, usec: 0 };
    if (a.calls === b.calls || cmd === 'info' || cmd === 'flushall') continue;
    out.push({ cmd, calls: (a.calls - b.calls) / Math.max(1, pairs), usec: (a.usec - b.usec) / Math.max(1, pairs) });
  }
  return out.sort((x, y) => y.usec - x.usec);
}
const fmtStats = (xs) => xs.map((x) => `${x.cmd} ${x.usec.toFixed(2)}`).join(', ');

/** The sidecar's batches so far (INFO backend): scripts sent and the calls they carried. */
async function batchCounts(port) {
  const info = String(await command(port, ['INFO', 'backend']));
  const field = (name) => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? NaN);
  return { batches: field('backend_batches'), calls: field('backend_batched_calls') };
}

async function main() {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run npm run build (npm run bench:concurrency does)`);
  if (PIN) spawnSync('taskset', ['-a', '-p', '-c', String(APP_CPU), String(process.pid)], { stdio: 'ignore' });
  const started = new Date();
  const facts = machine(MAIN);
  const invocation = `${Object.entries(env).filter(([k]) => k.startsWith('BENCH_')).map(([k, v]) => `${k}=${shellQuote([v])} `).join('')}node bench/concurrency.mjs`;
  say(`# ${invocation}   (npm run bench:concurrency)`);
  say(`# ${started.toISOString()}  ${facts.cpu}, ${facts.cores} CPUs, ${facts.kernel}; node ${facts.node}, redis-server ${facts.redis}; load average ${facts.loadavg}`);
  say(`# cellgate ${facts.revision}; pinning: ${PIN ? `servers measured on CPU 0, load generator and backend sidecar on CPU ${APP_CPU}` : 'none'}`);

  const redis = await startRedis();
  const local = await startCellgate(MAIN);
  const sidecar = await startCellgate(MAIN, { pin: false, args: ['--backend', `redis://127.0.0.1:${redis.port}`, '--backend-timeout', '1000'] });
  if (PIN) spawnSync('taskset', ['-a', '-p', '-c', String(APP_CPU), String(sidecar.child.pid)], { stdio: 'ignore' });
  const sha = await command(redis.port, ['SCRIPT', 'LOAD', LUA_SEMAPHORE_ACQUIRE]);
  if (sha instanceof Error) throw sha;

  const targets = [
    { id: 'throttle2', label: 'cellgate, 2 × CL.THROTTLE', port: local.port, pair: pairs.throttle2, pids: { server: local.child.pid } },
    { id: 'local', label: 'cellgate RL.ACQUIRE + RL.RELEASE', port: local.port, pair: pairs.rl, pids: { server: local.child.pid } },
    { id: 'lua', label: 'redis Lua sorted-set semaphore + ZREM', port: redis.port, pair: pairs.lua(sha), pids: { server: redis.child.pid }, redisPort: redis.port },
    { id: 'backend', label: 'sidecar --backend redis://, RL.ACQUIRE + RL.RELEASE', port: sidecar.port, pair: pairs.rl, pids: { server: redis.child.pid, sidecar: sidecar.child.pid }, redisPort: redis.port },
  ].filter((t) => WANTED.has(t.id));
  // A build without the commands (or without leases on a backend) measures what it has.
  for (const t of [...targets]) {
    const conn = client(t.port);
    await conn.connect();
    try {
      await t.pair(conn, `probe:${t.id}`);
      say(`# check ${t.id}: one pair on probe:${t.id} answered`);
    } catch (e) {
      say(`# ${t.id} skipped: ${e.message}`);
      targets.splice(targets.indexOf(t), 1);
    } finally {
      conn.disconnect();
    }
  }
  for (const t of targets) {
    t.conns = Array.from({ length: CONNECTIONS }, () => client(t.port));
    await Promise.all(t.conns.map((c) => c.connect()));
    // Emptied first: throttle2 and local share a keyspace (a CL.THROTTLE key is WRONGTYPE to RL.ACQUIRE).
    await command(t.port, ['FLUSHALL']);
    await drive(t.conns, t.pair, WARM_S); // JIT and connections warm
  }

  const runs = new Map(targets.map((t) => [t.id, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 ? targets : [...targets].reverse();
    for (const t of order) {
      await command(t.port, ['FLUSHALL']);
      await drive(t.conns, t.pair, WARM_S);
      const before = t.id === 'backend' ? await batchCounts(t.port) : null;
      const statsBefore = t.redisPort !== undefined ? await commandStats(t.redisPort) : null;
      const r = await drive(t.conns, t.pair, SECONDS, t.pids);
      if (statsBefore !== null) r.commands = statsPerPair(statsBefore, await commandStats(t.redisPort), r.pairs);
      if (before !== null) {
        const after = await batchCounts(t.port);
        r.scriptsPerPair = (after.batches - before.batches) / Math.max(1, r.pairs);
        r.callsPerScript = (after.calls - before.calls) / Math.max(1, after.batches - before.batches);
      }
      runs.get(t.id).push(r);
      say(`round ${round} ${t.id.padEnd(9)} ${fmtInt(r.rate).padStart(8)} pairs/s  server CPU ${r.cpu.server.toFixed(2)} µs/pair${r.cpu.sidecar !== undefined ? `  sidecar CPU ${r.cpu.sidecar.toFixed(2)} µs/pair, ${r.callsPerScript.toFixed(1)} calls per script` : ''}  refused ${r.refused}${r.commands ? `\n    redis µs/pair by command: ${fmtStats(r.commands)}` : ''}`);
    }
  }
  for (const t of targets) for (const c of t.conns) c.disconnect();
  for (const s of [local, sidecar, redis]) await stop(s.child);

  const stat = (id, f) => {
    const xs = runs.get(id)?.map(f);
    return xs?.length ? { med: median(xs), min: Math.min(...xs), max: Math.max(...xs) } : null;
  };
  const fmtRange = (s, d, fmt = (x) => x.toFixed(d)) => (s ? `${fmt(s.med)} (${fmt(s.min)}–${fmt(s.max)})` : '—');
  const rows = targets.map((t) => [
    t.label,
    fmtRange(stat(t.id, (r) => r.rate), 0, fmtInt),
    `${t.id === 'lua' || t.id === 'backend' ? 'redis-server' : 'cellgate'}: ${fmtRange(stat(t.id, (r) => r.cpu.server), 2)}`,
    t.id === 'backend' ? fmtRange(stat(t.id, (r) => r.cpu.sidecar), 2) : '',
  ]);
  const results = table(['target', 'pairs/s, median (range)', 'server CPU µs per pair, median (range)', 'sidecar CPU µs per pair'], rows);
  const checks = [];
  const cpu = (id) => stat(id, (r) => r.cpu.server)?.med;
  if (cpu('local') !== undefined && cpu('throttle2') !== undefined) {
    const x = cpu('local') / cpu('throttle2');
    checks.push(['local: cellgate CPU per ACQUIRE+RELEASE ÷ per 2 × CL.THROTTLE', x, `≤ ${TARGET_LOCAL_VS_THROTTLE2}`, x <= TARGET_LOCAL_VS_THROTTLE2]);
  }
  if (cpu('backend') !== undefined && cpu('lua') !== undefined) {
    const x = cpu('backend') / cpu('lua');
    checks.push(['backend: Redis CPU per pair through the sidecar ÷ the Lua sorted-set semaphore\'s', x, `≤ ${TARGET_BACKEND_VS_LUA}`, x <= TARGET_BACKEND_VS_LUA]);
  }
  const verdict = checks.map(([what, value, target, met]) => `- ${what} = ${value.toFixed(2)} (target ${target}): ${met ? 'met' : '**missed**'}`).join('\n') || '- no target could be computed (a target was skipped)';
  const skipped = [...WANTED].filter((id) => !targets.some((t) => t.id === id));
  say();
  say(results);
  say();
  say(verdict);
  if (skipped.length) say(`\nskipped (not answered by this build): ${skipped.join(', ')}`);

  if (WRITE) {
    const endLoad = os.loadavg().map((x) => x.toFixed(2)).join(' ');
    const md = `# Concurrency benchmark

Produced by \`npm run bench:concurrency\` (\`${invocation}\`, under \`flock /work/bench.lock\`) on ${started.toISOString()}
(${((Date.now() - started.getTime()) / 1000).toFixed(0)} s). ${facts.cpu}, ${facts.cores} CPUs; ${facts.kernel}; node ${facts.node};
redis-server ${facts.redis}; cellgate ${facts.revision}; load average ${facts.loadavg} at the start, ${endLoad} at the end.

What runs: one redis-server and one cellgate (no backend)${PIN ? ' on CPU 0' : ''}; a cellgate sidecar with
\`--backend redis://\` on that redis-server${PIN ? `, with the load generator on CPU ${APP_CPU}` : ''}. The load generator: ${CONNECTIONS} ioredis
connections (auto-pipelined), ${INFLIGHT} chains on each; a chain acquires a slot of a random key out of ${fmtInt(KEYS)}
(limit ${LIMIT}, lease ${LEASE_MS} ms), releases it when granted, and starts again. ${ROUNDS} interleaved rounds (in order,
then reversed), each target measured ${SECONDS} s after a ${WARM_S} s warm-up, its server FLUSHALLed first. CPU per pair:
the measured process's CPU time over the window (all threads, /proc/<pid>/task/*/schedstat) ÷ pairs.

- throttle2: \`CL.THROTTLE key 100 1000 60 1\` twice per pair (the yardstick of the local target)
- local: \`RL.ACQUIRE key ${LIMIT} ${LEASE_MS}\`, then \`RL.RELEASE key <id from the reply>\`
- lua: \`EVALSHA <sha> 1 key ${LIMIT} ${LEASE_MS} <id>\` of the script below, then \`ZREM key <id>\` (the common hand-written answer)
- backend: as local, through the sidecar; the server CPU is redis-server's

\`\`\`lua
${LUA_SEMAPHORE_ACQUIRE}
\`\`\`

${results}

${verdict}
${skipped.length ? `\nSkipped (the build measured did not answer them): ${skipped.join(', ')}.\n` : ''}
Every round:

${table(['target', 'round', 'pairs/s', 'server CPU µs/pair', 'sidecar CPU µs/pair', 'calls per script', 'refused'], targets.flatMap((t) => runs.get(t.id).map((r, i) => [t.id, i + 1, fmtInt(r.rate), r.cpu.server.toFixed(2), r.cpu.sidecar?.toFixed(2) ?? '', r.callsPerScript?.toFixed(1) ?? '', r.refused])))}
`;
    const previous = existsSync(RESULTS) ? readFileSync(RESULTS, 'utf8') : '';
    const start = previous.search(/^# Concurrency benchmark$/m);
    let text;
    if (start === -1) text = previous.trimEnd() + '\n\n' + md;
    else {
      const rest = previous.slice(start + 1).search(/^# /m);
      text = previous.slice(0, start) + md + (rest === -1 ? '' : '\n' + previous.slice(start + 1 + rest));
    }
    writeFileSync(RESULTS, text.trimEnd() + '\n');
    say(`\n# wrote bench/RESULTS.md (# Concurrency benchmark)`);
  }
}

run(main);
