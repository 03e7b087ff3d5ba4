/**
 * `CONFIG SET appendonly yes` while a BGSAVE runs, with decisions going on all along: the journal's
 * first rewrite waits for the save (INFO aof_rewrite_scheduled:1, as Redis's aof_rewrite_scheduled)
 * and then builds the journal from the point-in-time copy it starts with, whatever was decided while
 * it waited. Real processes: a keyspace large enough that the BGSAVE spans many event-loop turns, a
 * second client deciding in a loop the whole time, then kill -9 and a restart that must give back
 * every answered decision.
 */
import { describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { fillKeys, info, runToExit, startOn, T0_AHEAD_MS, tempDirsForFile, waitFor } from './helpers.js';
import type { RunningServer } from '../helpers/server.js';
import { WAIT_LIMIT_MS } from '../helpers/wait.js';

const newDir = tempDirsForFile();
const T0 = T0_AHEAD_MS;

describe('journal: appendonly turned on during a BGSAVE', () => {
  it('the rewrite is scheduled after the BGSAVE and succeeds under steady traffic: manifest written, INFO aof_* as Redis, kill -9 keeps every answered decision', async () => {
    const dir = newDir();
    const s = await startOn(dir, ['--save', '', '--auto-aof-rewrite-percentage', '0']);
    const r = new Redis(s.port);
    const traffic = new Redis(s.port);
    let restarted: { s: RunningServer; r: Redis } | null = null;
    const answered = new Map<string, number>();
    let stop = false;
    let decided = 0;
    let loop: Promise<void> = Promise.resolve();
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      // Enough keys that the BGSAVE spans many event-loop turns (its slices yield to clients).
      await fillKeys(s.port, 100_000, 'k:');
      // Steady traffic from a second client, before, during and after the BGSAVE and the rewrite.
      loop = (async () => {
        for (let i = 0; i < 1_000_000 && !stop; i++) {
          const key = `t:${i % 500}`;
          const reply = (await traffic.call('CL.THROTTLE', key, 100_000, 100, 3600, 1)) as number[];
          answered.set(key, reply[2]);
          decided++;
        }
      })();
      await waitFor('traffic', async () => decided >= 50, WAIT_LIMIT_MS);
      // One read: the CONFIG SET lands while the BGSAVE runs.
      const replies = (await r.pipeline().bgsave().config('SET', 'appendonly', 'yes').info('persistence').exec())!;
      expect(replies[0][1]).toBe('Background saving started');
      expect(replies[1][1]).toBe('OK');
      const during = String(replies[2][1]);
      expect(during).toContain('rdb_bgsave_in_progress:1');
      expect(during).toContain('aof_enabled:1');
      expect(during).toContain('aof_rewrite_scheduled:1');
      expect(during).toContain('aof_rewrite_in_progress:0');
      await waitFor('the journal built after the BGSAVE', async () => {
        const i = await info(r);
        return i.rdb_bgsave_in_progress === '0' && i.aof_rewrite_in_progress === '0' && i.aof_rewrite_scheduled === '0' && i.aof_rewrites === '1';
      }, WAIT_LIMIT_MS);
      const aofDir = join(dir, 'appendonlydir');
      expect(existsSync(join(aofDir, 'appendonly.aof.manifest'))).toBe(true);
      // More traffic recorded in the new journal, then stop.
      const at = decided;
      await waitFor('traffic after the rewrite', async () => decided >= at + 200, WAIT_LIMIT_MS);
      stop = true;
      await loop;
      const i = await info(r);
      expect(i.aof_enabled).toBe('1');
      expect(i.aof_last_bgrewrite_status).toBe('ok');
      expect(i.aof_rewrites_consecutive_failures).toBe('0');
      expect(i.aof_last_write_status).toBe('ok');
      expect(i.aof_rewrite_scheduled).toBe('0');
      expect(i.aof_pending_rewrite).toBe('0');
      expect(Number(i.aof_base_size)).toBeGreaterThan(0);
      expect(Number(i.aof_current_size)).toBeGreaterThan(Number(i.aof_base_size));
      expect(s.logs.some((l) => l.includes("Can't rewrite the append only file"))).toBe(false);
      const check = runToExit(['check', aofDir]);
      expect(check.status, check.stdout + check.stderr).toBe(0);
      // everysec: the last turn's records are written within the coalescing window; a DEBUG SLEEP is past it.
      await r.call('DEBUG', 'SLEEP', '0.002');
      r.disconnect();
      traffic.disconnect();
      await s.stop('SIGKILL');
      const again = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
      restarted = { s: again, r: new Redis(again.port) };
      await restarted.r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(await restarted.r.dbsize()).toBe(100_000 + answered.size);
      for (const [key, left] of answered) {
        expect(((await restarted.r.call('CL.THROTTLE', key, 100_000, 100, 3600, 0)) as number[])[2], key).toBe(left);
      }
    } finally {
      stop = true;
      await loop.catch(() => undefined);
      r.disconnect();
      traffic.disconnect();
      await s.stop();
      restarted?.r.disconnect();
      await restarted?.s.stop();
    }
  });
});
