/**
 * Real crashes: `kill -9` at a random moment of pipelined traffic (spends allowed and refused, DEL,
 * keys expiring as the clock moves, keys evicted by maxmemory), then a restart from the journal. The
 * tracked keys are fixed windows a week long (their count does not depend on the clock inside the
 * window), so the state after the restart can be checked exactly against a model of the commands
 * sent on the one traffic connection: it must be the model after some prefix of them that includes
 * every answered command with `always` (written and synced before the reply), every command answered
 * more than 2 s before the kill with `everysec` (those trials run longer than 2 s; how many kept
 * every answered command is printed), and nothing beyond what was sent. No trial may refuse to start.
 * Then rewrites killed at random points: the manifest always names a loadable, complete set.
 *
 * A handful of trials always; CELLGATE_SOAK=1 runs 100 kill trials and 30 killed rewrites.
 */
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { fillKeys, info, runToExit, startOn, tempDirsForFile } from './helpers.js';
import { join } from 'node:path';
import { mulberry32 } from '../helpers/random.js';

const newDir = tempDirsForFile();
const SOAK = process.env.CELLGATE_SOAK === '1';
const KILL_TRIALS = SOAK ? 100 : 6;
const REWRITE_TRIALS = SOAK ? 30 : 3;

const WEEK_MS = 7 * 24 * 3600 * 1000;
/** A server time at the start of a week-long window, ahead of real time (loaded keys are unexpired). */
const T = Math.floor(Date.now() / WEEK_MS) * WEEK_MS + WEEK_MS + 3_600_000;
const TRACKED = 40;
const LIMIT = 30;

type Op = { kind: 'spend'; key: number; cost: number } | { kind: 'del'; key: number };

/** The tracked keys' counts after ops[0, n) (a refused spend changes nothing; DEL empties). */
function model(ops: Op[], n: number): number[] {
  const count = new Array<number>(TRACKED).fill(0);
  for (let i = 0; i < n; i++) applyOp(count, ops[i]);
  return count;
}

function applyOp(count: number[], op: Op): void {
  if (op.kind === 'del') count[op.key] = 0;
  else if (count[op.key] + op.cost <= LIMIT) count[op.key] += op.cost;
}

describe('journal: kill -9 under traffic', () => {
  it(`${KILL_TRIALS} trials: every answered decision is present, nothing beyond what was sent, every start succeeds`, async () => {
    const stats = { trials: 0, answered: 0, sent: 0, evicted: 0, expired: 0, inFlightKept: 0, allAnswered: 0, maxLostAnswered: 0 };
    for (let trial = 0; trial < KILL_TRIALS; trial++) {
      const rnd = mulberry32(1000 + trial);
      const int = (n: number): number => Math.floor(rnd() * n);
      const fsync = trial % 2 === 0 ? 'always' : 'everysec';
      const dir = newDir();
      let s = await startOn(dir, ['--appendonly', 'yes', '--appendfsync', fsync, '--save', '', '--maxmemory-policy', 'volatile-ttl']);
      // Both connections fail fast once the process is gone (no offline queue, no reconnect).
      const fast = { enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true } as const;
      const admin = new Redis(s.port, fast);
      await admin.connect();
      await admin.call('DEBUG', 'CLOCK', 'SET', String(T));
      // 5000 keys of an hour, then maxmemory just above what is used now: the traffic's fillers push
      // it over and keys are evicted; volatile-ttl takes the soonest to expire, never the tracked keys
      // (a week) while these are there.
      const pre = admin.pipeline();
      for (let i = 0; i < 5000; i++) pre.call('CL.THROTTLE', `hour:${i}`, 1, 1, 3600);
      await pre.exec();
      const mem = await info(admin, 'memory');
      await admin.config('SET', 'maxmemory', String(Number(mem.used_memory_startup) + Number(mem.used_memory_dataset) + 2048));
      const traffic = new Redis(s.port, fast);
      await traffic.connect();
      traffic.on('error', () => {});
      admin.on('error', () => {});
      const ops: Op[] = [];
      let answered = 0;
      /** [ms, answered] after each batch: what was answered by when. */
      const timeline: [number, number][] = [];
      let stop = false;
      let lastInfo: Record<string, string> = {};
      const sender = (async () => {
        let filler = 0;
        while (!stop) {
          const pipe = traffic.pipeline();
          const batch: Op[] = [];
          for (let i = 0; i < 1 + int(32); i++) {
            const r = int(100);
            if (r < 70) batch.push({ kind: 'spend', key: int(TRACKED), cost: 1 + int(3) });
            else if (r < 75) batch.push({ kind: 'del', key: int(TRACKED) });
            else {
              // Fillers: short-lived keys (a second), evicted or expired.
              pipe.call('CL.THROTTLE', `filler:${trial}:${filler++}`, 1, 1, 1);
              continue;
            }
            const op = batch[batch.length - 1];
            if (op.kind === 'spend') pipe.call('RL.FIXEDWINDOW', `t:${op.key}`, LIMIT, WEEK_MS, 'COST', op.cost);
            else pipe.call('DEL', `t:${op.key}`);
          }
          const firstOp = ops.length;
          ops.push(...batch);
          let results: [Error | null, unknown][] | null;
          try {
            results = await pipe.exec();
          } catch {
            return;
          }
          if (results === null) return;
          // Replies in order: the tracked ops answered are a prefix of this batch.
          let k = firstOp;
          for (const [err] of results) {
            if (err !== null) return;
          }
          k += batch.length;
          answered = k;
          timeline.push([Date.now(), answered]);
        }
      })();
      const clock = (async () => {
        while (!stop) {
          await new Promise((r) => setTimeout(r, 20));
          try {
            await admin.call('DEBUG', 'CLOCK', 'ADVANCE', '300');
            lastInfo = await info(admin, 'stats');
          } catch {
            return;
          }
        }
      })();
      await new Promise((r) => setTimeout(r, fsync === 'always' ? 150 + int(400) : 2200 + int(800)));
      const killedAt = Date.now();
      s.proc.kill('SIGKILL');
      expect(await s.stop('SIGKILL')).toBe(null);
      stop = true;
      await Promise.all([sender, clock]);
      traffic.disconnect();
      admin.disconnect();
      stats.trials++;
      stats.answered += answered;
      stats.sent += ops.length;
      stats.evicted += Number(lastInfo.evicted_keys ?? 0);
      stats.expired += Number(lastInfo.expired_keys ?? 0);
      expect(answered).toBeGreaterThan(0);

      // The journal passes check, and the restart loads it (no trial refuses to start).
      expect(runToExit(['check', join(dir, 'appendonlydir')]).status).toBe(0);
      s = await startOn(dir, ['--appendonly', 'yes']);
      const r = new Redis(s.port);
      try {
        await r.call('DEBUG', 'CLOCK', 'SET', String(T + 1000));
        const got: number[] = [];
        for (let key = 0; key < TRACKED; key++) {
          const reply = (await r.call('RL.FIXEDWINDOW', `t:${key}`, LIMIT, WEEK_MS, 'COST', 0)) as unknown[];
          // RESP2 array, or a RESP3 map flattened by ioredis.
          const at = reply.indexOf('remaining');
          got.push(LIMIT - Number(at === -1 ? reply[2] : reply[at + 1]));
        }
        // Some prefix of what was sent, at least everything answered (always) or answered 2 s before the kill (everysec).
        const mustHave = fsync === 'always' ? answered : (timeline.filter(([t]) => t <= killedAt - 2000).pop()?.[1] ?? 0);
        if (fsync === 'everysec') expect(mustHave).toBeGreaterThan(0);
        let match = -1;
        const m = model(ops, mustHave);
        for (let n = mustHave; n <= ops.length && match === -1; n++) {
          if (n > mustHave) applyOp(m, ops[n - 1]);
          if (m.every((c, i) => c === got[i])) match = n;
        }
        if (match === -1) {
          throw new Error(`trial ${trial} (${fsync}): the state after restart is no prefix of the commands sent with the first ${mustHave} (answered ${answered}, sent ${ops.length}): got ${got.join(',')}, answered model ${model(ops, answered).join(',')}`);
        }
        if (match > answered) stats.inFlightKept++;
        if (match >= answered) stats.allAnswered++;
        else stats.maxLostAnswered = Math.max(stats.maxLostAnswered, answered - match);
      } finally {
        r.disconnect();
        await s.stop();
      }
    }
    console.log(`[crash] journal kill -9 trials: ${stats.trials} (always and everysec alternating); tracked commands answered ${stats.answered}, sent ${stats.sent}; every answered one present in ${stats.allAnswered} trials (always: required; everysec: those older than 2 s required; at most ${stats.maxLostAnswered} answered commands missing in an everysec trial, the last millisecond's); ${stats.inFlightKept} trials kept writes whose replies were not read; evicted ${stats.evicted}, expired ${stats.expired} keys (INFO before the kills)`);
    expect(stats.evicted).toBeGreaterThan(0);
    expect(stats.expired).toBeGreaterThan(0);
  }, SOAK ? 1_800_000 : 180_000);
});

describe('journal: rewrites killed at random points', () => {
  it(`${REWRITE_TRIALS} rewrites of 200k keys killed at a random moment: the next start loads the complete state`, async () => {
    const dir = newDir();
    let s = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
    await fillKeys(s.port, 200_000);
    let expected = 200_000;
    const phases = new Map<string, number>();
    for (let trial = 0; trial < REWRITE_TRIALS; trial++) {
      const rnd = mulberry32(77 + trial);
      let r = new Redis(s.port);
      expect(await r.call('BGREWRITEAOF')).toBe('Background append only file rewriting started');
      // Traffic during the rewrite, answered before the kill: it must come back.
      await r.call('CL.THROTTLE', `during:${trial}`, 5, 10, 3600);
      // everysec writes within a millisecond of the previous write: this turn writes it for sure.
      await r.call('DEBUG', 'SLEEP', '0.002');
      expected++;
      await new Promise((res) => setTimeout(res, Math.floor(rnd() * 400)));
      const phase = (await info(r)).aof_rewrite_in_progress === '1' ? 'during' : 'after';
      phases.set(phase, (phases.get(phase) ?? 0) + 1);
      r.disconnect();
      expect(await s.stop('SIGKILL')).toBe(null);
      expect(runToExit(['check', join(dir, 'appendonlydir')]).status).toBe(0);
      s = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
      r = new Redis(s.port);
      expect(await r.dbsize()).toBe(expected);
      expect(await r.exists(`during:${trial}`)).toBe(1);
      r.disconnect();
    }
    await s.stop();
    console.log(`[crash] rewrites killed: ${REWRITE_TRIALS} (${[...phases].map(([p, n]) => `${n} ${p} the rewrite`).join(', ')}); every restart loaded all ${expected} keys`);
  }, SOAK ? 1_800_000 : 180_000);
});
