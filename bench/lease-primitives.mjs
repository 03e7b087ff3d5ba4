#!/usr/bin/env node
/**
 * node bench/lease-primitives.mjs  (under flock /work/bench.lock)
 *
 * The floor of a script-free lease on a Redis backend: what an ACQUIRE+RELEASE pair would cost Redis if
 * a sidecar sent plain commands instead of the batched script, measured on redis-server alone (no
 * cellgate, no fallback traffic: every key is free, so no pair ever needs the script). Three pairs, one
 * random key of BENCH_KEYS each, ioredis auto-pipelined (BENCH_CONNECTIONS × BENCH_INFLIGHT chains, as
 * bench/concurrency.mjs), interleaved over BENCH_ROUNDS rounds:
 *
 *   lua          the sorted-set semaphore (bench/lua-semaphore.mjs) + ZREM: the anchor of the 0.5× target
 *   setnx-getdel SET key <lease value> PX ms NX, then GETDEL key (the sidecar would compare the value it
 *                got). Not safe as a release: a GETDEL of a key holding other leases empties it until the
 *                value is put back, and an acquire through any sidecar meanwhile finds it absent
 *   setnx-cad    SET key <lease value> PX ms NX, then EVALSHA of a compare-and-delete (GET, DEL if equal):
 *                the cheapest release that is safe on Redis 7.0, which has no conditional delete
 *
 * Redis CPU per pair: redis-server's CPU time over the window ÷ pairs (bench/harness.mjs cpuSeconds), with
 * INFO commandstats per pair. Prints medians and ranges; writes nothing.
 *
 * Environment: BENCH_ROUNDS [3]  BENCH_SECONDS [3]  BENCH_CONNECTIONS [8]  BENCH_INFLIGHT [16]  BENCH_KEYS [10000]
 */
import { spawnSync } from 'node:child_process';
import { Redis } from 'ioredis';
import { PIN, command, cpuSeconds, env, median, run, startRedis, stop } from './harness.mjs';
import { LUA_SEMAPHORE_ACQUIRE } from './lua-semaphore.mjs';

const ROUNDS = Math.max(1, Number(env.BENCH_ROUNDS ?? 3));
const SECONDS = Number(env.BENCH_SECONDS ?? 3);
const CONNECTIONS = Number(env.BENCH_CONNECTIONS ?? 8);
const INFLIGHT = Number(env.BENCH_INFLIGHT ?? 16);
const KEYS = Number(env.BENCH_KEYS ?? 10_000);
const LEASE_MS = 60_000;
const COMPARE_AND_DELETE = "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end return 0";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const randomKey = () => `sem:${Math.floor(Math.random() * KEYS)}`;
/** A sole lease's value as a script-free acquire would write it: a 34-byte header, then the id (its end is the key's expiry). */
const leaseValue = (id) => Buffer.concat([Buffer.from([198, 7]), Buffer.alloc(32), Buffer.from(id)]);

async function commandStats(port) {
  const info = String(await command(port, ['INFO', 'commandstats']));
  const out = new Map();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) out.set(m[1], Number(m[3]));
  return out;
}

async function drive(conns, pair, seconds, pid) {
  let done = 0;
  let running = true;
  const chains = [];
  for (const conn of conns) {
    for (let i = 0; i < INFLIGHT; i++) {
      chains.push((async () => {
        while (running) if (await pair(conn, randomKey())) done++;
      })());
    }
  }
  const cpu0 = pid === undefined ? 0 : cpuSeconds(pid);
  const d0 = done;
  await sleep(seconds * 1000);
  const n = done - d0;
  const cpu = pid === undefined ? 0 : ((cpuSeconds(pid) - cpu0) * 1e6) / Math.max(1, n);
  running = false;
  await Promise.all(chains);
  return { n, cpu };
}

async function main() {
  if (PIN) spawnSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' });
  const redis = await startRedis();
  const semaphore = await command(redis.port, ['SCRIPT', 'LOAD', LUA_SEMAPHORE_ACQUIRE]);
  const cad = await command(redis.port, ['SCRIPT', 'LOAD', COMPARE_AND_DELETE]);
  let n = 0;
  const pairs = {
    lua: async (c, key) => {
      const id = `l${n++}`;
      if ((await c.evalsha(semaphore, 1, key, '8', String(LEASE_MS), id)) !== 1) return false;
      await c.zrem(key, id);
      return true;
    },
    'setnx-getdel': async (c, key) => {
      const v = leaseValue(`i${n++}`);
      if ((await c.set(key, v, 'PX', LEASE_MS, 'NX')) !== 'OK') return false;
      await c.getdel(key);
      return true;
    },
    'setnx-cad': async (c, key) => {
      const v = leaseValue(`i${n++}`);
      if ((await c.set(key, v, 'PX', LEASE_MS, 'NX')) !== 'OK') return false;
      await c.evalsha(cad, 1, key, v);
      return true;
    },
  };
  const conns = Array.from({ length: CONNECTIONS }, () => new Redis({ port: redis.port, enableAutoPipelining: true, protocol: 2 }));
  const cpu = Object.fromEntries(Object.keys(pairs).map((id) => [id, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 ? Object.keys(pairs) : Object.keys(pairs).reverse();
    for (const id of order) {
      await command(redis.port, ['FLUSHALL']);
      await drive(conns, pairs[id], 1);
      const before = await commandStats(redis.port);
      const r = await drive(conns, pairs[id], SECONDS, redis.child.pid);
      const after = await commandStats(redis.port);
      const by = [...after].filter(([k]) => k !== 'info' && k !== 'flushall' && after.get(k) !== before.get(k))
        .map(([k, u]) => `${k} ${((u - (before.get(k) ?? 0)) / Math.max(1, r.n)).toFixed(2)}`).join(', ');
      cpu[id].push(r.cpu);
      process.stdout.write(`round ${round} ${id.padEnd(12)} ${Math.round(r.n / SECONDS)} pairs/s  redis CPU ${r.cpu.toFixed(2)} µs/pair  (commandstats µs/pair: ${by})\n`);
    }
  }
  for (const c of conns) c.disconnect();
  await stop(redis.child);
  const anchor = median(cpu.lua);
  for (const [id, xs] of Object.entries(cpu)) {
    process.stdout.write(`${id}: redis CPU ${median(xs).toFixed(2)} (${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}) µs/pair, ${(median(xs) / anchor).toFixed(2)}× lua\n`);
  }
}

run(main);
