/**
 * BGSAVE: the server keeps serving while it writes; a failed background save leaves the old snapshot,
 * is reported in INFO and the log, and (stop-writes-on-bgsave-error) refuses writes with MISCONF until
 * a save succeeds; the save policy triggers a background save, following the server clock; LASTSAVE.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { blockDir, fillKeys, info, runToExit, startOn, waitFor, waitForBgsave, T0_AHEAD_MS, tempDirsForFile } from './helpers.js';

const newDir = tempDirsForFile();
const T0 = T0_AHEAD_MS;
const MISCONF = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";

describe('BGSAVE', () => {
  it('writes a snapshot in the background, answers meanwhile, and updates INFO and LASTSAVE', async () => {
    const dir = newDir();
    const s = await startOn(dir, ['--save', '']);
    const r = new Redis(s.port);
    try {
      await fillKeys(s.port, 100_000);
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(Number((await info(r)).rdb_changes_since_last_save)).toBe(100_000);
      // One pipeline, so the server reads these together and answers them while the save is running.
      const replies = (await r.pipeline().bgsave().ping().call('BGSAVE').call('SAVE').call('BGSAVE', 'SCHEDULE').exec())!;
      const during = replies.map(([err, value]) => (err ? err.message : value));
      expect(during[0]).toBe('Background saving started');
      during.shift();
      expect(during[0]).toBe('PONG');
      expect(during[2]).toBe('ERR Background save already in progress');
      const i = await waitForBgsave(r);
      expect(i.rdb_last_bgsave_status).toBe('ok');
      expect(Number(i.rdb_saves)).toBeGreaterThanOrEqual(1);
      expect(i.rdb_last_save_keys).toBe('100000');
      expect(await r.lastsave()).toBe(T0 / 1000);
      expect(i.rdb_changes_since_last_save).toBe('0');
      const c = runToExit(['check', join(dir, 'cellgate.snap')]);
      expect(c.stdout).toContain('\nkeys: 100000\n');
      expect(s.logs.some((l) => l.includes('Background saving terminated with success'))).toBe(true);
      // The scheduled save runs once the first ends; no temp file remains.
      await waitFor('the scheduled save', async () => (await info(r)).rdb_bgsave_in_progress === '0' && Number((await info(r)).rdb_saves) >= 2);
      expect(readdirSync(dir).filter((n) => n.startsWith('.cellgate-temp-'))).toEqual([]);
      expect(during[1]).toBe('ERR Background save already in progress');
      expect(during[3]).toBe('Background saving scheduled');
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('a failed BGSAVE keeps the old snapshot, reports err, and (stop-writes-on-bgsave-error yes) refuses writes with MISCONF until a save succeeds', async () => {
    const dir = newDir();
    const s = await startOn(dir, ['--stop-writes-on-bgsave-error', 'yes']);
    const r = new Redis(s.port);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      await r.call('CL.THROTTLE', 'a', 5, 10, 60);
      expect(await r.save()).toBe('OK');
      const before = readFileSync(join(dir, 'cellgate.snap'));
      await r.call('CL.THROTTLE', 'b', 5, 10, 60);
      // Unwritable: a plain file where the directory was (works even as root).
      const blocker = blockDir(dir);
      expect(await r.bgsave()).toBe('Background saving started');
      const i = await waitForBgsave(r);
      expect(i.rdb_last_bgsave_status).toBe('err');
      expect(i.rdb_last_error).toMatch(/^ENOTDIR/);
      expect(s.logs.some((l) => l.includes('Background saving error'))).toBe(true);
      expect(readFileSync(join(blocker.away, 'cellgate.snap')).equals(before)).toBe(true);
      // Writes refused, reads and PING still served.
      await expect(r.call('CL.THROTTLE', 'a', 5, 10, 60)).rejects.toThrow(MISCONF);
      await expect(r.del('a')).rejects.toThrow(/^MISCONF /);
      expect(await r.ping()).toBe('PONG');
      expect(await r.exists('a')).toBe(1);
      expect(await r.call('CL.THROTTLE', 'a', 5, 10, 60, 0).catch((e: Error) => e.message)).toMatch(/^MISCONF/);
      expect((await info(r, 'errorstats')).errorstat_MISCONF).toMatch(/^count=/);
      // stop-writes-on-bgsave-error no lifts the refusal; yes brings it back.
      await r.config('SET', 'stop-writes-on-bgsave-error', 'no');
      expect(await r.call('CL.THROTTLE', 'a', 5, 10, 60)).toEqual([0, 6, 4, -1, 12]);
      await r.config('SET', 'stop-writes-on-bgsave-error', 'yes');
      await expect(r.call('CL.THROTTLE', 'a', 5, 10, 60)).rejects.toThrow(/^MISCONF/);
      // The disk comes back: a successful save lifts it.
      blocker.restore();
      expect(await r.bgsave()).toBe('Background saving started');
      expect((await waitForBgsave(r)).rdb_last_bgsave_status).toBe('ok');
      expect(await r.call('CL.THROTTLE', 'a', 5, 10, 60)).toEqual([0, 6, 3, -1, 18]);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('the save policy triggers a background save, counting changes and following the server clock', async () => {
    const dir = newDir();
    const s = await startOn(dir, ['--save', '60 3']);
    const r = new Redis(s.port);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(Date.now()));
      await r.call('CL.THROTTLE', 'a', 100, 1, 3600); // lives an hour: still there to DEL below
      await r.call('CL.THROTTLE', 'b', 5, 10, 60);
      await r.call('DEBUG', 'CLOCK', 'ADVANCE', '61000');
      await new Promise((res) => setTimeout(res, 300)); // three periodic ticks: 2 changes < 3, no save
      let i = await info(r);
      expect(i.rdb_changes_since_last_save).toBe('2');
      expect(i.rdb_saves).toBe('0');
      expect(existsSync(join(dir, 'cellgate.snap'))).toBe(false);
      expect(await r.del('a')).toBe(1); // a delete is a change too
      await waitFor('the policy save', async () => (await info(r)).rdb_saves === '1');
      i = await waitForBgsave(r);
      expect(i.rdb_last_bgsave_status).toBe('ok');
      expect(i.rdb_changes_since_last_save).toBe('0');
      expect(s.logs.some((l) => l.includes('3 changes in 60 seconds. Saving...'))).toBe(true);
      expect(statSync(join(dir, 'cellgate.snap')).size).toBeGreaterThan(0);
      // 3 more changes, but not 60 s since that save: nothing until the clock moves past it.
      for (let k = 0; k < 3; k++) await r.call('CL.THROTTLE', 'b', 5, 10, 60);
      await new Promise((res) => setTimeout(res, 300));
      expect((await info(r)).rdb_saves).toBe('1');
      await r.call('DEBUG', 'CLOCK', 'ADVANCE', '60001');
      await waitFor('the second policy save', async () => (await info(r)).rdb_saves === '2');
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  // A real full disk: a 1 MiB tmpfs. Needs root and mount (true in CI containers here); skipped elsewhere.
  const canMount = process.getuid?.() === 0 && spawnSync('mount', ['--version']).status === 0;
  it.runIf(canMount)('disk full (ENOSPC) mid-BGSAVE: the old snapshot stays, INFO says err, MISCONF (stop-writes-on-bgsave-error yes), the server keeps serving', async () => {
    const dir = newDir();
    if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir]).status !== 0) return;
    let s: Awaited<ReturnType<typeof startOn>> | undefined;
    let r: Redis | undefined;
    try {
      s = await startOn(dir, ['--stop-writes-on-bgsave-error', 'yes']);
      r = new Redis(s.port);
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      await r.call('CL.THROTTLE', 'small', 5, 10, 60);
      expect(await r.save()).toBe('OK');
      const before = readFileSync(join(dir, 'cellgate.snap'));
      await r.call('DEBUG', 'CLOCK', 'REAL');
      await fillKeys(s.port, 50_000); // ≈ 2.4 MB: does not fit
      expect(await r.bgsave()).toBe('Background saving started');
      const i = await waitForBgsave(r);
      expect(i.rdb_last_bgsave_status).toBe('err');
      expect(i.rdb_last_error).toMatch(/^ENOSPC/);
      expect(readFileSync(join(dir, 'cellgate.snap')).equals(before)).toBe(true);
      expect(readdirSync(dir).filter((n) => n.startsWith('.cellgate-temp-'))).toEqual([]);
      await expect(r.call('CL.THROTTLE', 'x', 5, 10, 60)).rejects.toThrow(/^MISCONF/);
      expect(await r.dbsize()).toBe(50_001);
    } finally {
      r?.disconnect();
      await s?.stop('SIGKILL');
      spawnSync('umount', [dir]);
    }
  });
});
