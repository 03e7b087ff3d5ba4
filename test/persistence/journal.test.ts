/**
 * The journal with real processes: spends survive `kill -9` (they did not before: a snapshot is
 * point-in-time), DEL/FLUSHALL too; a torn tail is cut and logged, a corrupt record refuses the start
 * with the file and offset (or moves the folder aside); `check` agrees with the loader; BGREWRITEAOF
 * switches the manifest; CONFIG SET appendonly yes/no; SIGTERM syncs; a backend refuses it; a disk
 * that refuses writes shows in INFO, and with `always` no answered decision is lost.
 */
import { describe, expect, it } from 'vitest';
import { appendFileSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { TYPE_NAMES } from '../helpers/key-types.js';
import { JournalParser } from '../../src/persistence/journal-parse.js';
import { fillKeys, info, runToExit, startOn, T0_AHEAD_MS, tempDirsForFile, waitFor } from './helpers.js';
import { startServer } from '../helpers/server.js';

const newDir = tempDirsForFile();
const T0 = T0_AHEAD_MS;

interface Probe {
  type: string;
  key: string;
  spend: (string | number)[];
  peek: (string | number)[];
}

/** A spend and a side-effect-free peek (cost 0) for every algorithm this build has. */
async function probes(r: Redis): Promise<Probe[]> {
  const commands = new Set((await r.call('COMMAND', 'LIST')) as string[]);
  const out: Probe[] = [];
  for (const name of Object.values(TYPE_NAMES)) {
    const key = `t:${name}`;
    if (name === 'gcra') out.push({ type: name, key, spend: ['CL.THROTTLE', key, 9, 10, 60], peek: ['CL.THROTTLE', key, 9, 10, 60, 0] });
    else if (commands.has(`rl.${name}`)) {
      const cmd = `RL.${name.toUpperCase()}`;
      out.push({ type: name, key, spend: [cmd, key, 10, 60_000], peek: [cmd, key, 10, 60_000, 'COST', 0] });
    }
  }
  return out;
}

async function peekAll(r: Redis, ps: Probe[]): Promise<Map<string, unknown>> {
  const m = new Map<string, unknown>();
  for (const p of ps) m.set(p.key, [await r.type(p.key), await r.call(p.peek[0] as string, ...p.peek.slice(1)), await r.pttl(p.key)]);
  return m;
}

const aofDir = (dir: string): string => join(dir, 'appendonlydir');

/**
 * With everysec a turn's records are written at the latest a millisecond after the previous write
 * (docs/journal-format.md): a 2 ms DEBUG SLEEP makes its own turn write them, so a kill -9 after its
 * reply finds every answered decision in the file.
 */
async function settle(r: Redis): Promise<void> {
  await r.call('DEBUG', 'SLEEP', '0.002');
}

function incrFiles(dir: string): string[] {
  return readdirSync(aofDir(dir)).filter((n) => n.endsWith('.incr.aof')).sort();
}

describe('journal: restart after kill -9', () => {
  it('without the journal a kill -9 gives back the spends since the last snapshot; with it every algorithm comes back exactly', async () => {
    for (const fsync of ['always', 'everysec']) {
      for (const appendonly of ['no', 'yes']) {
        const dir = newDir();
        let s = await startOn(dir, ['--appendonly', appendonly, '--appendfsync', fsync]);
        let r = new Redis(s.port);
        const ps = await probes(r);
        expect(ps.length).toBe(Object.keys(TYPE_NAMES).length);
        await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
        // A snapshot of the first spends, then more spends, a DEL and a key flushed away.
        for (const p of ps) await r.call(p.spend[0] as string, ...p.spend.slice(1));
        await r.save();
        for (const p of ps) {
          for (let i = 0; i < 3; i++) {
            await r.call('DEBUG', 'CLOCK', 'ADVANCE', '100');
            await r.call(p.spend[0] as string, ...p.spend.slice(1));
          }
        }
        await r.call('CL.THROTTLE', 'deleted', 5, 10, 60);
        expect(await r.del('deleted')).toBe(1);
        const before = await peekAll(r, ps);
        await settle(r);
        r.disconnect();
        expect(await s.stop('SIGKILL')).toBe(null);

        s = await startOn(dir, ['--appendonly', appendonly]);
        r = new Redis(s.port);
        try {
          await r.call('DEBUG', 'CLOCK', 'SET', String(T0 + 100 * 3 * ps.length));
          const after = await peekAll(r, ps);
          if (appendonly === 'yes') {
            expect(after).toEqual(before);
            expect(await r.exists('deleted')).toBe(0);
            expect(s.logs.some((l) => l.includes('journal loaded from'))).toBe(true);
          } else {
            // A snapshot is point-in-time: its state comes back, the later spends are forgotten.
            expect(after).not.toEqual(before);
          }
        } finally {
          r.disconnect();
          await s.stop();
        }
      }
    }
  }, 120_000);

  it('FLUSHALL, then new keys: only the new keys come back; SIGTERM with appendfsync no syncs the journal', async () => {
    const dir = newDir();
    let s = await startOn(dir, ['--appendonly', 'yes', '--appendfsync', 'no', '--save', '']);
    let r = new Redis(s.port);
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    for (let i = 0; i < 20; i++) await r.call('CL.THROTTLE', `old:${i}`, 5, 10, 60);
    expect(await r.flushall()).toBe('OK');
    await r.call('CL.THROTTLE', 'new', 5, 10, 60, 4);
    r.disconnect();
    expect(await s.stop('SIGTERM')).toBe(0);
    expect(s.logs.some((l) => l.includes('Calling fsync() on the AOF file.'))).toBe(true);
    expect(existsSync(join(dir, 'cellgate.snap'))).toBe(false);

    s = await startOn(dir, ['--appendonly', 'yes']);
    r = new Redis(s.port);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(await r.dbsize()).toBe(1);
      expect(((await r.call('CL.THROTTLE', 'new', 5, 10, 60, 0)) as number[])[2]).toBe(2);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('with no journal yet, the start loads the snapshot and builds the journal from it', async () => {
    const dir = newDir();
    let s = await startOn(dir);
    let r = new Redis(s.port);
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('CL.THROTTLE', 'from-snapshot', 5, 10, 60, 3);
    r.disconnect();
    expect(await s.stop('SIGTERM')).toBe(0);
    s = await startOn(dir, ['--appendonly', 'yes']);
    r = new Redis(s.port);
    try {
      expect(s.logs.some((l) => l.includes('Creating AOF base file appendonly.aof.1.base.snap on server start: 1 keys'))).toBe(true);
      expect(readFileSync(join(aofDir(dir), 'appendonly.aof.manifest'), 'utf8')).toBe(
        'file appendonly.aof.1.base.snap seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n');
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(((await r.call('CL.THROTTLE', 'from-snapshot', 5, 10, 60, 0)) as number[])[2]).toBe(3);
      const i = await info(r);
      expect(i.aof_enabled).toBe('1');
      expect(Number(i.aof_base_size)).toBeGreaterThan(0);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });
});

/** A server with a journal of `n` keys spent once each, killed -9; returns its dir. */
async function journalOf(n: number): Promise<string> {
  const dir = newDir();
  const s = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
  const r = new Redis(s.port);
  await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
  for (let i = 0; i < n; i++) await r.call('CL.THROTTLE', `k${i}`, 5, 10, 60, 1 + (i % 5));
  await settle(r);
  r.disconnect();
  expect(await s.stop('SIGKILL')).toBe(null);
  return dir;
}

describe('journal: torn tail and corrupt records', () => {
  it('a half-written last record is cut and logged; the server starts with every whole record; check reports the tail', async () => {
    const dir = await journalOf(10);
    const incr = join(aofDir(dir), incrFiles(dir)[0]);
    const whole = statSync(incr).size;
    // The first 12 bytes of a copy of the last record, as a crash in the middle of a write leaves them.
    const bytes = readFileSync(incr);
    const parser = new JournalParser(bytes, incr);
    let lastStart = parser.offset;
    for (let scan = null; scan === null; ) {
      const at = parser.offset;
      scan = parser.next(() => {}, 1);
      if (scan === null) lastStart = at;
    }
    appendFileSync(incr, bytes.subarray(lastStart, lastStart + 12));
    const c = runToExit(['check', aofDir(dir)]);
    expect(c.status).toBe(0);
    expect(c.stdout).toContain(`torn_tail: the file ends inside record 10`);
    expect(c.stdout).toContain('\nkeys: 10\n');

    // aof-load-truncated no: refused, with the reason, the file untouched.
    const refused = runToExit(['--port', '0', '--dir', dir, '--appendonly', 'yes', '--aof-load-truncated', 'no', '--warmup', 'no']);
    expect(refused.status).toBe(1);
    expect(refused.stdout + refused.stderr).toContain(`journal ${incr}: truncated: the file ends inside record 10`);
    expect(statSync(incr).size).toBe(whole + 12);

    const s = await startOn(dir, ['--appendonly', 'yes']);
    const r = new Redis(s.port);
    try {
      expect(s.logs.some((l) => l.includes('AOF loaded anyway because aof-load-truncated is enabled: 12 bytes cut at offset'))).toBe(true);
      expect(statSync(incr).size).toBe(whole);
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(await r.dbsize()).toBe(10);
      expect(((await r.call('CL.THROTTLE', 'k9', 5, 10, 60, 0)) as number[])[2]).toBe(6 - 5);
      // Appending goes on after the cut: the next start reads every record.
      await r.call('CL.THROTTLE', 'after-cut', 5, 10, 60);
      await settle(r);
    } finally {
      r.disconnect();
      await s.stop('SIGKILL');
    }
    expect(runToExit(['check', aofDir(dir)]).stdout).toContain('\nkeys: 11\n');
  });

  it('a corrupt record before the last refuses the start naming the file and offset, as check does; move-aside starts empty', async () => {
    const dir = await journalOf(10);
    const incr = join(aofDir(dir), incrFiles(dir)[0]);
    const bytes = readFileSync(incr);
    bytes[40] ^= 0x10;
    writeFileSync(incr, bytes);
    const c = runToExit(['check', aofDir(dir)]);
    expect(c.status).toBe(1);
    const problem = /journal (\S+): corrupt record \d+: [^\n]* at byte offset \d+/.exec(c.stderr)?.[0];
    expect(problem).toBeDefined();
    const refused = runToExit(['--port', '0', '--dir', dir, '--appendonly', 'yes', '--warmup', 'no']);
    expect(refused.status).toBe(1);
    expect(refused.stdout + refused.stderr).toContain(`${problem}; refusing to start (the files are left untouched)`);
    expect(readFileSync(incr).equals(bytes)).toBe(true);

    const s = await startOn(dir, ['--appendonly', 'yes', '--snapshot-corrupt-policy', 'move-aside']);
    const r = new Redis(s.port);
    try {
      expect(s.logs.some((l) => l.includes('CORRUPT JOURNAL') && l.includes('moved aside'))).toBe(true);
      expect(await r.dbsize()).toBe(0);
      const aside = readdirSync(dir).filter((n) => n.startsWith('appendonlydir.corrupt-'));
      expect(aside.length).toBe(1);
      expect(readFileSync(join(dir, aside[0], 'appendonly.aof.1.incr.aof')).equals(bytes)).toBe(true);
      expect(existsSync(join(aofDir(dir), 'appendonly.aof.manifest'))).toBe(true);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('a corrupt manifest refuses the start with its line', async () => {
    const dir = await journalOf(1);
    writeFileSync(join(aofDir(dir), 'appendonly.aof.manifest'), 'file appendonly.aof.1.base.snap seq 1 type x\n');
    const refused = runToExit(['--port', '0', '--dir', dir, '--appendonly', 'yes', '--warmup', 'no']);
    expect(refused.status).toBe(1);
    expect(refused.stdout + refused.stderr).toContain("unknown file type 'x' in the manifest");
  });
});

describe('journal: rewrite and runtime switches', () => {
  it('BGREWRITEAOF writes a new base, switches the manifest and removes the old files; the state survives kill -9', async () => {
    const dir = newDir();
    let s = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
    let r = new Redis(s.port);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      for (let i = 0; i < 200; i++) await r.call('CL.THROTTLE', `k${i % 50}`, 5, 10, 60);
      expect(await r.call('BGREWRITEAOF')).toBe('Background append only file rewriting started');
      await r.call('CL.THROTTLE', 'during', 5, 10, 60);
      await waitFor('the rewrite', async () => (await info(r)).aof_rewrite_in_progress === '0');
      const i = await info(r);
      expect(i.aof_rewrites).toBe('1');
      expect(i.aof_last_bgrewrite_status).toBe('ok');
      expect(readFileSync(join(aofDir(dir), 'appendonly.aof.manifest'), 'utf8')).toBe(
        'file appendonly.aof.2.base.snap seq 2 type b\nfile appendonly.aof.2.incr.aof seq 2 type i\n');
      expect(readdirSync(aofDir(dir)).sort()).toEqual(['appendonly.aof.2.base.snap', 'appendonly.aof.2.incr.aof', 'appendonly.aof.manifest']);
      expect(Number(i.aof_base_size)).toBe(statSync(join(aofDir(dir), 'appendonly.aof.2.base.snap')).size);
      await r.call('CL.THROTTLE', 'after', 5, 10, 60, 2);
      await settle(r);
    } finally {
      r.disconnect();
    }
    expect(await s.stop('SIGKILL')).toBe(null);
    s = await startOn(dir, ['--appendonly', 'yes']);
    r = new Redis(s.port);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(await r.dbsize()).toBe(52);
      // k0 spent 4 times (of 200 calls over 50 keys), one unit each.
      expect(((await r.call('CL.THROTTLE', 'k0', 5, 10, 60, 0)) as number[])[2]).toBe(2);
      expect(((await r.call('CL.THROTTLE', 'after', 5, 10, 60, 0)) as number[])[2]).toBe(4);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('BGSAVE during a rewrite is refused as Redis refuses it (or scheduled); BGREWRITEAOF during a BGSAVE is scheduled', async () => {
    const dir = newDir();
    const s = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
    const r = new Redis(s.port);
    try {
      // Enough keys that a background pass takes hundreds of event-loop turns (its slices are 0.05 ms).
      await fillKeys(s.port, 300_000);
      const started = (await r.call('BGREWRITEAOF')) as string;
      expect(started).toBe('Background append only file rewriting started');
      const [bg, bgs, again] = await Promise.all([
        r.bgsave().catch((e: Error) => e.message),
        r.call('BGSAVE', 'SCHEDULE'),
        r.call('BGREWRITEAOF').catch((e: Error) => e.message),
      ]);
      expect(bg).toBe("ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.");
      expect(bgs).toBe('Background saving scheduled');
      expect(again).toBe('ERR Background append only file rewriting already in progress');
      await waitFor('the rewrite and the scheduled save', async () => {
        const i = await info(r);
        return i.aof_rewrite_in_progress === '0' && i.rdb_bgsave_in_progress === '0' && Number(i.rdb_saves) >= 1;
      });
      expect(await r.bgsave()).toBe('Background saving started');
      expect(await r.call('BGREWRITEAOF')).toBe('Background append only file rewriting scheduled');
      await waitFor('the scheduled rewrite', async () => (await info(r)).aof_rewrites === '2');
    } finally {
      r.disconnect();
      await s.stop();
    }
  }, 60_000);

  it('CONFIG SET appendonly yes starts a journal from a rewrite; no stops it; auto-rewrite follows the size settings', async () => {
    const dir = newDir();
    let s = await startOn(dir, ['--save', '']);
    let r = new Redis(s.port);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      await r.call('CL.THROTTLE', 'before', 5, 10, 60, 2);
      expect((await info(r)).aof_enabled).toBe('0');
      expect(await r.call('BGREWRITEAOF').catch((e: Error) => e.message)).toContain('the journal is off');
      expect(await r.config('SET', 'appendonly', 'yes')).toBe('OK');
      await waitFor('the first rewrite', async () => (await info(r)).aof_rewrites === '1');
      expect((await info(r)).aof_enabled).toBe('1');
      await r.call('CL.THROTTLE', 'after', 5, 10, 60, 3);
      // Auto-rewrite: grown 100% over a tiny size.
      await r.config('SET', 'auto-aof-rewrite-min-size', '1', 'auto-aof-rewrite-percentage', '100');
      for (let i = 0; i < 300; i++) await r.call('CL.THROTTLE', `grow${i}`, 5, 10, 60);
      await waitFor('an automatic rewrite', async () => Number((await info(r)).aof_rewrites) >= 2);
      expect(s.logs.some((l) => l.includes('Starting automatic rewriting of AOF on'))).toBe(true);
      await r.config('SET', 'auto-aof-rewrite-percentage', '0');
      await settle(r);
    } finally {
      r.disconnect();
    }
    expect(await s.stop('SIGKILL')).toBe(null);
    s = await startOn(dir, ['--appendonly', 'yes']);
    r = new Redis(s.port);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(((await r.call('CL.THROTTLE', 'before', 5, 10, 60, 0)) as number[])[2]).toBe(4);
      expect(((await r.call('CL.THROTTLE', 'after', 5, 10, 60, 0)) as number[])[2]).toBe(3);
      expect(await r.config('SET', 'appendonly', 'no')).toBe('OK');
      const i = await info(r);
      expect(i.aof_enabled).toBe('0');
      expect(i.aof_current_size).toBe(undefined);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('appendonly yes with a backend is refused, at start and by CONFIG SET', async () => {
    const refused = runToExit(['--port', '0', '--dir', newDir(), '--appendonly', 'yes', '--backend', 'redis://127.0.0.1:1', '--warmup', 'no']);
    expect(refused.status).toBe(1);
    expect(refused.stdout + refused.stderr).toContain('appendonly yes is not used with a backend: the limiter state lives on the backend');
    const s = await startServer({ args: ['--backend', 'redis://127.0.0.1:1'] });
    const r = new Redis(s.port);
    try {
      expect(await r.config('SET', 'appendonly', 'yes').catch((e: Error) => e.message)).toContain(
        "CONFIG SET failed (possibly related to argument 'appendonly') - appendonly yes is not used with a backend");
    } finally {
      r.disconnect();
      await s.stop();
    }
  });
});

describe('journal: a disk that refuses writes', () => {
  // RLIMIT_FSIZE: writes past the size fail with EFBIG, as a full disk fails them with ENOSPC.
  const limited = (bytes: number) => ['prlimit', `--fsize=${bytes}`, '--'];

  it('everysec: aof_last_write_status:err, decisions go on (stop-writes-on-bgsave-error no) or get MISCONF (yes)', async () => {
    for (const stopWrites of ['no', 'yes']) {
      const dir = newDir();
      const s = await startServer({ args: ['--dir', dir, '--appendonly', 'yes', '--save', '', '--stop-writes-on-bgsave-error', stopWrites], wrap: limited(4096) });
      const r = new Redis(s.port);
      try {
        await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
        // Until a write fails (the command after it may already get MISCONF with stop-writes-on-bgsave-error yes).
        for (let i = 0; i < 1000 && (await info(r)).aof_last_write_status === 'ok'; i++) {
          const reply = await r.call('CL.THROTTLE', `key-number-${i}`, 5, 10, 60).catch((e: Error) => e.message);
          if (typeof reply === 'string') {
            expect(stopWrites).toBe('yes');
            expect(reply).toMatch(/^MISCONF Errors writing to the AOF file: EFBIG/);
          }
        }
        expect((await info(r)).aof_last_write_status).toBe('err');
        expect(s.logs.some((l) => l.includes('Error writing to the AOF file: EFBIG'))).toBe(true);
        const next = r.call('CL.THROTTLE', 'one-more', 5, 10, 60).catch((e: Error) => e.message);
        if (stopWrites === 'no') expect(((await next) as number[])[0]).toBe(0);
        else expect(await next).toMatch(/^MISCONF Errors writing to the AOF file: EFBIG/);
        // Reads are never refused.
        expect(await r.call('CL.THROTTLE', 'key-number-0', 5, 10, 60, 0).catch((e: Error) => e.message)).toBeDefined();
      } finally {
        r.disconnect();
        await s.stop();
      }
    }
  });

  it('always: the process exits rather than answer a decision that is not on disk; every answered one is there after restart', async () => {
    const dir = newDir();
    const s = await startServer({ args: ['--dir', dir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', ''], wrap: limited(4096) });
    const r = new Redis(s.port, { maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null, lazyConnect: true });
    await r.connect();
    const answered: string[] = [];
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    for (let i = 0; i < 1000; i++) {
      try {
        await r.call('CL.THROTTLE', `key-number-${i}`, 5, 10, 60, 2);
        answered.push(`key-number-${i}`);
      } catch {
        break;
      }
    }
    r.disconnect();
    expect(await s.stop()).toBe(1);
    expect(s.logs.some((l) => l.includes("Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting..."))).toBe(true);
    expect(answered.length).toBeGreaterThan(10);
    expect(answered.length).toBeLessThan(1000);

    const again = await startOn(dir, ['--appendonly', 'yes']);
    const r2 = new Redis(again.port);
    try {
      await r2.call('DEBUG', 'CLOCK', 'SET', String(T0));
      for (const key of answered) expect(((await r2.call('CL.THROTTLE', key, 5, 10, 60, 0)) as number[])[2]).toBe(4);
    } finally {
      r2.disconnect();
      await again.stop();
    }
  });
});
