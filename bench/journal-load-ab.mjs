#!/usr/bin/env node
/**
 * Load A/B of the journal: one set of files (a base of JOURNAL_KEYS keys + JOURNAL_RECORDS records
 * over those same keys, made once by the build measured), then loaded by each build in turn, JOURNAL_ROUNDS times,
 * alternated, each start on a fresh copy of the files. Prints each load's ms (the server's own
 * "journal loaded ... in N ms" line) and DBSIZE.
 *
 *   npm run build && JOURNAL_BASELINE=<copy of the previous build>/dist/main.js node bench/journal-load-ab.mjs
 *   (JOURNAL_KEYS [1000000], JOURNAL_RECORDS [10000000], JOURNAL_ROUNDS [3], JOURNAL_PERIOD [3600],
 *    BENCH_MAIN [dist/main.js], JOURNAL_FILES [none]: load this appendonlydir instead of making one,
 *    JOURNAL_KEEP [none]: copy the files made to this folder, for a later JOURNAL_FILES)
 *
 * The records' expiries are wall-clock times: with bench/journal.mjs's `CL.THROTTLE key 100 10 60`
 * (JOURNAL_PERIOD=60) they last seconds, so a later start replays more of them as expired and loads
 * minutes apart do not compare. The default period of an hour keeps every record live for the run;
 * the rounds alternate the builds in any case.
 *
 * The loading servers are not pinned to a CPU (BENCH_PIN pins only the server that makes the files):
 * no client runs during a load, and the journal's read-ahead worker (aof-load-worker) needs the
 * second core that pinning would take from it.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fillThrottleKeys, RAND_DIGITS } from './fill.mjs';
import { command, run, ROOT, startCellgate, stop, tempDir, watchdog } from './harness.mjs';

const MAIN = process.env.BENCH_MAIN ?? join(ROOT, 'dist', 'main.js');
const BASELINE = process.env.JOURNAL_BASELINE;
const KEYS = Number(process.env.JOURNAL_KEYS ?? 1_000_000);
const RECORDS = Number(process.env.JOURNAL_RECORDS ?? 10_000_000);
const ROUNDS = Number(process.env.JOURNAL_ROUNDS ?? 3);
const CMD = ['CL.THROTTLE', 'key:__rand_int__', '100', '10', process.env.JOURNAL_PERIOD ?? '3600'];
const NODE_ARGS = ['--max-old-space-size=8192'];

async function loadOnce(main, files) {
  const dir = tempDir('cellgate-load-');
  cpSync(files, join(dir, 'appendonlydir'), { recursive: true });
  const s = await startCellgate(main, { args: ['--appendonly', 'yes', '--dir', dir], nodeArgs: NODE_ARGS, readyTimeoutMs: 300_000, pin: false });
  const line = s.logs.map((l) => { try { return JSON.parse(l); } catch { return {}; } }).find((e) => /journal loaded from/.test(e.msg ?? ''));
  const ms = Number(/in ([\d.]+) ms/.exec(line?.msg ?? '')?.[1]);
  const keys = Number(await command(s.port, ['DBSIZE']));
  await stop(s.child);
  rmSync(dir, { recursive: true, force: true });
  return { ms, keys };
}

async function makeFiles() {
  const s = await startCellgate(MAIN, { args: ['--appendonly', 'yes', '--appendfsync', 'everysec', '--auto-aof-rewrite-percentage', '0'], nodeArgs: NODE_ARGS });
  await fillThrottleKeys(s.port, KEYS, { prefix: 'key:', digits: RAND_DIGITS });
  await command(s.port, ['BGREWRITEAOF']);
  for (;;) {
    const info = String(await command(s.port, ['INFO', 'persistence'], 10_000));
    if (/aof_rewrite_in_progress:0/.test(info) && /aof_rewrites:1/.test(info)) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const fill = spawnSync('redis-benchmark', ['-h', '127.0.0.1', '-p', String(s.port), '-c', '50', '-n', String(RECORDS), '-r', String(KEYS), '-P', '16', '-q', ...CMD], { encoding: 'utf8', maxBuffer: 1 << 26 });
  if (fill.status !== 0) throw new Error(`redis-benchmark: ${fill.stderr}`);
  s.child.kill('SIGKILL');
  await new Promise((r) => s.child.once('exit', r));
  if (process.env.JOURNAL_KEEP !== undefined) cpSync(join(s.dir, 'appendonlydir'), process.env.JOURNAL_KEEP, { recursive: true });
  return join(s.dir, 'appendonlydir');
}

async function main() {
  watchdog(3600);
  const files = process.env.JOURNAL_FILES ?? (await makeFiles());
  const builds = [['this build', MAIN], ...(BASELINE === undefined ? [] : [['baseline', BASELINE]])];
  for (let round = 0; round < ROUNDS; round++) {
    // Alternate which build goes first, so neither always loads the older (more expired) view.
    const order = round % 2 === 0 ? builds : [...builds].reverse();
    for (const [name, main] of order) {
      const r = await loadOnce(main, files);
      process.stdout.write(`round ${round + 1} ${name}: loaded in ${r.ms.toFixed(0)} ms, ${r.keys} keys\n`);
    }
  }
}

run(main);
