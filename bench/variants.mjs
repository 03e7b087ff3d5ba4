#!/usr/bin/env node
/**
 * npm run bench:variants  (= npm run build && node bench/variants.mjs)
 *
 * What the other limiter commands, transactions and ACL checks cost next to a plain CL.THROTTLE, on
 * one cellgate, at pipeline 16 over BENCH_KEYS random keys: server CPU per operation (CPU time of all
 * its threads, /proc/<pid>/task/<tid>/schedstat, ÷ requests) and requests/s, medians of BENCH_ROUNDS
 * interleaved rounds (the variants in order, then reversed).
 *   - CL.THROTTLE, GCRA and every RL.* limiter, RL.ALL with two limits: redis-benchmark
 *   - CL.THROTTLE as an ACL user with `+@limiter ~key:*` (AUTH'd by redis-benchmark --user/-a)
 *   - MULTI, 16 × CL.THROTTLE, EXEC against the same 16 CL.THROTTLE without the transaction: a small
 *     load generator here (redis-benchmark sends one command), 50 connections, each batch followed by a
 *     PING whose PONG tells the batch is answered; CPU per CL.THROTTLE compared
 * Environment: BENCH_KEYS [10000], BENCH_ROUNDS [3], BENCH_SECONDS [1.5], BENCH_CLIENTS [50],
 * BENCH_MAIN [dist/main.js], BENCH_WRITE [1] (its section of bench/RESULTS.md), BENCH_TIMEOUT [600].
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { command, cpuSeconds, env, fmtInt, fmtRatio, machine, median, ROOT, run, runBenchmark, startCellgate, stop, table, watchdog } from './harness.mjs';

const MAIN = env.BENCH_MAIN ?? join(ROOT, 'dist', 'main.js');
const RESULTS = join(ROOT, 'bench', 'RESULTS.md');
const KEYS = Number(env.BENCH_KEYS ?? 10_000);
const ROUNDS = Math.max(1, Number(env.BENCH_ROUNDS ?? 3));
const SECONDS = Number(env.BENCH_SECONDS ?? 1.5);
const CLIENTS = Number(env.BENCH_CLIENTS ?? 50);
const WRITE = env.BENCH_WRITE !== '0';
watchdog(Number(env.BENCH_TIMEOUT ?? 600));
const say = (s = '') => process.stdout.write(s + '\n');

const K = 'key:__rand_int__';
const ACL_USER = ['app', 'app-password'];
const variants = [
  { id: 'cl.throttle', cmd: ['CL.THROTTLE', K, '100', '1000', '60', '1'] },
  { id: 'cl.throttle (ACL user +@limiter)', cmd: ['CL.THROTTLE', K, '100', '1000', '60', '1'], auth: ACL_USER },
  { id: 'gcra', cmd: ['GCRA', K, '100', '1000', '60'] },
  { id: 'rl.tokenbucket', cmd: ['RL.TOKENBUCKET', K, '1000', '60000', 'BURST', '101'] },
  { id: 'rl.leakybucket', cmd: ['RL.LEAKYBUCKET', K, '1000', '60000', 'BURST', '101'] },
  { id: 'rl.fixedwindow', cmd: ['RL.FIXEDWINDOW', K, '1000', '60000'] },
  { id: 'rl.slidingwindow', cmd: ['RL.SLIDINGWINDOW', K, '1000', '60000'] },
  { id: 'rl.slidinglog', cmd: ['RL.SLIDINGLOG', K, '100', '60000'] },
  { id: 'rl.gcra', cmd: ['RL.GCRA', K, '1000', '60000', 'BURST', '101'] },
  { id: 'rl.all (2 limits)', cmd: ['RL.ALL', '2', K, 'TOKENBUCKET', '1000', '60000', `${K}:h`, 'FIXEDWINDOW', '10000', '3600000'] },
];

const enc = (args) => `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
const PONG = Buffer.from('+PONG\r\n');

/**
 * CLIENTS connections, each sending a batch of 16 CL.THROTTLE (inside MULTI/EXEC or not) plus a PING
 * and waiting for the PONG, until `batches` batches are answered. Resolves with {rps (CL.THROTTLE/s), cpuUsPerOp}.
 */
function transactionLoad(port, pid, multi, batches) {
  const pick = () => `key:${String(Math.floor(Math.random() * KEYS)).padStart(12, '0')}`;
  return new Promise((resolve, reject) => {
    const cpu0 = cpuSeconds(pid);
    const t0 = performance.now();
    let sent = 0;
    let answered = 0;
    let open = CLIENTS;
    for (let c = 0; c < CLIENTS; c++) {
      const socket = net.connect(port, '127.0.0.1');
      socket.setNoDelay(true);
      let tail = Buffer.alloc(0);
      const send = () => {
        sent++;
        let b = multi ? enc(['MULTI']) : '';
        for (let i = 0; i < 16; i++) b += enc(['CL.THROTTLE', pick(), '100', '1000', '60', '1']);
        if (multi) b += enc(['EXEC']);
        socket.write(b + enc(['PING']));
      };
      socket.on('connect', send);
      socket.on('error', reject);
      socket.on('data', (chunk) => {
        tail = Buffer.concat([tail, chunk]).subarray(-PONG.length);
        if (!tail.equals(PONG)) return;
        tail = Buffer.alloc(0);
        answered++;
        if (sent < batches) return send();
        socket.destroy();
        if (--open === 0) {
          const seconds = (performance.now() - t0) / 1000;
          resolve({ rps: (answered * 16) / seconds, cpuUsPerOp: ((cpuSeconds(pid) - cpu0) * 1e6) / (answered * 16), seconds });
        }
      });
    }
  });
}

async function main() {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run npm run build`);
  const facts = machine(MAIN);
  const started = new Date();
  say(`# node bench/variants.mjs (npm run bench:variants)  ${started.toISOString()}  cellgate ${facts.revision}, load average ${facts.loadavg}`);
  const server = await startCellgate(MAIN);
  const pid = server.child.pid;
  const acl = await command(server.port, ['ACL', 'SETUSER', ACL_USER[0], 'on', `>${ACL_USER[1]}`, '~key:*', 'resetchannels', '+@limiter', '+ping', '+flushall']);
  if (acl instanceof Error) throw acl;
  const opts = (v) => ({ clients: CLIENTS, keys: KEYS, auth: v.auth });
  const requests = new Map();
  for (const v of variants) {
    await command(server.port, ['FLUSHALL']);
    await runBenchmark(server.port, 16, 200_000, v.cmd, undefined, opts(v)); // warm-up
    const r = await runBenchmark(server.port, 16, 200_000, v.cmd, undefined, opts(v));
    requests.set(v.id, Math.max(20_000, Math.round((r.rps * SECONDS) / 10_000) * 10_000));
  }
  await transactionLoad(server.port, pid, true, 2_000);
  const probe = await transactionLoad(server.port, pid, false, 2_000);
  const batches = Math.max(500, Math.round((probe.rps * SECONDS) / 16));

  const runs = new Map();
  const push = (id, r) => {
    if (!runs.has(id)) runs.set(id, []);
    runs.get(id).push(r);
    say(`${id.padEnd(36)} ${fmtInt(r.rps).padStart(10)} /s  CPU ${r.cpuUsPerOp.toFixed(3)} µs/op`);
  };
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 ? variants : [...variants].reverse();
    for (const v of order) {
      await command(server.port, ['FLUSHALL']);
      push(v.id, await runBenchmark(server.port, 16, requests.get(v.id), v.cmd, pid, opts(v)));
    }
    for (const multi of round % 2 ? [false, true] : [true, false]) {
      await command(server.port, ['FLUSHALL']);
      push(multi ? 'MULTI + 16 × cl.throttle + EXEC' : '16 × cl.throttle (same load generator)', await transactionLoad(server.port, pid, multi, batches));
    }
  }
  await stop(server.child);

  const med = (id) => ({ rps: median(runs.get(id).map((r) => r.rps)), cpu: median(runs.get(id).map((r) => r.cpuUsPerOp)) });
  const cl = med('cl.throttle');
  const plain = med('16 × cl.throttle (same load generator)');
  const rows = [...runs.keys()].map((id) => {
    const x = med(id);
    const ref = id.startsWith('MULTI') ? plain : id.startsWith('16 ×') ? plain : cl;
    return [id, fmtInt(x.rps), x.cpu.toFixed(3), fmtRatio(x.cpu / ref.cpu)];
  });
  const resultTable = table(['variant', 'requests/s (median)', 'server CPU µs/op', 'CPU/op vs its reference'], rows);
  const limits = [
    ...variants.filter((v) => v.id.startsWith('rl.') && !v.id.startsWith('rl.all')).map((v) => [v.id, med(v.id).cpu / cl.cpu, 1.1]),
    ['rl.all (2 limits)', med('rl.all (2 limits)').cpu / cl.cpu, 1.6],
    ['cl.throttle (ACL user +@limiter)', med('cl.throttle (ACL user +@limiter)').cpu / cl.cpu, 1.03],
    ['MULTI + 16 × cl.throttle + EXEC (per CL.THROTTLE)', med('MULTI + 16 × cl.throttle + EXEC').cpu / plain.cpu, 1.03],
  ];
  const verdict = limits.map(([id, ratio, max]) => `- ${id}: CPU per op ${ratio.toFixed(2)}× CL.THROTTLE's (target ≤ ${max}×): ${ratio <= max ? 'met' : '**missed**'}`).join('\n');
  say();
  say(resultTable);
  say();
  say(verdict);
  if (WRITE) {
    const md = `# Variants benchmark

Produced by \`npm run bench:variants\` on ${started.toISOString()} (${((Date.now() - started.getTime()) / 1000).toFixed(0)} s); cellgate ${facts.revision};
${facts.cores} CPUs, load average ${facts.loadavg} at the start. Pipeline 16, ${CLIENTS} clients, ${KEYS.toLocaleString('en-US')} random keys, medians of ${ROUNDS}
interleaved rounds; the redis-benchmark variants are compared with CL.THROTTLE under redis-benchmark, the transaction with the same
16 CL.THROTTLE sent by the same load generator without MULTI/EXEC (its CPU per op is per CL.THROTTLE; the MULTI, EXEC and PING
of each batch are the overhead). The ACL user is \`ACL SETUSER app on >… ~key:* resetchannels +@limiter +ping +flushall\`.

${resultTable}

${verdict}
`;
    const previous = existsSync(RESULTS) ? readFileSync(RESULTS, 'utf8') : '';
    const at = previous.search(/^# Variants benchmark/m);
    let next;
    if (at === -1) next = previous.trimEnd() + '\n\n' + md;
    else {
      const after = previous.slice(at + 1).search(/^# /m);
      next = previous.slice(0, at) + md + (after === -1 ? '' : '\n' + previous.slice(at + 1 + after));
    }
    writeFileSync(RESULTS, next.trimEnd() + '\n');
    say('# wrote bench/RESULTS.md (Variants benchmark)');
  }
}

run(main);
