#!/usr/bin/env node
/**
 * The h2c prototype (server.mjs) against the bare node:http2 floor (bench/rls-http2-floor.mjs) and
 * cellgate's CL.THROTTLE over RESP (and its ShouldRateLimit, for scale): server CPU per call from /proc,
 * under the client of bench/rls.mjs (grpc-js from proto/, one channel, H2AB_INFLIGHT calls in flight;
 * ioredis with as many for RESP). Rounds interleave the rows, their order rotated each round, so drift
 * on a shared machine lands on every row; the ratios are the result, not the absolute µs.
 *
 *   npm run build && node bench/h2proto/ab.mjs     # H2AB_ROUNDS=3 H2AB_REQUESTS=40000 H2AB_INFLIGHT=64
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Redis } from 'ioredis';
import { cpuSeconds, freePort, pinned, PIN, ROOT, run, startCellgate, tempDir, track } from '../harness.mjs';

const ROUNDS = Number(process.env.H2AB_ROUNDS ?? 3);
const REQUESTS = Number(process.env.H2AB_REQUESTS ?? 40_000);
const INFLIGHT = Number(process.env.H2AB_INFLIGHT ?? 64);
const KEYS = 1000;

/** Runs `requests` calls of `one(i)` with `inflight` at once (as bench/rls.mjs). */
async function drive(requests, inflight, one) {
  let next = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: inflight }, async () => {
    while (next < requests) await one(next++);
  }));
  return (performance.now() - started) / 1000;
}

async function measure(pid, fn) {
  await drive(Math.min(5000, REQUESTS), INFLIGHT, fn); // JIT warm-up, as bench/rls.mjs
  const cpu0 = cpuSeconds(pid);
  const wall = await drive(REQUESTS, INFLIGHT, fn);
  return { us: ((cpuSeconds(pid) - cpu0) / REQUESTS) * 1e6, rps: REQUESTS / wall };
}

/** A Node server script on CPU 0 (where startCellgate puts cellgate), once it prints "ready". */
async function startScript(path) {
  const port = await freePort();
  const [cmd, args] = pinned(0, process.execPath, [join(ROOT, path), String(port)]);
  const child = track(spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] }));
  await new Promise((resolve, reject) => {
    child.stdout.once('data', resolve);
    child.once('exit', () => reject(new Error(`${path} exited`)));
  });
  return { port, pid: child.pid };
}

async function main() {
  const confDir = tempDir('cellgate-h2ab-');
  writeFileSync(join(confDir, 'bench.yaml'), 'domain: bench\ndescriptors:\n  - key: k0\n    rate_limit: { unit: minute, requests_per_unit: 1000000000 }\n');
  const rlsPort = await freePort();
  const cellgate = await startCellgate(join(ROOT, 'dist/main.js'), { args: ['--rls-port', String(rlsPort), '--rls-config', confDir] });
  const floor = await startScript('bench/rls-http2-floor.mjs');
  const proto = await startScript('bench/h2proto/server.mjs');

  const def = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto'], { includeDirs: [join(ROOT, 'proto')], keepCase: true, longs: Number, enums: String, defaults: true });
  const Rls = grpc.loadPackageDefinition(def).envoy.service.ratelimit.v3.RateLimitService;
  const requests1 = Array.from({ length: KEYS }, (_, k) => [{ entries: [{ key: 'k0', value: `u${k}` }] }]);
  const caller = (port) => {
    const client = new Rls(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const call = (i) => new Promise((resolve, reject) => client.ShouldRateLimit({ domain: 'bench', descriptors: requests1[i % KEYS] }, (e, r) => {
      if (e) reject(e);
      else if (r.overall_code !== 'OK' || r.statuses.length !== 1) reject(new Error(`unexpected answer ${JSON.stringify(r)}`));
      else resolve(r);
    }));
    return { client, call };
  };
  const g = { proto: caller(proto.port), floor: caller(floor.port), rls: caller(rlsPort) };
  const redis = new Redis({ port: cellgate.port, host: '127.0.0.1' });
  const keys = Array.from({ length: KEYS }, (_, k) => `u${k}`);

  const rows = [
    { name: 'h2c prototype (net.Socket), fixed answer', pid: proto.pid, fn: g.proto.call },
    { name: 'bare node:http2, fixed answer (floor)', pid: floor.pid, fn: g.floor.call },
    { name: 'CL.THROTTLE over RESP (cellgate)', pid: cellgate.child.pid, fn: (i) => redis.call('CL.THROTTLE', keys[i % KEYS], '1000000000', '1000000000', '60') },
    { name: 'ShouldRateLimit, 1 descriptor (cellgate)', pid: cellgate.child.pid, fn: g.rls.call },
  ];
  for (const r of rows) r.runs = [];
  for (let round = 0; round < ROUNDS; round++) {
    for (let k = 0; k < rows.length; k++) {
      const r = rows[(k + round) % rows.length];
      r.runs.push(await measure(r.pid, r.fn));
    }
  }
  // How many calls one read carried, in the prototype (its stats line goes to our stderr).
  process.kill(proto.pid, 'SIGUSR2');
  await new Promise((r) => setTimeout(r, 200));
  for (const c of Object.values(g)) c.client.close();
  redis.disconnect();

  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const out = (s) => process.stdout.write(`${s}\n`);
  out(`# h2c prototype A/B: ${ROUNDS} interleaved rounds x ${REQUESTS} calls, ${INFLIGHT} in flight, one connection; servers ${PIN ? 'on CPU 0 (taskset)' : 'unpinned'}; ${os.cpus()[0]?.model ?? '?'} x${os.cpus().length}, node ${process.version}`);
  out(`| run | server CPU µs/call, per round | median | calls/s (median) |\n|---|---|---:|---:|`);
  for (const r of rows) out(`| ${r.name} | ${r.runs.map((x) => x.us.toFixed(1)).join(' / ')} | ${median(r.runs.map((x) => x.us)).toFixed(1)} | ${median(r.runs.map((x) => x.rps)).toFixed(0)} |`);
  const [p, f, t, s] = rows;
  const ratio = (a, b) => a.runs.map((x, i) => (x.us / b.runs[i].us).toFixed(2)).join(' / ');
  out(`prototype / CL.THROTTLE, per round: ${ratio(p, t)}`);
  out(`floor / CL.THROTTLE, per round: ${ratio(f, t)}`);
  out(`prototype / floor, per round: ${ratio(p, f)}`);
  out(`ShouldRateLimit / CL.THROTTLE, per round: ${ratio(s, t)}`);
}

run(main);
