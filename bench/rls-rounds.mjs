#!/usr/bin/env node
/**
 * The rate limit service's CPU per ShouldRateLimit (one descriptor, local) against the bare
 * node:http2 floor (bench/rls-http2-floor.mjs), in interleaved rounds: each round measures every
 * server once, in turn, fresh, under the same client, so a machine whose load swings (other jobs
 * on few cores) weighs on all alike; the medians and ranges over the rounds are printed.
 *
 *   npm run build && node bench/rls-rounds.mjs                       # RLS_BENCH_ROUNDS=5 RLS_BENCH_REQUESTS=10000
 *   RLS_BENCH_PIN=0 node bench/rls-rounds.mjs                     # cellgate unpinned, as the floor
 *   RLS_BENCH_OTHER=/path/to/other/dist/main.js node bench/rls-rounds.mjs   # a second build in the same rounds
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { cpuSeconds, freePort, median, pinned, ROOT, run, startCellgate, stop, tempDir, track } from './harness.mjs';

const ROUNDS = Number(process.env.RLS_BENCH_ROUNDS ?? 5);
const REQUESTS = Number(process.env.RLS_BENCH_REQUESTS ?? 10_000);
const INFLIGHT = Number(process.env.RLS_BENCH_INFLIGHT ?? 64);
const KEYS = 1000;
/**
 * RLS_BENCH_PIN=0: neither cellgate nor the floor pinned to CPU 0 (by default both are). Never one
 * without the other: on a loaded machine a pinned server waits for its CPU, runs at a fraction of a free one's rate and so
 * reads more calls per wake-up less often: fewer calls share each socket read, write and timer, and
 * its CPU per call rises for that alone.
 */
const PIN = process.env.RLS_BENCH_PIN !== '0';

const def = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto'], { includeDirs: [join(ROOT, 'proto')], keepCase: true, longs: Number, enums: String, defaults: true });
const Rls = grpc.loadPackageDefinition(def).envoy.service.ratelimit.v3.RateLimitService;
const requests1 = Array.from({ length: KEYS }, (_, k) => [{ entries: [{ key: 'k0', value: `u${k}` }] }]);

/** Calls per second of each measurement, in order (printed with the rounds). */
const rates = [];

/** Server CPU µs per call over `REQUESTS` calls on `port` (after a warm-up of 5,000). */
async function cpuPerCall(port, pid) {
  const client = new Rls(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const drive = async (n) => {
    let next = 0;
    await Promise.all(Array.from({ length: INFLIGHT }, async () => {
      while (next < n) {
        const i = next++;
        await new Promise((resolve, reject) => client.ShouldRateLimit({ domain: 'bench', descriptors: requests1[i % KEYS] }, (e, r) => (e ? reject(e) : resolve(r))));
      }
    }));
  };
  await drive(5000);
  const cpu0 = cpuSeconds(pid);
  const t0 = performance.now();
  await drive(REQUESTS);
  const us = ((cpuSeconds(pid) - cpu0) / REQUESTS) * 1e6;
  rates.push(REQUESTS / ((performance.now() - t0) / 1000));
  client.close();
  return us;
}

async function cellgate(main, confDir) {
  const rlsPort = await freePort();
  const server = await startCellgate(main, { pin: PIN, args: ['--rls-port', String(rlsPort), '--rls-config', confDir] });
  try {
    return await cpuPerCall(rlsPort, server.child.pid);
  } finally {
    await stop(server.child);
  }
}

async function floor() {
  const port = await freePort();
  // Pinned exactly when cellgate is, so both run under the same CPU placement.
  const [cmd, args] = PIN ? pinned(0, process.execPath, [join(ROOT, 'bench/rls-http2-floor.mjs'), String(port)]) : [process.execPath, [join(ROOT, 'bench/rls-http2-floor.mjs'), String(port)]];
  const child = track(spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] }));
  await new Promise((resolve, reject) => {
    child.stdout.once('data', resolve);
    child.once('exit', () => reject(new Error('rls-http2-floor.mjs exited')));
  });
  try {
    return await cpuPerCall(port, child.pid);
  } finally {
    await stop(child);
  }
}

async function main() {
  const confDir = tempDir('cellgate-rls-rounds-');
  writeFileSync(join(confDir, 'bench.yaml'), 'domain: bench\ndescriptors:\n  - key: k0\n    rate_limit: { unit: minute, requests_per_unit: 1000000000 }\n');
  const runs = [['cellgate', () => cellgate(join(ROOT, 'dist/main.js'), confDir)]];
  if (process.env.RLS_BENCH_OTHER) runs.push([`other (${process.env.RLS_BENCH_OTHER})`, () => cellgate(process.env.RLS_BENCH_OTHER, confDir)]);
  runs.push(['bare node:http2 (floor)', floor]);
  const results = runs.map(() => []);
  const ratios = runs.map(() => []);
  for (let r = 0; r < ROUNDS; r++) {
    for (let k = 0; k < runs.length; k++) results[k].push(await runs[k][1]());
    const f = results[runs.length - 1][r];
    for (let k = 0; k < runs.length; k++) ratios[k].push(results[k][r] / f);
    process.stderr.write(`round ${r + 1}: ${results.map((x) => x[r].toFixed(1)).join(' / ')} µs at ${rates.slice(-runs.length).map((x) => x.toFixed(0)).join(' / ')} calls/s\n`);
  }
  process.stdout.write(`# ShouldRateLimit, 1 descriptor, local: server CPU µs per call, ${ROUNDS} interleaved rounds of ${REQUESTS} calls, ${INFLIGHT} in flight, cellgate and the floor ${PIN ? 'pinned to CPU 0' : 'unpinned'}\n`);
  process.stdout.write('| server | median µs | range µs | median ratio to the floor (per round) | range |\n|---|---:|---:|---:|---:|\n');
  for (let k = 0; k < runs.length; k++) {
    const xs = results[k];
    const rs = ratios[k];
    process.stdout.write(`| ${runs[k][0]} | ${median(xs).toFixed(1)} | ${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)} | ${median(rs).toFixed(2)}× | ${Math.min(...rs).toFixed(2)}–${Math.max(...rs).toFixed(2)}× |\n`);
  }
}

run(main);
