/**
 * A full disk that frees less space than the records that waited for it: the journal comes back
 * through a rewrite whose base is written from the keyspace (which holds every waiting record) into
 * a new incremental set, without writing the backlog first; BGREWRITEAOF is accepted while the disk
 * is full. The disk is filled with RLIMIT_FSIZE (writes past the size fail with EFBIG, for any user
 * on any filesystem, as a full disk fails them with ENOSPC); it is "freed" by raising the limit.
 * Checked where a user sees it (INFO, /metrics, /readyz, the log) and by kill -9 and a restart.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { aofMetrics, info, readyz, runToExit, startOn, T0_AHEAD_MS, tempDirsForFile, waitFor } from './helpers.js';
import { freePort, type RunningServer } from '../helpers/server.js';
import { WAIT_LIMIT_MS } from '../helpers/wait.js';

const newDir = tempDirsForFile();
const T0 = T0_AHEAD_MS;
const KEYS = 2000;
const SPENDS_PER_KEY = 25;

/** Mounting works here (root with CAP_SYS_ADMIN): a small tmpfs can be filled for a real ENOSPC. */
const CAN_MOUNT = process.getuid?.() === 0 && (() => {
  const probe = newDir();
  const ok = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probe]).status === 0;
  if (ok) spawnSync('umount', [probe]);
  return ok;
})();

/** Sets the running server's RLIMIT_FSIZE soft limit (the hard one stays unlimited, so any user can raise it again). */
function fileSizeLimit(pid: number, bytes: number | 'unlimited'): void {
  const r = spawnSync('prlimit', ['--pid', String(pid), `--fsize=${bytes}:unlimited`], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`prlimit failed: ${r.stderr}${r.error?.message ?? ''}`);
}

/** SPENDS_PER_KEY decisions on each of KEYS keys `<prefix><n>`, pipelined; the last answer of each key. */
async function spendKeys(r: Redis, prefix: string, answered: Map<string, number>): Promise<void> {
  for (let round = 0; round < SPENDS_PER_KEY; round++) {
    for (let from = 0; from < KEYS; from += 500) {
      const p = r.pipeline();
      for (let k = from; k < from + 500; k++) p.call('CL.THROTTLE', `${prefix}${k}`, 100, 1, 3600, 1);
      const replies = (await p.exec())!;
      for (let k = from; k < from + 500; k++) {
        const [err, reply] = replies[k - from];
        expect(err).toBe(null);
        expect((reply as number[])[0]).toBe(0);
        answered.set(`${prefix}${k}`, (reply as number[])[2]);
      }
    }
  }
}

describe('journal: a full disk that frees less than the backlog', () => {
  it(`${KEYS} keys answered while the disk was full come back exactly as answered after kill -9, once a rewrite from memory repaired the journal`, async () => {
    const dir = newDir();
    const aofDir = join(dir, 'appendonlydir');
    const metricsPort = await freePort();
    const s = await startOn(dir, ['--appendonly', 'yes', '--save', '', '--auto-aof-rewrite-percentage', '0', '--metrics-port', String(metricsPort)]);
    const r = new Redis(s.port);
    let restarted: { s: RunningServer; r: Redis } | null = null;
    const answered = new Map<string, number>();
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      fileSizeLimit(s.proc.pid!, 16 * 1024);
      for (let i = 0; i < 5000 && (await info(r)).aof_last_write_status === 'ok'; i++) {
        answered.set(`pre:${i}`, ((await r.call('CL.THROTTLE', `pre:${i}`, 100, 1, 3600, 1)) as number[])[2]);
      }
      expect((await info(r)).aof_last_write_status).toBe('err');
      // A first batch answered on the full disk, then BGREWRITEAOF: accepted (no backlog to write
      // first), and it fails on the full disk writing its base; the records it dropped are in memory.
      await spendKeys(r, 'a:', answered);
      expect(await r.bgrewriteaof()).toMatch(/started/);
      await waitFor('the rewrite on the full disk to fail', async () => (await info(r)).aof_rewrite_in_progress === '0', WAIT_LIMIT_MS);
      const failed = await info(r);
      expect(failed.aof_last_bgrewrite_status).toBe('err');
      expect(s.logs.some((l) => l.includes('Background AOF rewrite failed') && l.includes('EFBIG'))).toBe(true);
      expect(s.logs.some((l) => /bytes of records the disk refused are dropped; the new base written from memory holds them/.test(l))).toBe(true);
      // A second batch: its records wait again, far more than the space about to be freed.
      await spendKeys(r, 'b:', answered);
      const full = await info(r);
      expect(full.aof_last_write_status).toBe('err');
      const waiting = Number(full.aof_buffer_length);
      expect(waiting).toBeGreaterThan(256 * 1024);
      expect(s.logs.some((l) => l.includes('Error writing to the AOF file: EFBIG'))).toBe(true);
      const notReady = await readyz(metricsPort);
      expect(notReady.status).toBe(503);
      expect(notReady.body).toContain('the journal cannot be written (INFO persistence aof_last_write_status:err: EFBIG');
      expect((await aofMetrics(metricsPort)).get('cellgate_aof_last_write_ok')).toBe(0);

      // "Freed": room for half of what waits. The retry writes part of it and fails again; the
      // rewrite from memory follows and its compact base fits.
      fileSizeLimit(s.proc.pid!, 16 * 1024 + Math.floor(waiting / 2));
      answered.set('after', ((await r.call('CL.THROTTLE', 'after', 100, 1, 3600, 1)) as number[])[2]);
      await waitFor('the journal repaired by a rewrite', async () => {
        const i = await info(r);
        return i.aof_rewrite_in_progress === '0' && i.aof_last_bgrewrite_status === 'ok' && i.aof_last_write_status === 'ok' && i.aof_buffer_length === '0';
      }, WAIT_LIMIT_MS);
      expect(s.logs.some((l) => l.includes('AOF rewrite scheduled: the disk took part of the records that waited and refused the rest'))).toBe(true);
      const repaired = await info(r);
      expect(Number(repaired.aof_base_size)).toBeLessThan(16 * 1024 + Math.floor(waiting / 2));
      expect((await readyz(metricsPort)).status).toBe(200);
      const m = await aofMetrics(metricsPort);
      expect(m.get('cellgate_aof_last_write_ok')).toBe(1);
      expect(m.get('cellgate_aof_last_bgrewrite_ok')).toBe(1);
      const check = runToExit(['check', aofDir]);
      expect(check.status, check.stdout + check.stderr).toBe(0);
      expect(statSync(join(aofDir, 'appendonly.aof.manifest')).isFile()).toBe(true);

      await r.call('DEBUG', 'SLEEP', '0.002');
      r.disconnect();
      await s.stop('SIGKILL');
      const again = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
      restarted = { s: again, r: new Redis(again.port) };
      await restarted.r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(await restarted.r.dbsize()).toBe(answered.size);
      const wrong: string[] = [];
      for (const [key, left] of answered) {
        const now = ((await restarted.r.call('CL.THROTTLE', key, 100, 1, 3600, 0)) as number[])[2];
        if (now !== left) wrong.push(`${key}: answered ${left}, after restart ${now}`);
      }
      expect(wrong.slice(0, 10), `${wrong.length} keys differ`).toEqual([]);
    } finally {
      r.disconnect();
      await s.stop();
      restarted?.r.disconnect();
      await restarted?.s.stop();
    }
  });

  // A real full filesystem: a 2 MiB tmpfs (needs root and mount; skipped elsewhere). What frees is
  // less than the waiting records need: they are not written into it (statfs says so), and the
  // rewrite from memory takes the room instead.
  it.skipIf(!CAN_MOUNT)(`a full tmpfs (ENOSPC) that frees less than the backlog: ${KEYS} keys answered meanwhile come back exactly after kill -9`, async () => {
    const dir = newDir();
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', dir]).status).toBe(0);
    let s: RunningServer | null = null;
    let r: Redis | null = null;
    let restarted: { s: RunningServer; r: Redis } | null = null;
    const answered = new Map<string, number>();
    try {
      s = await startOn(dir, ['--appendonly', 'yes', '--save', '', '--auto-aof-rewrite-percentage', '0']);
      r = new Redis(s.port);
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      // All but ~16 KiB, in two fillers: the first is what "frees" later.
      const used = Number(spawnSync('du', ['-sk', dir], { encoding: 'utf8' }).stdout.split('\t')[0]);
      writeFileSync(join(dir, 'filler-1'), Buffer.alloc(400 * 1024, 1));
      writeFileSync(join(dir, 'filler-2'), Buffer.alloc((2048 - used - 400 - 16) * 1024, 1));
      for (let i = 0; i < 5000 && (await info(r)).aof_last_write_status === 'ok'; i++) {
        answered.set(`pre:${i}`, ((await r.call('CL.THROTTLE', `pre:${i}`, 100, 1, 3600, 1)) as number[])[2]);
      }
      expect((await info(r)).aof_last_write_status).toBe('err');
      await spendKeys(r, 'a:', answered);
      const waiting = Number((await info(r)).aof_buffer_length);
      expect(waiting).toBeGreaterThan(600 * 1024);
      expect(s.logs.some((l) => l.includes('Error writing to the AOF file: ENOSPC'))).toBe(true);
      rmSync(join(dir, 'filler-1'));
      answered.set('after', ((await r.call('CL.THROTTLE', 'after', 100, 1, 3600, 1)) as number[])[2]);
      const server = s;
      const client = r;
      await waitFor('the journal repaired by a rewrite', async () => {
        const i = await info(client);
        return i.aof_rewrite_in_progress === '0' && i.aof_last_bgrewrite_status === 'ok' && i.aof_rewrites === '1' && i.aof_last_write_status === 'ok' && i.aof_buffer_length === '0';
      }, WAIT_LIMIT_MS);
      expect(server.logs.some((l) => l.includes('AOF rewrite scheduled: the disk has room again, less than the records that waited need'))).toBe(true);
      const check = runToExit(['check', join(dir, 'appendonlydir')]);
      expect(check.status, check.stdout + check.stderr).toBe(0);
      await r.call('DEBUG', 'SLEEP', '0.002');
      r.disconnect();
      await s.stop('SIGKILL');
      const again = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
      restarted = { s: again, r: new Redis(again.port) };
      await restarted.r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(await restarted.r.dbsize()).toBe(answered.size);
      const wrong: string[] = [];
      for (const [key, left] of answered) {
        const now = ((await restarted.r.call('CL.THROTTLE', key, 100, 1, 3600, 0)) as number[])[2];
        if (now !== left) wrong.push(`${key}: answered ${left}, after restart ${now}`);
      }
      expect(wrong.slice(0, 10), `${wrong.length} keys differ`).toEqual([]);
    } finally {
      r?.disconnect();
      await s?.stop();
      restarted?.r.disconnect();
      await restarted?.s.stop();
      spawnSync('umount', [dir]);
    }
  });
});
