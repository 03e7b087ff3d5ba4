#!/usr/bin/env node
/**
 * Where the rate limit service's CPU per ShouldRateLimit goes: cellgate under --cpu-prof, one
 * descriptor per call over one gRPC channel as bench/rls.mjs sends them, then the top functions by
 * self time (native/V8 buckets included).
 *
 *   npm run build && node bench/rls-profile.mjs       # RLS_PROFILE_REQUESTS=60000 RLS_BENCH_INFLIGHT=64
 */
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { readFileSync } from 'node:fs';
import { freePort, ROOT, run, startCellgate, stop, tempDir } from './harness.mjs';

/** Self time per function and per script of the samples between `fromUs` and `toUs`, idle left out. */
function summarize(file, fromUs, toUs) {
  const prof = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const fn = new Map();
  const byFile = new Map();
  let t = prof.startTime;
  let busy = 0;
  for (let i = 0; i < prof.samples.length; i++) {
    t += prof.timeDeltas[i] ?? 0;
    const dt = prof.timeDeltas[i + 1] ?? 0;
    if (t < fromUs || t > toUs) continue;
    const cf = byId.get(prof.samples[i]).callFrame;
    if (cf.functionName === '(idle)') continue;
    const url = cf.url.replace(/^file:.*?\/dist\//, 'dist/');
    const key = `${cf.functionName || '(anonymous)'}  ${url}${url ? `:${cf.lineNumber + 1}` : ''}`;
    fn.set(key, (fn.get(key) ?? 0) + dt);
    byFile.set(url || cf.functionName, (byFile.get(url || cf.functionName) ?? 0) + dt);
    busy += dt;
  }
  const top = (m) => [...m].sort((a, b) => b[1] - a[1]).slice(0, 45).map(([name, us]) => ({ name, file: name, location: '', ms: us / 1000, pct: (100 * us) / busy }));
  return { functions: top(fn), files: top(byFile), busyMs: busy / 1000 };
}

const REQUESTS = Number(process.env.RLS_PROFILE_REQUESTS ?? 60_000);
const INFLIGHT = Number(process.env.RLS_BENCH_INFLIGHT ?? 64);

async function main() {
  const confDir = tempDir('cellgate-rls-prof-');
  writeFileSync(join(confDir, 'bench.yaml'), 'domain: bench\ndescriptors:\n  - key: k0\n    rate_limit: { unit: minute, requests_per_unit: 1000000000 }\n');
  const profDir = mkdtempSync(join(os.tmpdir(), 'cellgate-rls-prof-'));
  const rlsPort = await freePort();
  const server = await startCellgate(join(ROOT, 'dist/main.js'), { nodeArgs: ['--cpu-prof', '--cpu-prof-dir', profDir], args: ['--rls-port', String(rlsPort), '--rls-config', confDir] });
  const def = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto'], { includeDirs: [join(ROOT, 'proto')], keepCase: true, longs: Number, enums: String, defaults: true });
  const Rls = grpc.loadPackageDefinition(def).envoy.service.ratelimit.v3.RateLimitService;
  const client = new Rls(`127.0.0.1:${rlsPort}`, grpc.credentials.createInsecure());
  const requests = Array.from({ length: 1000 }, (_, k) => [{ entries: [{ key: 'k0', value: `u${k}` }] }]);
  const drive = async (n) => {
    let next = 0;
    await Promise.all(Array.from({ length: INFLIGHT }, async () => {
    while (next < n) {
      const i = next++;
      await new Promise((resolve, reject) => client.ShouldRateLimit({ domain: 'bench', descriptors: requests[i % 1000] }, (e, r) => (e ? reject(e) : resolve(r))));
    }
    }));
  };
  // The start (the warm-up of the RESP paths) and the JIT's first calls are left out: only the
  // samples from the measured calls on (CLOCK_MONOTONIC µs, as V8's profile timestamps) count.
  await drive(5000);
  const fromUs = Number(process.hrtime.bigint() / 1000n);
  await drive(REQUESTS);
  const toUs = Number(process.hrtime.bigint() / 1000n);
  client.close();
  await stop(server.child);
  const file = readdirSync(profDir).find((f) => f.endsWith('.cpuprofile'));
  const { functions, files, busyMs } = summarize(join(profDir, file), fromUs, toUs);
  process.stdout.write(`# ${REQUESTS} calls, busy ${busyMs.toFixed(0)} ms (${((busyMs * 1000) / REQUESTS).toFixed(1)} µs/call incl. profiler)\n`);
  for (const f of functions) process.stdout.write(`${f.pct.toFixed(1).padStart(5)}%  ${f.ms.toFixed(0).padStart(6)} ms  ${f.name}  ${f.location}\n`);
  process.stdout.write('\n');
  for (const f of files) process.stdout.write(`${f.pct.toFixed(1).padStart(5)}%  ${f.ms.toFixed(0).padStart(6)} ms  ${f.file}\n`);
  process.stdout.write(`profile: ${join(profDir, file)}\n`);
}

run(main);
