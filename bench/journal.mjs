#!/usr/bin/env node
/**
 * Journal benchmark: CL.THROTTLE throughput and server CPU per operation at pipeline 16 and 1 with
 * `appendonly no`, `yes` + `appendfsync everysec` and `yes` + `always`, in the same run (rounds
 * interleaved, medians); journal bytes per recorded decision (from `check`'s record count); rewrite
 * time at 1M keys; load time of 1M keys (base) + 10M journal records.
 *
 *   npm run build && node bench/journal.mjs
 *   (JOURNAL_ROUNDS [3], JOURNAL_P16_REQUESTS [1000000], JOURNAL_P1_REQUESTS [200000],
 *    JOURNAL_KEYS [1000000] (0: no rewrite and load phase), JOURNAL_RECORDS [10000000],
 *    JOURNAL_ALWAYS [1] (0: no `always` rows), JOURNAL_P16_AGAIN [1] (0: no second P16 run, see below),
 *    BENCH_MAIN [dist/main.js]: the build measured,
 *    JOURNAL_BASELINE [none]: another build (e.g. a copy of main's dist/) whose `appendonly no` and
 *    `everysec` run in the same rounds, interleaved, as rows "baseline ...": an A/B on one machine state)
 *
 * Prints a Markdown section for bench/RESULTS.md. Targets: everysec P16 ≥ 0.9× and P1 ≥ 0.95× of
 * appendonly no; always P16 ≥ 0.5×; ≤ 32 bytes per record; load of 1M keys + 10M records ≤ 5 s.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fillThrottleKeys, RAND_DIGITS } from './fill.mjs';
import {
  command, fmtInt, fmtRatio, machine, median, run, runBenchmark, ROOT, startCellgate, stop, table, watchdog,
} from './harness.mjs';

const MAIN = process.env.BENCH_MAIN ?? join(ROOT, 'dist', 'main.js');
const BASELINE = process.env.JOURNAL_BASELINE;
const ROUNDS = Number(process.env.JOURNAL_ROUNDS ?? 3);
const P16_REQUESTS = Number(process.env.JOURNAL_P16_REQUESTS ?? 1_000_000);
const P1_REQUESTS = Number(process.env.JOURNAL_P1_REQUESTS ?? 200_000);
const KEYS = Number(process.env.JOURNAL_KEYS ?? 1_000_000);
const RECORDS = Number(process.env.JOURNAL_RECORDS ?? 10_000_000);
const ALWAYS = process.env.JOURNAL_ALWAYS !== '0';
// A second P16 run on each server, after the P1 one: its keys exist and its code has run for a while
// (the first P16 run creates the 100k keys, just after the start).
const P16_AGAIN = process.env.JOURNAL_P16_AGAIN !== '0';
const CMD = ['CL.THROTTLE', 'key:__rand_int__', '100', '10', '60'];
// The load's records: the fill's keys (one token of an hour spent) allow 10 per hour more, and live
// through the run, so the load replays 1M keys and every record, none expired on the way.
const LOAD_CMD = ['CL.THROTTLE', 'key:__rand_int__', '100', '10', '3600'];

const MODES = [
  { name: 'appendonly no', args: ['--appendonly', 'no'], main: MAIN },
  { name: 'everysec', args: ['--appendonly', 'yes', '--appendfsync', 'everysec'], main: MAIN },
  ...(ALWAYS ? [{ name: 'always', args: ['--appendonly', 'yes', '--appendfsync', 'always'], main: MAIN }] : []),
  ...(BASELINE === undefined ? [] : [
    { name: 'baseline appendonly no', args: ['--appendonly', 'no'], main: BASELINE },
    { name: 'baseline everysec', args: ['--appendonly', 'yes', '--appendfsync', 'everysec'], main: BASELINE },
  ]),
];

/** Each round's ratio of `xs` to `base` (the rounds run side by side): "median× (min–max)", or "-" for the base itself. */
function perRound(xs, base) {
  if (xs === base) return '-';
  const ratios = xs.map((x, i) => x / base[i]);
  return `${fmtRatio(median(ratios))} (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`;
}

function infoField(text, name) {
  const m = new RegExp(`^${name}:(.*)$`, 'm').exec(text);
  return m === null ? '' : m[1].trim();
}

async function waitInfo(port, test, timeoutMs = 600_000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const text = String(await command(port, ['INFO', 'persistence'], 10_000));
    if (test(text)) return text;
    if (Date.now() > until) throw new Error('timed out waiting on INFO persistence');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Records and bytes in a journal folder's incremental files, by `check` (the loader's own reading). */
function journalRecords(aofDir) {
  const r = spawnSync(process.execPath, [MAIN, 'check', aofDir], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`check failed: ${r.stderr}`);
  const records = Number(/^records: (\d+)$/m.exec(r.stdout)[1]);
  let bytes = 0;
  for (const n of readdirSync(aofDir)) if (n.endsWith('.incr.aof')) bytes += statSync(join(aofDir, n)).size - 16;
  return { records, bytes };
}

function logMs(logs, pattern) {
  for (const line of logs) {
    try {
      const e = JSON.parse(line);
      if (pattern.test(e.msg ?? '')) return Number(/in ([\d.]+) ms/.exec(e.msg)[1]);
    } catch {
      /* not JSON */
    }
  }
  return NaN;
}

async function main() {
  watchdog(3600);
  const load = (await import('node:os')).loadavg().map((x) => x.toFixed(2)).join(' ');
  // Throughput: P16 and P1, the three modes interleaved per round.
  const results = new Map(MODES.map((m) => [m.name, { p16: [], p1: [], cpu16: [], cpu1: [], again: [], cpuAgain: [], bytesPerRecord: [] }]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of MODES) {
      const s = await startCellgate(mode.main, { args: [...mode.args, '--warmup', 'yes'] });
      const r = results.get(mode.name);
      const b16 = await runBenchmark(s.port, 16, P16_REQUESTS, CMD, s.child.pid);
      const b1 = await runBenchmark(s.port, 1, P1_REQUESTS, CMD, s.child.pid);
      r.p16.push(b16.rps);
      r.cpu16.push(b16.cpuUsPerOp);
      r.p1.push(b1.rps);
      r.cpu1.push(b1.cpuUsPerOp);
      if (P16_AGAIN) {
        const again = await runBenchmark(s.port, 16, P16_REQUESTS, CMD, s.child.pid);
        r.again.push(again.rps);
        r.cpuAgain.push(again.cpuUsPerOp);
      }
      await stop(s.child);
      if (mode.args[1] === 'yes') {
        const j = journalRecords(join(s.dir, 'appendonlydir'));
        r.bytesPerRecord.push(j.bytes / j.records);
      }
      process.stderr.write(`round ${round + 1} ${mode.name}: P16 ${fmtInt(b16.rps)}/s, P1 ${fmtInt(b1.rps)}/s\n`);
    }
  }
  const rows = MODES.map((m) => {
    const r = results.get(m.name);
    const base = results.get(m.main === MAIN ? 'appendonly no' : 'baseline appendonly no');
    return [
      m.name,
      fmtInt(median(r.p16)), fmtRatio(median(r.p16) / median(base.p16)), perRound(r.p16, base.p16), median(r.cpu16).toFixed(2),
      fmtInt(median(r.p1)), fmtRatio(median(r.p1) / median(base.p1)), median(r.cpu1).toFixed(2),
      ...(P16_AGAIN ? [perRound(r.again, base.again), median(r.cpuAgain).toFixed(2)] : []),
      r.bytesPerRecord.length > 0 ? median(r.bytesPerRecord).toFixed(1) : '-',
    ];
  });

  const m = machine(MAIN);
  const head = [
    `## Journal (appendonly): throughput, bytes per record, rewrite and load (bench/journal.mjs)`,
    '',
    `\`npm run build && node bench/journal.mjs\`, ${ROUNDS} rounds interleaved, medians; ${m.cpu}, ${m.cores} cores, node ${m.node}, ${m.kernel}, cellgate ${m.revision}; load average at the start ${load}, at the end ${m.loadavg}.`,
    'The machine is shared (other engineers run builds and tests on its 2 cores): the ratios of one run are what compare; absolute figures move from run to run.',
    '',
    `CL.THROTTLE over 100k keys (redis-benchmark \`-c 50 -r 100000\`, keys \`key:<12 digits>\`, 16 bytes), P16 ${fmtInt(P16_REQUESTS)} and P1 ${fmtInt(P1_REQUESTS)} requests; CPU is the server's, µs per request:`,
    '',
    table(['mode', 'P16 req/s', 'vs no', 'P16 vs no per round: median (range)', 'P16 CPU µs/op', 'P1 req/s', 'vs no', 'P1 CPU µs/op', ...(P16_AGAIN ? ['P16 again vs no per round', 'P16 again CPU µs/op'] : []), 'journal bytes/record'], rows),
    '',
    'vs no: the ratio of the medians; per round: the ratio to `appendonly no` of the same build in the same round (run one after the other), whose median moves less with the machine\'s state than the medians of separate runs do.',
    ...(P16_AGAIN ? ['', 'P16 is the first load after the start (it creates the 100k keys); P16 again runs on the same server after the P1 run (the keys exist, the code has run for a while).'] : []),
    '',
  ];
  if (KEYS === 0) {
    process.stdout.write(head.join('\n') + '\n');
    return;
  }

  // Rewrite and load at KEYS keys + RECORDS records.
  const s = await startCellgate(MAIN, { args: ['--appendonly', 'yes', '--appendfsync', 'everysec', '--auto-aof-rewrite-percentage', '0'], nodeArgs: ['--max-old-space-size=8192'] });
  await fillThrottleKeys(s.port, KEYS, { prefix: 'key:', digits: RAND_DIGITS });
  await command(s.port, ['BGREWRITEAOF']);
  await waitInfo(s.port, (t) => infoField(t, 'aof_rewrite_in_progress') === '0' && infoField(t, 'aof_rewrites') === '1');
  const rewriteMs = logMs(s.logs, /Background AOF rewrite terminated with success/);
  // RECORDS journal records over the same keys (redis-benchmark's key:__rand_int__ over KEYS). With
  // CMD's 10 per minute these keys (a token of an hour spent) would refuse, and write nothing.
  const [bin, args] = ['redis-benchmark', ['-h', '127.0.0.1', '-p', String(s.port), '-c', '50', '-n', String(RECORDS), '-r', String(KEYS), '-P', '16', '-q', ...LOAD_CMD]];
  const fill = spawnSync(bin, args, { encoding: 'utf8', maxBuffer: 1 << 26 });
  if (fill.status !== 0) throw new Error(`redis-benchmark: ${fill.stderr}`);
  s.child.kill('SIGKILL');
  await new Promise((r) => s.child.once('exit', r));
  const aofDir = join(s.dir, 'appendonlydir');
  const j = journalRecords(aofDir);
  const baseBytes = readdirSync(aofDir).filter((n) => n.endsWith('.base.snap')).map((n) => statSync(join(aofDir, n)).size)[0];
  // The ready line comes once the load is done: allow it time on a busy machine.
  // Not pinned: no client runs during the load, and the journal's read-ahead worker needs the other CPU.
  const s2 = await startCellgate(MAIN, { args: ['--appendonly', 'yes', '--dir', s.dir], nodeArgs: ['--max-old-space-size=8192'], readyTimeoutMs: 300_000, pin: false });
  const loadLine = s2.logs.map((l) => { try { return JSON.parse(l); } catch { return {}; } }).find((e) => /journal loaded from/.test(e.msg ?? ''));
  const loadMs = Number(/in ([\d.]+) ms/.exec(loadLine?.msg ?? '')?.[1]);
  const dbsize = Number(await command(s2.port, ['DBSIZE']));
  await stop(s2.child);

  const out = [
    ...head,
    `Rewrite and load: ${fmtInt(KEYS)} keys filled, BGREWRITEAOF (base ${fmtInt(baseBytes)} bytes) in ${rewriteMs.toFixed(0)} ms; then ${fmtInt(RECORDS)} CL.THROTTLE (P16) gave ${fmtInt(j.records)} records, ${fmtInt(j.bytes)} bytes (${(j.bytes / j.records).toFixed(1)} bytes/record); kill -9 and restart: base + journal loaded in ${loadMs.toFixed(0)} ms (${fmtInt(dbsize)} keys).`,
    '',
  ];
  process.stdout.write(out.join('\n') + '\n');
}

run(main);
