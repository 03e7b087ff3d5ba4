#!/usr/bin/env node
/**
 * The rate limit service's cost: ShouldRateLimit requests/s, the server's CPU per request (from
 * /proc) and the client-side p50/p99, with 1 and 4 descriptors per request, against CL.THROTTLE over
 * RESP for the same number of decisions, in the same run, on the same server.
 *
 *   npm run build && node bench/rls.mjs          # RLS_BENCH_REQUESTS=40000 RLS_BENCH_INFLIGHT=64
 *   RLS_BENCH_BACKEND=1 node bench/rls.mjs        # with a Redis backend: its CPU per request too
 *
 * Locally, one more row: bench/rls-http2-floor.mjs, a bare node:http2 server giving a fixed answer,
 * under the same client: the CPU a unary gRPC call costs in Node before any of cellgate's work.
 *
 * Each request names one of 1,000 keys (fixed windows of 10^9 per minute: always allowed, always
 * counted); calls go out over one gRPC channel (one HTTP/2 connection), RLS_BENCH_INFLIGHT at once,
 * as an Envoy worker's connection carries them; RESP over one ioredis connection with as many in flight.
 * The RESP rows: CL.THROTTLE (whose key is gone again at once at these rates) and the service's own
 * call, RL.FIXEDWINDOW (whose key lives through its minute, as the service's). With a backend,
 * decisions/script is how many limiter calls each script sent to Redis carried (INFO backend_calls).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Redis } from 'ioredis';
import { spawn } from 'node:child_process';
import { command, cpuSeconds, freePort, pinned, ROOT, run, startCellgate, startRedis, tempDir, track } from './harness.mjs';

const REQUESTS = Number(process.env.RLS_BENCH_REQUESTS ?? 40_000);
const INFLIGHT = Number(process.env.RLS_BENCH_INFLIGHT ?? 64);
const KEYS = 1000;
const BACKEND = process.env.RLS_BENCH_BACKEND === '1';

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))];
}

/** Runs `requests` calls of `one(i)` with `inflight` at once; returns wall seconds and the latencies (ms). */
async function drive(requests, inflight, one) {
  const lat = new Float64Array(requests);
  let next = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: inflight }, async () => {
    while (next < requests) {
      const i = next++;
      const t = performance.now();
      await one(i);
      lat[i] = performance.now() - t;
    }
  }));
  const wall = (performance.now() - started) / 1000;
  return { wall, lat: Array.from(lat).sort((a, b) => a - b) };
}

/** INFO backend's backend_calls on cellgate's `port` (limiter scripts sent to Redis); 0 without a backend. */
async function scriptsSent(port) {
  if (!BACKEND || port === null) return 0;
  const info = String(await command(port, ['INFO', 'backend']));
  return Number(/backend_calls:(\d+)/.exec(info)?.[1] ?? 0);
}

async function measure(name, port, pid, redisPid, decisionsPerRequest, fn) {
  // Warm the path (JIT) first, then measure.
  await drive(Math.min(5000, REQUESTS), INFLIGHT, fn);
  const cpu0 = cpuSeconds(pid);
  const redis0 = redisPid === null ? 0 : cpuSeconds(redisPid);
  const scripts0 = await scriptsSent(port);
  const { wall, lat } = await drive(REQUESTS, INFLIGHT, fn);
  const cpu = cpuSeconds(pid) - cpu0;
  const redisCpu = redisPid === null ? 0 : cpuSeconds(redisPid) - redis0;
  const scripts = (await scriptsSent(port)) - scripts0;
  return {
    name, decisionsPerRequest,
    rps: REQUESTS / wall,
    cpuUsPerRequest: (cpu / REQUESTS) * 1e6,
    redisUsPerRequest: (redisCpu / REQUESTS) * 1e6,
    // Decisions per script sent to Redis: how many calls a batch carried on average.
    perScript: scripts === 0 ? 0 : (REQUESTS * decisionsPerRequest) / scripts,
    p50: percentile(lat, 50), p99: percentile(lat, 99),
  };
}

/** The bare node:http2 server (bench/rls-http2-floor.mjs) under the same client and load. */
async function measureFloor(Rls, requests1) {
  const port = await freePort();
  // Pinned as cellgate is (startCellgate: CPU 0 when the harness pins): a floor left free runs at
  // several times the call rate of a pinned server on a busy machine, and the ratio would then
  // measure the pinning, not the door.
  const [cmd, args] = pinned(0, process.execPath, [join(ROOT, 'bench/rls-http2-floor.mjs'), String(port)]);
  const child = track(spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] }));
  await new Promise((resolve, reject) => {
    child.stdout.once('data', resolve);
    child.once('exit', () => reject(new Error('rls-http2-floor.mjs exited')));
  });
  const client = new Rls(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const should = (descriptors) => new Promise((resolve, reject) => client.ShouldRateLimit({ domain: 'bench', descriptors }, (e, r) => (e ? reject(e) : resolve(r))));
  const row = await measure('bare node:http2, fixed answer (floor)', null, child.pid, null, 1, (i) => should(requests1[i % KEYS]));
  client.close();
  child.kill();
  return row;
}

async function main() {
  const confDir = tempDir('cellgate-rls-bench-');
  writeFileSync(join(confDir, 'bench.yaml'), `domain: bench\ndescriptors:\n${[0, 1, 2, 3].map((d) => `  - key: k${d}\n    rate_limit: { unit: minute, requests_per_unit: 1000000000 }\n`).join('')}`);
  const rlsPort = await freePort();
  const redisServer = BACKEND ? await startRedis() : null;
  const backendArgs = redisServer === null ? [] : ['--backend', `redis://127.0.0.1:${redisServer.port}`];
  const server = await startCellgate(join(ROOT, 'dist/main.js'), { args: ['--rls-port', String(rlsPort), '--rls-config', confDir, ...backendArgs] });
  const pid = server.child.pid;
  const redisPid = redisServer === null ? null : redisServer.child.pid;
  // The backend's connection comes up in the background.
  await new Promise((r) => setTimeout(r, 500));

  const def = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto'], { includeDirs: [join(ROOT, 'proto')], keepCase: true, longs: Number, enums: String, defaults: true });
  const Rls = grpc.loadPackageDefinition(def).envoy.service.ratelimit.v3.RateLimitService;
  const client = new Rls(`127.0.0.1:${rlsPort}`, grpc.credentials.createInsecure());
  const should = (descriptors) => new Promise((resolve, reject) => client.ShouldRateLimit({ domain: 'bench', descriptors }, (e, r) => (e ? reject(e) : resolve(r))));
  const requests1 = Array.from({ length: KEYS }, (_, k) => [{ entries: [{ key: 'k0', value: `u${k}` }] }]);
  const requests4 = Array.from({ length: KEYS }, (_, k) => [0, 1, 2, 3].map((d) => ({ entries: [{ key: `k${d}`, value: `u${k}` }] })));
  const redis = new Redis({ port: server.port, host: '127.0.0.1' });
  const keys = Array.from({ length: KEYS }, (_, k) => `u${k}`);

  const rows = [];
  rows.push(await measure('ShouldRateLimit, 1 descriptor', server.port, pid, redisPid, 1, (i) => should(requests1[i % KEYS])));
  rows.push(await measure('CL.THROTTLE over RESP', server.port, pid, redisPid, 1, (i) => redis.call('CL.THROTTLE', keys[i % KEYS], '1000000000', '1000000000', '60')));
  rows.push(await measure('ShouldRateLimit, 4 descriptors', server.port, pid, redisPid, 4, (i) => should(requests4[i % KEYS])));
  rows.push(await measure('4 x CL.THROTTLE over RESP', server.port, pid, redisPid, 4, (i) => Promise.all([0, 1, 2, 3].map((d) => redis.call('CL.THROTTLE', `${d}:${keys[i % KEYS]}`, '1000000000', '1000000000', '60')))));
  // The service's own call over RESP: a fixed window of a minute whose key lives through it (a
  // CL.THROTTLE of 10^9 per minute is full again, its key gone, a few ns after each call).
  rows.push(await measure('RL.FIXEDWINDOW over RESP', server.port, pid, redisPid, 1, (i) => redis.call('RL.FIXEDWINDOW', `fw_k0_${keys[i % KEYS]}`, '1000000000', '60000')));
  rows.push(await measure('4 x RL.FIXEDWINDOW over RESP', server.port, pid, redisPid, 4, (i) => Promise.all([0, 1, 2, 3].map((d) => redis.call('RL.FIXEDWINDOW', `fw_k${d}_${keys[i % KEYS]}`, '1000000000', '60000')))));
  client.close();
  redis.disconnect();
  if (!BACKEND) rows.push(await measureFloor(Rls, requests1));

  process.stdout.write(`# rls bench: ${REQUESTS} requests, ${INFLIGHT} in flight, ${BACKEND ? 'Redis backend' : 'local'}, ${os.cpus()[0]?.model ?? '?'} x${os.cpus().length}, node ${process.version}\n`);
  process.stdout.write(`| run | requests/s | server CPU µs/request |${BACKEND ? ' Redis CPU µs/request | Redis CPU µs/decision | decisions/script |' : ''} p50 ms | p99 ms |\n|---|---:|---:|${BACKEND ? '---:|---:|---:|' : ''}---:|---:|\n`);
  for (const r of rows) process.stdout.write(`| ${r.name} | ${r.rps.toFixed(0)} | ${r.cpuUsPerRequest.toFixed(1)} |${BACKEND ? ` ${r.redisUsPerRequest.toFixed(1)} | ${(r.redisUsPerRequest / r.decisionsPerRequest).toFixed(1)} | ${r.perScript.toFixed(1)} |` : ''} ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} |\n`);
  const ratio1 = rows[0].cpuUsPerRequest / rows[1].cpuUsPerRequest;
  const ratio4 = rows[2].cpuUsPerRequest / rows[3].cpuUsPerRequest;
  process.stdout.write(`CPU per ShouldRateLimit / CPU per CL.THROTTLE: ${ratio1.toFixed(2)}x (1 descriptor), ${ratio4.toFixed(2)}x (4 descriptors vs 4 commands); target <= 4x with 1 descriptor\n`);
  const floor = rows.find((r) => r.name.startsWith('bare node:http2'));
  if (floor !== undefined) process.stdout.write(`Bare node:http2 per call / CPU per CL.THROTTLE: ${(floor.cpuUsPerRequest / rows[1].cpuUsPerRequest).toFixed(2)}x (the floor of any gRPC door on node:http2)\n`);
}

run(main);
