#!/usr/bin/env node
/**
 * node bench/cold-start.mjs [REPEATS]
 *
 * The first seconds after a start, A/B: fresh processes of each build (BENCH_MAIN, default this
 * checkout's dist/main.js, with the warm-up and with --warmup no; BENCH_COMPARE, another build, if
 * given), each loaded at once with pipeline-16 CL.THROTTLE over 1,000 keys in back-to-back ~0.5 s
 * redis-benchmark runs for BENCH_COLD_SECONDS [3]; per run: max latency and server CPU per op. The
 * builds alternate, REPEATS [2] times. npm run bench has the 5 s version next to redis-server.
 */
import { join } from 'node:path';
import { env, killAll, median, ROOT, runBenchmark, startCellgate, stop } from './harness.mjs';

const MAIN = env.BENCH_MAIN ?? join(ROOT, 'dist', 'main.js');
const SECONDS = Number(env.BENCH_COLD_SECONDS ?? 3);
const cmd = ['CL.THROTTLE', 'key:__rand_int__', '100', '1000', '60', '1'];
const variants = [
  ...(env.BENCH_COMPARE ? [['base', env.BENCH_COMPARE, []]] : []),
  ['this', MAIN, []],
  ['this --warmup no', MAIN, ['--warmup', 'no']],
];
for (let rep = 0; rep < Number(process.argv[2] ?? 2); rep++) {
  for (const [label, main, args] of variants) {
    const s = await startCellgate(main, { args });
    const t0 = performance.now();
    const rs = [];
    let n = 200_000;
    while (performance.now() - t0 < SECONDS * 1000) {
      const r = await runBenchmark(s.port, 16, n, cmd, s.child.pid, { keys: 1000 });
      rs.push(r);
      n = Math.max(20_000, Math.round((r.rps * 0.5) / 10_000) * 10_000);
    }
    await stop(s.child);
    console.log(`${label.padEnd(17)} max ms per run ${rs.map((r) => r.max.toFixed(0)).join(',')}  CPU µs/op per run ${rs.map((r) => r.cpuUsPerOp.toFixed(2)).join(',')}  p99 median ${median(rs.map((r) => r.p99)).toFixed(2)} ms  ready after ${s.readyMs.toFixed(0)} ms`);
  }
}
killAll();
process.exit(0);
