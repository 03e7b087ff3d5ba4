#!/usr/bin/env node
/**
 * A/B of the RL.* limiters' pure decisions between two builds, in one process, rounds interleaved
 * (so a busy machine slows both alike): the warm-key loops of bench/micro.mjs, plus a warm sliding
 * log (limit 1000 per 60 s, a call every 7 ms, decide + record). Prints the median ns per call.
 *
 *   node bench/limiters-ab.mjs <old dist/limiters dir> [<new dist/limiters dir>, default dist/limiters]
 *   e.g. git show <rev>:src/limiters/X.ts into /tmp/old/src/limiters, compile it, then
 *   node bench/limiters-ab.mjs /tmp/old/dist/limiters
 */
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

const dirs = [process.argv[2], process.argv[3] ?? 'dist/limiters'].map((d) => pathToFileURL(path.resolve(d)).href);
if (!process.argv[2]) throw new Error('usage: node bench/limiters-ab.mjs <old dist/limiters> [<new dist/limiters>]');

async function load(dir) {
  const m = {};
  for (const f of ['rate-decision', 'token-bucket', 'leaky-bucket', 'fixed-window', 'sliding-window', 'sliding-log']) Object.assign(m, await import(`${dir}/${f}.js`));
  return m;
}

function scenarios(m) {
  const rate = m.newRateDecision();
  let nowMs = 1_800_000_000_000;
  let s = { a: 0, b: 0, c: 0, has: false, blob: undefined };
  const keep = () => {
    if (rate.write) s = { a: rate.a, b: rate.b, c: rate.c, has: true, blob: s.blob };
  };
  return {
    'token bucket': () => { nowMs += 7; m.tokenBucketDecide(1000, 60_000, 100, 1, s.has, s.a, s.b, nowMs, rate); keep(); },
    'leaky bucket': () => { nowMs += 7; m.leakyBucketDecide(1000, 60_000, 100, 1, s.has, s.a, s.b, nowMs, rate); keep(); },
    'fixed window': () => { nowMs += 7; m.fixedWindowDecide(1000, 60_000, 1, s.has, s.a, s.b, nowMs, rate); keep(); },
    'sliding window': () => { nowMs += 7; m.slidingWindowDecide(1000, 60_000, 1, s.has, s.a, s.b, s.c, nowMs, rate); keep(); },
    'sliding log': () => {
      nowMs += 7;
      m.slidingLogDecide(1000, 60_000, 1, s.has, s.a, s.b, s.c, s.blob, nowMs, rate);
      if (rate.write) {
        const blob = m.slidingLogRecord(1000, 60_000, 1, s.has, s.a, s.b, s.c, s.blob, nowMs, rate);
        s = { a: rate.a, b: rate.b, c: rate.c, has: true, blob };
      }
    },
  };
}

const builds = await Promise.all(dirs.map(load));
const runs = builds.map(scenarios);
const ROUNDS = 15;
const CALLS = 400_000;
console.log(`| limiter | old ns/call | new ns/call | new/old |`);
console.log(`|---|---:|---:|---:|`);
for (const name of Object.keys(runs[0])) {
  const times = [[], []];
  for (let r = 0; r < ROUNDS; r++) {
    for (let b = 0; b < 2; b++) {
      const f = runs[b][name];
      const start = performance.now();
      for (let i = 0; i < CALLS; i++) f();
      times[b].push(((performance.now() - start) * 1e6) / CALLS);
    }
  }
  const median = (xs) => xs.sort((x, y) => x - y)[xs.length >> 1];
  const [o, n] = times.map(median);
  console.log(`| ${name} | ${o.toFixed(1)} | ${n.toFixed(1)} | ${(n / o).toFixed(2)} |`);
}
