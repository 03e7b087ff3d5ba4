#!/usr/bin/env node
/**
 * Cost of RL.SLIDINGLOG calls that write nothing (refusals and COST 0 peeks) on a log of 1,000,000
 * entries, against dist/ (pure decisions, one process, no server):
 *  - a log of limit 1,000,000 over period 1,000,000 ms is filled with one accepted call per ms;
 *  - half a period later half the entries have slid out (refusals and peeks write nothing, so they
 *    do not prune them), and each call is timed: a peek, a refusal of COST 600,000 (more than the 500,000
 *    spendable), and, on the full log, a refusal of COST 1.
 *
 *   npx tsc -p tsconfig.json && node bench/slidinglog-history.mjs
 *   LIMITERS_DIST=/path/to/other/dist/limiters node bench/slidinglog-history.mjs   (another build)
 */
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

// LIMITERS_DIST=<another build's dist/limiters> measures that build instead.
const dist = process.env.LIMITERS_DIST ? pathToFileURL(path.resolve(process.env.LIMITERS_DIST)).href : new URL('../dist/limiters', import.meta.url).href;
const { newRateDecision } = await import(`${dist}/rate-decision.js`);
const { slidingLogDecide, slidingLogRecord } = await import(`${dist}/sliding-log.js`);

const LIMIT = 1_000_000;
const PERIOD = 1_000_000;
const T0 = 1_800_000_000_000;
const d = newRateDecision();
const key = { has: false, a: 0, b: 0, c: 0, blob: undefined };

const fillStart = performance.now();
for (let i = 0; i < LIMIT; i++) {
  const t = T0 + i;
  slidingLogDecide(LIMIT, PERIOD, 1, key.has, key.a, key.b, key.c, key.blob, t, d);
  if (!d.write) throw new Error(`fill refused at ${i}`);
  key.blob = slidingLogRecord(LIMIT, PERIOD, 1, key.has, key.a, key.b, key.c, key.blob, t, d);
  key.has = true;
  key.a = d.a;
  key.b = d.b;
  key.c = d.c;
}
console.log(`filled ${key.b} entries in ${(performance.now() - fillStart).toFixed(0)} ms`);

/** Median µs per call over batches of 50 calls (for up to 1 s): robust to a busy machine. */
function time(label, cost, t, expectLimited) {
  for (let i = 0; i < 20; i++) slidingLogDecide(LIMIT, PERIOD, cost, key.has, key.a, key.b, key.c, key.blob, t, d);
  const batches = [];
  const until = performance.now() + 1000;
  while (batches.length < 200 && (batches.length === 0 || performance.now() < until)) {
    const start = performance.now();
    for (let i = 0; i < 50; i++) slidingLogDecide(LIMIT, PERIOD, cost, key.has, key.a, key.b, key.c, key.blob, t, d);
    batches.push(((performance.now() - start) * 1000) / 50);
  }
  batches.sort((x, y) => x - y);
  const us = batches[batches.length >> 1];
  if (d.limited !== expectLimited) throw new Error(`${label}: limited ${d.limited}`);
  console.log(`${label.padEnd(58)} ${us.toFixed(2).padStart(10)} µs/call  (median of ${batches.length} batches of 50; remaining ${d.remaining}, retry_after_ms ${d.retryAfterMs})`);
}

const full = T0 + LIMIT - 1;
const half = full + PERIOD / 2;
time('full log (1M live), refused COST 1', 1, full, true);
time('half slid out (500k expired), peek COST 0', 0, half, false);
time('half slid out (500k expired), refused COST 600000', 600_000, half, true);

// The common case, for comparison: a warm key of limit 1000 per 60 s called every 7 ms (a ring of
// ~1000 entries, every call accepted or refused), decide + record as the command does.
{
  const k = { has: false, a: 0, b: 0, c: 0, blob: undefined };
  let t = T0;
  const step = () => {
    t += 7;
    slidingLogDecide(1000, 60_000, 1, k.has, k.a, k.b, k.c, k.blob, t, d);
    if (d.write) {
      k.blob = slidingLogRecord(1000, 60_000, 1, k.has, k.a, k.b, k.c, k.blob, t, d);
      k.has = true;
      k.a = d.a;
      k.b = d.b;
      k.c = d.c;
    }
  };
  for (let i = 0; i < 200_000; i++) step();
  const calls = 2_000_000;
  const start = performance.now();
  for (let i = 0; i < calls; i++) step();
  const ns = ((performance.now() - start) * 1e6) / calls;
  console.log(`${'warm key, limit 1000 per 60 s, a call every 7 ms'.padEnd(58)} ${ns.toFixed(0).padStart(10)} ns/call  (${k.b} entries)`);
}
