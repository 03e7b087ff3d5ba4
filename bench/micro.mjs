#!/usr/bin/env node
/**
 * Micro-benchmarks (the `benchmark` package) of the pieces on the hot path, against dist/:
 *  - request parsing: cellgate's RequestParser against redis-parser (the ecosystem's RESP parser,
 *    which reads a request's multibulk as a reply array), on the same 16 pipelined CL.THROTTLE;
 *  - the reply writer: a CL.THROTTLE reply (array of 5 integers);
 *  - each limiter's pure decision, on a warm key.
 *
 *   npm run build && node bench/micro.mjs
 */
import os from 'node:os';
import Benchmark from 'benchmark';
import RedisParser from 'redis-parser';
import { RequestParser } from '../dist/protocol/request-parser.js';
import { ReplyWriter } from '../dist/protocol/reply-writer.js';
import { cellParams, cellThrottle, newCellDecision } from '../dist/limiters/cell-throttle.js';
import { gcraParams, gcraDecide, newGcraDecision } from '../dist/limiters/redis-gcra.js';
import { newRateDecision } from '../dist/limiters/rate-decision.js';
import { tokenBucketDecide } from '../dist/limiters/token-bucket.js';
import { leakyBucketDecide } from '../dist/limiters/leaky-bucket.js';
import { fixedWindowDecide } from '../dist/limiters/fixed-window.js';
import { slidingWindowDecide } from '../dist/limiters/sliding-window.js';

console.log(`$ node bench/micro.mjs`);
console.log(`machine: ${os.cpus()[0]?.model ?? '?'} x${os.cpus().length}, node ${process.version}, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);

// 16 pipelined CL.THROTTLE commands, as redis-benchmark -P 16 sends them.
const commands = [];
for (let i = 0; i < 16; i++) {
  const key = `key:${String(100000 + i * 7919).padStart(12, '0')}`;
  commands.push(`*6\r\n$11\r\nCL.THROTTLE\r\n$${key.length}\r\n${key}\r\n$3\r\n100\r\n$4\r\n1000\r\n$2\r\n60\r\n$1\r\n1\r\n`);
}
const pipeline = Buffer.from(commands.join(''));

const ours = new RequestParser({ maxBulkBytes: 512 * 1024 * 1024 });
let parsed = 0;
const theirs = new RedisParser({ returnBuffers: true, returnReply: (reply) => { parsed += reply.length; }, returnError: () => {} });

const writer = new ReplyWriter();
const cell = cellParams(100, 1000, 60);
const cellOut = newCellDecision();
const gcra = gcraParams(100, 1000, 60, 1);
const gcraOut = newGcraDecision();
const rate = newRateDecision();
let nowMs = 1_800_000_000_000;
let state = { a: 0, b: 0, c: 0, has: false };
const keep = () => {
  if (rate.write) state = { a: rate.a, b: rate.b, c: rate.c, has: true };
};
/** Each limiter starts from a fresh key of its own (their state columns mean different things). */
const fresh = { onStart: () => { state = { a: 0, b: 0, c: 0, has: false }; } };

const results = [];
const suite = new Benchmark.Suite();
suite
  .add('parse 16 CL.THROTTLE: cellgate RequestParser', () => {
    ours.feed(pipeline);
    let args;
    while ((args = ours.next(true)) !== null) parsed += args.length;
  })
  .add('parse 16 CL.THROTTLE: redis-parser (returnBuffers)', () => {
    theirs.execute(pipeline);
  })
  .add('reply writer: CL.THROTTLE reply ×16 and take()', () => {
    for (let i = 0; i < 16; i++) {
      writer.arrayHeader(5);
      writer.integer(0);
      writer.integer(101);
      writer.integer(100 - i);
      writer.integer(-1);
      writer.integer(1);
    }
    writer.take();
  })
  .add('limiter: CL.THROTTLE (cellThrottle)', () => {
    nowMs += 7;
    cellThrottle(cell, 1, true, nowMs * 1000 - 500_000, 0, nowMs * 1000, cellOut);
  })
  .add('limiter: GCRA (gcraDecide)', () => {
    nowMs += 7;
    gcraDecide(gcra, true, nowMs * 1000 - 500_000, nowMs * 1000, gcraOut);
  })
  .add('limiter: token bucket', () => {
    nowMs += 7;
    tokenBucketDecide(1000, 60_000, 100, 1, state.has, state.a, state.b, nowMs, rate);
    keep();
  }, fresh)
  .add('limiter: leaky bucket', () => {
    nowMs += 7;
    leakyBucketDecide(1000, 60_000, 100, 1, state.has, state.a, state.b, nowMs, rate);
    keep();
  }, fresh)
  .add('limiter: fixed window', () => {
    nowMs += 7;
    fixedWindowDecide(1000, 60_000, 1, state.has, state.a, state.b, nowMs, rate);
    keep();
  }, fresh)
  .add('limiter: sliding window', () => {
    nowMs += 7;
    slidingWindowDecide(1000, 60_000, 1, state.has, state.a, state.b, state.c, nowMs, rate);
    keep();
  }, fresh)
  .on('cycle', (event) => {
    const t = event.target;
    results.push([t.name, t.hz, t.stats.rme]);
    console.log(String(t));
  })
  .on('complete', () => {
    console.log('\n| benchmark | ops/s | ± | ns/op |');
    console.log('|---|---:|---:|---:|');
    for (const [name, hz, rme] of results) console.log(`| ${name} | ${Math.round(hz).toLocaleString('en-US')} | ${rme.toFixed(1)}% | ${(1e9 / hz).toFixed(0)} |`);
    const [oursHz, theirsHz] = [results[0][1], results[1][1]];
    console.log(`\nparser: cellgate ${(oursHz / theirsHz).toFixed(2)}× redis-parser on the same bytes (${(1e9 / oursHz / 16).toFixed(0)} vs ${(1e9 / theirsHz / 16).toFixed(0)} ns per command)`);
    if (parsed === 0) throw new Error('nothing was parsed');
  })
  .run();
