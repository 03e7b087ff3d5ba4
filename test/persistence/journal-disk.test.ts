/**
 * The journal against a disk that refuses it, with real processes and real folders: a full disk
 * (RLIMIT_FSIZE, which fails writes past the size with EFBIG on any filesystem and for any user; and,
 * where the tests run as root, a small tmpfs that fills up: ENOSPC), a read-only journal folder, an
 * fsync that takes longer than 2 s, and recovery once the disk takes writes again. What a user sees
 * is checked where a user sees it: INFO persistence, the log, /metrics, /readyz, and a restart after
 * kill -9.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { chmodSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { aofMetrics, fillKeys, info, readyz, runToExit, startOn, T0_AHEAD_MS, tempDirsForFile, waitFor } from './helpers.js';
import { freePort, startServer, type RunningServer } from '../helpers/server.js';
import { WAIT_LIMIT_MS } from '../helpers/wait.js';

const newDir = tempDirsForFile();
const T0 = T0_AHEAD_MS;
const IS_ROOT = process.getuid?.() === 0;
const aofDir = (dir: string): string => join(dir, 'appendonlydir');

function sh(cmd: string, args: string[]): { ok: boolean; err: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return { ok: r.status === 0, err: `${r.stderr ?? ''}${r.error?.message ?? ''}` };
}

/** Sets the running server's RLIMIT_FSIZE soft limit (the hard one stays unlimited, so a non-root user can lift it again). */
function fileSizeLimit(pid: number, bytes: number | 'unlimited'): void {
  const r = sh('prlimit', ['--pid', String(pid), `--fsize=${bytes}:unlimited`]);
  if (!r.ok) throw new Error(`prlimit failed: ${r.err}`);
}

/** Mounting works here (root with CAP_SYS_ADMIN): a tmpfs or a read-only bind mount can be made. */
const CAN_MOUNT = (() => {
  if (!IS_ROOT) return false;
  const probe = newDir();
  const ok = sh('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probe]).ok;
  if (ok) sh('umount', [probe]);
  return ok;
})();

async function waitRewriteDone(r: Redis): Promise<Record<string, string>> {
  let last: Record<string, string> = {};
  await waitFor('the rewrite to end', async () => {
    last = await info(r);
    return last.aof_rewrite_in_progress === '0';
  }, WAIT_LIMIT_MS);
  return last;
}

/** The remaining count of CL.THROTTLE key 100 1 3600 (bench/fill.mjs's limit), without spending. */
async function remaining(r: Redis, key: string): Promise<number> {
  return ((await r.call('CL.THROTTLE', key, 100, 1, 3600, 0)) as number[])[2];
}

async function killAndRestart(s: RunningServer, dir: string, metricsPort?: number): Promise<{ s: RunningServer; r: Redis }> {
  await s.stop('SIGKILL');
  const again = await startOn(dir, ['--appendonly', 'yes', '--save', '', ...(metricsPort === undefined ? [] : ['--metrics-port', String(metricsPort)])]);
  const r = new Redis(again.port);
  await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
  return { s: again, r };
}

describe('journal: rewrites on a full disk', () => {
  it('BGREWRITEAOF past RLIMIT_FSIZE (EFBIG) fails, the manifest keeps a complete set and decisions go on; once lifted the next rewrite succeeds; kill -9 loses nothing', async () => {
    const dir = newDir();
    const metricsPort = await freePort();
    const s = await startOn(dir, ['--appendonly', 'yes', '--save', '', '--auto-aof-rewrite-percentage', '0', '--metrics-port', String(metricsPort)]);
    const r = new Redis(s.port);
    let restarted: { s: RunningServer; r: Redis } | null = null;
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      await fillKeys(s.port, 3000, 'k:');
      expect(await r.bgrewriteaof()).toMatch(/started/);
      expect((await waitRewriteDone(r)).aof_last_bgrewrite_status).toBe('ok');
      // The base of 3000 keys is well over 32 KiB; the new incremental file is a few bytes.
      fileSizeLimit(s.proc.pid!, 32 * 1024);
      expect(await r.bgrewriteaof()).toMatch(/started/);
      const failed = await waitRewriteDone(r);
      expect(failed.aof_last_bgrewrite_status).toBe('err');
      expect(failed.aof_rewrites_consecutive_failures).toBe('1');
      expect(failed.aof_last_write_status).toBe('ok');
      expect(s.logs.some((l) => l.includes('Background AOF rewrite failed') && l.includes('EFBIG'))).toBe(true);
      // What the manifest names is complete and valid: `check` reads it with the loader's rules.
      const check = runToExit(['check', aofDir(dir)]);
      expect(check.status, check.stdout + check.stderr).toBe(0);
      expect(readdirSync(aofDir(dir)).filter((n) => n.startsWith('temp-'))).toEqual([]);
      // Decisions go on, recorded in the (small) current file; a failed rewrite with a complete set on disk is not an outage.
      for (let i = 0; i < 20; i++) await r.call('CL.THROTTLE', 'k:7', 100, 1, 3600, 1);
      expect((await info(r)).aof_last_write_status).toBe('ok');
      expect((await readyz(metricsPort)).status).toBe(200);
      const m = await aofMetrics(metricsPort);
      expect(m.get('cellgate_aof_last_bgrewrite_ok')).toBe(0);
      expect(m.get('cellgate_aof_rewrites_consecutive_failures')).toBe(1);
      expect(m.get('cellgate_aof_rewrites_total')).toBe(1);

      fileSizeLimit(s.proc.pid!, 'unlimited');
      expect(await r.bgrewriteaof()).toMatch(/started/);
      const ok = await waitRewriteDone(r);
      expect(ok.aof_last_bgrewrite_status).toBe('ok');
      expect(ok.aof_rewrites_consecutive_failures).toBe('0');
      expect((await aofMetrics(metricsPort)).get('cellgate_aof_rewrites_total')).toBe(2);
      for (let i = 0; i < 5; i++) await r.call('CL.THROTTLE', 'k:8', 100, 1, 3600, 1);
      const untouched = await remaining(r, 'k:6');
      const before = [untouched, await remaining(r, 'k:7'), await remaining(r, 'k:8'), await remaining(r, 'k:2999')];
      expect(before).toEqual([untouched, untouched - 20, untouched - 5, untouched]);
      await r.call('DEBUG', 'SLEEP', '0.002');
      r.disconnect();
      restarted = await killAndRestart(s, dir);
      expect(await restarted.r.dbsize()).toBe(3000);
      const after = [await remaining(restarted.r, 'k:6'), await remaining(restarted.r, 'k:7'), await remaining(restarted.r, 'k:8'), await remaining(restarted.r, 'k:2999')];
      expect(after).toEqual(before);
    } finally {
      r.disconnect();
      await s.stop();
      restarted?.r.disconnect();
      await restarted?.s.stop();
    }
  });

  it('automatic rewrites on a full disk are held back after three failures in a row (1 minute, then 2, of server time), as Redis; BGREWRITEAOF is not', async () => {
    const dir = newDir();
    const s = await startOn(dir, ['--appendonly', 'yes', '--save', '', '--auto-aof-rewrite-percentage', '0', '--auto-aof-rewrite-min-size', '1']);
    const r = new Redis(s.port);
    const starts = (): number => s.logs.filter((l) => l.includes('Starting automatic rewriting of AOF')).length;
    const failures = async (): Promise<number> => Number((await info(r)).aof_rewrites_consecutive_failures);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      await fillKeys(s.port, 3000, 'k:');
      fileSizeLimit(s.proc.pid!, 32 * 1024);
      await r.config('SET', 'auto-aof-rewrite-percentage', '100');
      await waitFor('three failed automatic rewrites', async () => (await failures()) >= 3, WAIT_LIMIT_MS);
      await waitFor('the limit', async () => s.logs.some((l) => l.includes('triggered the limit, will retry in 1 minutes')), WAIT_LIMIT_MS);
      expect(starts()).toBe(3);
      // Ten cron ticks and more of real time: no fourth attempt while the server clock stands still.
      await new Promise((res) => setTimeout(res, 1500));
      expect(starts()).toBe(3);
      await r.call('DEBUG', 'CLOCK', 'ADVANCE', '60000');
      await waitFor('the attempt after a minute', async () => (await failures()) >= 4, WAIT_LIMIT_MS);
      await waitFor('the doubled limit', async () => s.logs.some((l) => l.includes('triggered the limit, will retry in 2 minutes')), WAIT_LIMIT_MS);
      expect(starts()).toBe(4);
      // BGREWRITEAOF is the operator's call: never held back.
      fileSizeLimit(s.proc.pid!, 'unlimited');
      expect(await r.bgrewriteaof()).toMatch(/started/);
      const done = await waitRewriteDone(r);
      expect(done.aof_last_bgrewrite_status).toBe('ok');
      expect(done.aof_rewrites_consecutive_failures).toBe('0');
      expect(await r.dbsize()).toBe(3000);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });
});

/**
 * A disk that fills up while decisions are recorded, then frees up: the records are kept in memory
 * and written once it takes writes again; an answered decision is never lost. Two ways to fill it:
 * RLIMIT_FSIZE (EFBIG; any user, any filesystem), and a tmpfs of 256 KiB (ENOSPC; needs mount).
 */
const FULL_DISKS = [
  { name: 'RLIMIT_FSIZE (EFBIG)', code: 'EFBIG', skip: false },
  { name: 'a full tmpfs (ENOSPC)', code: 'ENOSPC', skip: !CAN_MOUNT },
];

describe('journal: writes on a full disk, and recovery', () => {
  for (const disk of FULL_DISKS) {
    // Without mount (not root, or no CAP_SYS_ADMIN) there is no filesystem to fill: ENOSPC then takes the EFBIG path's code (journal-write.ts failed()).
    it.skipIf(disk.skip)(`${disk.name}: aof_last_write_status:err, /readyz 503 and the metrics say so, decisions go on; freed, every answered decision is written and survives kill -9`, async () => {
      const dir = newDir();
      let filler = '';
      if (disk.code === 'ENOSPC') {
        expect(sh('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', dir]).ok).toBe(true);
        filler = join(dir, 'filler');
      }
      const metricsPort = await freePort();
      const s = await startOn(dir, ['--appendonly', 'yes', '--save', '', '--auto-aof-rewrite-percentage', '0', '--metrics-port', String(metricsPort)]);
      const r = new Redis(s.port);
      let restarted: { s: RunningServer; r: Redis } | null = null;
      try {
        await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
        if (disk.code === 'EFBIG') {
          fileSizeLimit(s.proc.pid!, 16 * 1024);
        } else {
          // All but ~16 KiB of the tmpfs (its blocks are 4 KiB pages).
          const used = Number(spawnSync('du', ['-sk', dir], { encoding: 'utf8' }).stdout.split('\t')[0]);
          writeFileSync(filler, Buffer.alloc((256 - used - 16) * 1024, 1));
        }
        const answered = new Map<string, number>();
        let i = 0;
        // Decisions until a write fails, and 50 more while it keeps failing.
        for (; i < 5000 && (await info(r)).aof_last_write_status === 'ok'; i++) {
          const reply = (await r.call('CL.THROTTLE', `key-number-${i}`, 100, 1, 3600, 3)) as number[];
          answered.set(`key-number-${i}`, reply[2]);
        }
        expect(i).toBeLessThan(5000);
        for (let n = 0; n < 50; n++, i++) {
          const reply = (await r.call('CL.THROTTLE', `key-number-${i}`, 100, 1, 3600, 3)) as number[];
          expect(reply[0]).toBe(0);
          answered.set(`key-number-${i}`, reply[2]);
        }
        const failing = await info(r);
        expect(failing.aof_last_write_status).toBe('err');
        expect(Number(failing.aof_buffer_length)).toBeGreaterThan(0);
        expect(s.logs.some((l) => l.includes(`Error writing to the AOF file: ${disk.code}`))).toBe(true);
        const ready = await readyz(metricsPort);
        expect(ready.status).toBe(503);
        expect(ready.body).toContain(`the journal cannot be written (INFO persistence aof_last_write_status:err: ${disk.code}`);
        const m = await aofMetrics(metricsPort);
        expect(m.get('cellgate_aof_last_write_ok')).toBe(0);
        expect(m.get('cellgate_aof_write_errors_total')).toBeGreaterThan(0);
        expect(m.get('cellgate_aof_buffer_bytes')).toBeGreaterThan(0);

        // Freed: the next turn (or the cron) writes what waited, at the offset where the good bytes end.
        if (disk.code === 'EFBIG') fileSizeLimit(s.proc.pid!, 'unlimited');
        else rmSync(filler);
        const afterLeft = ((await r.call('CL.THROTTLE', 'after', 100, 1, 3600, 1)) as number[])[2];
        await waitFor('the write to succeed', async () => (await info(r)).aof_last_write_status === 'ok', WAIT_LIMIT_MS);
        expect(Number((await info(r)).aof_buffer_length)).toBe(0);
        expect(s.logs.some((l) => l.includes('AOF write error looks solved'))).toBe(true);
        expect((await readyz(metricsPort)).status).toBe(200);
        expect((await aofMetrics(metricsPort)).get('cellgate_aof_last_write_ok')).toBe(1);
        await r.call('DEBUG', 'SLEEP', '0.002');
        r.disconnect();
        restarted = await killAndRestart(s, dir);
        for (const [key, left] of answered) expect(await remaining(restarted.r, key), key).toBe(left);
        expect(await remaining(restarted.r, 'after')).toBe(afterLeft);
      } finally {
        r.disconnect();
        await s.stop();
        restarted?.r.disconnect();
        await restarted?.s.stop();
        if (disk.code === 'ENOSPC') sh('umount', [dir]);
      }
    });
  }
});

describe('journal: a read-only journal folder', () => {
  // As root, chmod stops nothing: a read-only bind mount of the folder over itself does (EROFS), and
  // the file already open keeps taking writes through the original mount, as a file opened before a
  // chmod 0555 does. Without mount as root there is no way to make a folder read-only: skipped.
  const mode = IS_ROOT ? (CAN_MOUNT ? 'bind mount read-only (EROFS)' : null) : 'chmod 0555 (EACCES)';
  it.skipIf(mode === null)(`${mode ?? 'root without mount'}: BGREWRITEAOF fails and says why, decisions are still written to the open file; writable again, the rewrite succeeds and kill -9 loses nothing`, async () => {
    const dir = newDir();
    const metricsPort = await freePort();
    const s = await startOn(dir, ['--appendonly', 'yes', '--save', '', '--auto-aof-rewrite-percentage', '0', '--metrics-port', String(metricsPort)]);
    const r = new Redis(s.port);
    const folder = aofDir(dir);
    let readOnly = false;
    const makeWritable = (): void => {
      if (!readOnly) return;
      if (IS_ROOT) sh('umount', [folder]);
      else chmodSync(folder, 0o755);
      readOnly = false;
    };
    let restarted: { s: RunningServer; r: Redis } | null = null;
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      await fillKeys(s.port, 100, 'k:');
      if (IS_ROOT) {
        expect(sh('mount', ['--bind', folder, folder]).ok).toBe(true);
        readOnly = true;
        const ro = sh('mount', ['-o', 'remount,bind,ro', folder]);
        expect(ro.ok, ro.err).toBe(true);
      } else {
        chmodSync(folder, 0o555);
        readOnly = true;
      }
      await expect(r.bgrewriteaof()).rejects.toThrow("ERR Can't execute an AOF background rewriting");
      const code = IS_ROOT ? 'EROFS' : 'EACCES';
      expect(s.logs.some((l) => l.includes("Can't rewrite the append only file") && l.includes(code))).toBe(true);
      const after = await info(r);
      expect(after.aof_last_bgrewrite_status).toBe('err');
      for (let i = 0; i < 10; i++) await r.call('CL.THROTTLE', 'k:1', 100, 1, 3600, 1);
      expect((await info(r)).aof_last_write_status).toBe('ok');
      expect((await readyz(metricsPort)).status).toBe(200);
      expect((await aofMetrics(metricsPort)).get('cellgate_aof_last_bgrewrite_ok')).toBe(0);

      makeWritable();
      expect(await r.bgrewriteaof()).toMatch(/started/);
      expect((await waitRewriteDone(r)).aof_last_bgrewrite_status).toBe('ok');
      await r.call('CL.THROTTLE', 'k:2', 100, 1, 3600, 4);
      const untouched = await remaining(r, 'k:3');
      expect([await remaining(r, 'k:1'), await remaining(r, 'k:2')]).toEqual([untouched - 10, untouched - 4]);
      await r.call('DEBUG', 'SLEEP', '0.002');
      r.disconnect();
      restarted = await killAndRestart(s, dir);
      expect(await restarted.r.dbsize()).toBe(100);
      expect([await remaining(restarted.r, 'k:3'), await remaining(restarted.r, 'k:1'), await remaining(restarted.r, 'k:2')]).toEqual([untouched, untouched - 10, untouched - 4]);
    } finally {
      makeWritable();
      r.disconnect();
      await s.stop();
      restarted?.r.disconnect();
      await restarted?.s.stop();
    }
  });
});

describe('journal: a slow disk', () => {
  it('an everysec fsync still running after 2 s is counted (aof_delayed_fsync, cellgate_aof_delayed_fsync_total) and logged; decisions go on meanwhile', async () => {
    const dir = newDir();
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--dir', dir, '--appendonly', 'yes', '--appendfsync', 'everysec', '--save', '', '--metrics-port', String(metricsPort)] });
    const r = new Redis(s.port);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect((await info(r)).aof_delayed_fsync).toBe('0');
      // Each fsync waits 3 s before it starts: the disk of this test takes 3 s per fsync.
      await r.call('DEBUG', 'JOURNAL-FSYNC-DELAY', '3000');
      await r.call('CL.THROTTLE', 'slow', 100, 1, 3600, 1);
      await waitFor('an fsync to start', async () => (await info(r)).aof_pending_bio_fsync === '1', WAIT_LIMIT_MS);
      // Decisions are answered (and written) while the fsync runs.
      for (let i = 0; i < 10; i++) expect(((await r.call('CL.THROTTLE', 'slow', 100, 1, 3600, 1)) as number[])[0]).toBe(0);
      await waitFor('the delayed fsync to be counted', async () => Number((await info(r)).aof_delayed_fsync) >= 1, WAIT_LIMIT_MS);
      expect(s.logs.some((l) => l.includes('Asynchronous AOF fsync is taking too long'))).toBe(true);
      expect((await aofMetrics(metricsPort)).get('cellgate_aof_delayed_fsync_total')).toBeGreaterThanOrEqual(1);
      await r.call('DEBUG', 'JOURNAL-FSYNC-DELAY', '0');
      await waitFor('the fsync to end', async () => (await info(r)).aof_pending_bio_fsync === '0', WAIT_LIMIT_MS);
      expect((await info(r)).aof_last_write_status).toBe('ok');
      await expect(r.call('DEBUG', 'JOURNAL-FSYNC-DELAY', '-1')).rejects.toThrow('ERR value is not an integer or out of range');
    } finally {
      r.disconnect();
      await s.stop();
    }
  });
});

