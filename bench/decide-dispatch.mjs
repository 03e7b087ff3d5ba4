#!/usr/bin/env node
/**
 * The RL.* decide step, A/B in one process: the switch on the key type that src/commands/ratelimit.ts
 * had (direct calls of each limiter's function), against the registry's entry call
 * (`algo.decide(...)`, one call site for every algorithm) that it has now. Both read the key's state
 * from a real Keyspace the same way and write into one reused decision; nothing is stored, so every
 * round decides on the same state. Two mixes: one algorithm only (a monomorphic site), and all six
 * interleaved (the site sees every entry). Rounds alternate A and B; the fastest and the median
 * ns/call of each are printed (on a shared machine the fastest round is the least disturbed one).
 *
 *   npm run build && node bench/decide-dispatch.mjs [rounds, default 31]
 */
import os from 'node:os';
import { Keyspace, KeyType } from '../dist/keyspace/keyspace.js';
import { ALGORITHMS } from '../dist/limiters/registry.js';
import { newRateDecision } from '../dist/limiters/rate-decision.js';
import { newGcraMsParams } from '../dist/limiters/gcra-ms.js';
import { tokenBucketDecide } from '../dist/limiters/token-bucket.js';
import { leakyBucketDecide } from '../dist/limiters/leaky-bucket.js';
import { fixedWindowDecide } from '../dist/limiters/fixed-window.js';
import { slidingWindowDecide } from '../dist/limiters/sliding-window.js';
import { slidingLogDecide } from '../dist/limiters/sliding-log.js';
import { gcraMsDecide } from '../dist/limiters/gcra-ms.js';

const ROUNDS = Number(process.argv[2] ?? 31);
const CALLS = 500_000;
console.log(`$ node bench/decide-dispatch.mjs ${ROUNDS}`);
console.log(`machine: ${os.cpus()[0]?.model ?? '?'} x${os.cpus().length}, node ${process.version}, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);

const ks = new Keyspace();
const nowMs = 1_700_000_000_000;
const nowUs = nowMs * 1000;
/** One limit per algorithm, its key stored once by a real decision (state as a live key has it). */
const limits = ALGORITHMS.map((algo) => {
  const l = { algo, limit: 1000, periodMs: 60_000, burst: 1000, gcra: newGcraMsParams(), slot: -1, decision: newRateDecision() };
  algo.checkParams(l.limit, l.periodMs, l.burst, l.gcra);
  algo.decide(l, 1, false, 0, 0, 0, undefined, nowMs - 5, nowUs - 5000, l.decision);
  if (algo.hasBlob) algo.commit(l, 1, false, 0, 0, 0, undefined, nowMs - 5, 0, l.decision);
  l.slot = ks.create(`bench:${algo.typeName}`, algo.type);
  if (algo.hasBlob) ks.setBlob(l.slot, l.decision.blob);
  ks.setState(l.slot, l.decision.a, l.decision.b, l.decision.c);
  ks.setExpireAtMs(l.slot, l.decision.expireAtMs);
  return l;
});

/** A: the switch ratelimit.ts had. */
function decideSwitch(l, cost) {
  const slot = l.slot;
  const has = slot !== -1;
  const a = has ? ks.getA(slot) : 0;
  const b = has ? ks.getB(slot) : 0;
  const d = l.decision;
  switch (l.algo.type) {
    case KeyType.TokenBucket: tokenBucketDecide(l.limit, l.periodMs, l.burst, cost, has, a, b, nowMs, d); break;
    case KeyType.LeakyBucket: leakyBucketDecide(l.limit, l.periodMs, l.burst, cost, has, a, b, nowMs, d); break;
    case KeyType.FixedWindow: fixedWindowDecide(l.limit, l.periodMs, cost, has, a, b, nowMs, d); break;
    case KeyType.SlidingWindow: slidingWindowDecide(l.limit, l.periodMs, cost, has, a, b, has ? ks.getC(slot) : 0, nowMs, d); break;
    case KeyType.SlidingLog: slidingLogDecide(l.limit, l.periodMs, cost, has, a, b, has ? ks.getC(slot) : 0, has ? ks.getBlob(slot) : undefined, nowMs, d); break;
    default: gcraMsDecide(l.gcra, cost, has, a, b, nowUs, d);
  }
}

/** B: the entry call ratelimit.ts has now. */
function decideEntry(l, cost) {
  const slot = l.slot;
  const algo = l.algo;
  if (slot === -1) {
    algo.decide(l, cost, false, 0, 0, 0, undefined, nowMs, nowUs, l.decision);
    return;
  }
  algo.decide(l, cost, true, ks.getA(slot), ks.getB(slot), algo.readsC ? ks.getC(slot) : 0, algo.hasBlob ? ks.getBlob(slot) : undefined, nowMs, nowUs, l.decision);
}

// One loop per variant (not one loop taking the function): each call site sees one function.
function runSwitch(mix) {
  let sink = 0;
  const started = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i++) {
    const l = mix[i % mix.length];
    decideSwitch(l, 1);
    sink += l.decision.remaining;
  }
  return done(started, sink);
}

function runEntry(mix) {
  let sink = 0;
  const started = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i++) {
    const l = mix[i % mix.length];
    decideEntry(l, 1);
    sink += l.decision.remaining;
  }
  return done(started, sink);
}

function done(started, sink) {
  if (sink === -1) console.log('never');
  return Number(process.hrtime.bigint() - started) / CALLS;
}

const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
const mixes = [['token bucket only', [limits[0]]], ['all six interleaved', limits]];
for (const [name, mix] of mixes) {
  const a = [];
  const b = [];
  for (let r = 0; r < ROUNDS; r++) {
    // Each goes first in every other round: neither always runs on the other's leftovers.
    if (r % 2 === 0) {
      a.push(runSwitch(mix));
      b.push(runEntry(mix));
    } else {
      b.push(runEntry(mix));
      a.push(runSwitch(mix));
    }
  }
  const min = (xs) => Math.min(...xs);
  console.log(`[bench] decide, ${name}: switch min ${min(a).toFixed(1)} / median ${median(a).toFixed(1)} ns/call, entry min ${min(b).toFixed(1)} / median ${median(b).toFixed(1)} ns/call (${ROUNDS} rounds of ${CALLS} each)`);
}
