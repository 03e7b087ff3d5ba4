/**
 * The final snapshot: SIGTERM, SIGINT and SHUTDOWN [SAVE] write it, SHUTDOWN NOSAVE does not, `save ""`
 * turns it off for signals and plain SHUTDOWN (as Redis), and a SHUTDOWN whose save fails is refused
 * unless FORCE.
 */
import { describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { blockDir, info, runToExit, startOn, T0_AHEAD_MS, tempDirsForFile } from './helpers.js';

const newDir = tempDirsForFile();
const T0 = T0_AHEAD_MS;

async function withKeys(dir: string, args: string[] = [], n = 3): Promise<{ s: Awaited<ReturnType<typeof startOn>>; r: Redis }> {
  const s = await startOn(dir, args);
  const r = new Redis(s.port);
  await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
  for (let i = 0; i < n; i++) await r.call('CL.THROTTLE', `k${i}`, 5, 10, 60);
  return { s, r };
}

/** Sends a SHUTDOWN that ends the process (no reply comes) and returns the exit code. */
async function shutdownAndExit(s: Awaited<ReturnType<typeof startOn>>, r: Redis, ...args: string[]): Promise<number | null> {
  const exited = s.proc.exitCode !== null ? Promise.resolve(s.proc.exitCode) : new Promise<number | null>((resolve) => s.proc.once('exit', (code) => resolve(code)));
  void r.call('SHUTDOWN', ...args).catch(() => {});
  const code = await exited;
  r.disconnect();
  await s.stop();
  return code;
}

function keysIn(dir: string, file = 'cellgate.snap'): number {
  const c = runToExit(['check', join(dir, file)]);
  expect(c.status).toBe(0);
  return Number(/\nkeys: (\d+)\n/.exec(c.stdout)![1]);
}

describe('snapshot at shutdown', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`${signal} saves, then exits 0`, async () => {
      const dir = newDir();
      const { s, r } = await withKeys(dir);
      r.disconnect();
      expect(await s.stop(signal)).toBe(0);
      expect(keysIn(dir)).toBe(3);
      expect(s.logs.some((l) => l.includes('DB saved on disk'))).toBe(true);
    });
  }

  it('SHUTDOWN saves; SHUTDOWN NOSAVE leaves the previous snapshot as it was', async () => {
    const dir = newDir();
    let { s, r } = await withKeys(dir, [], 2);
    expect(await shutdownAndExit(s, r)).toBe(0);
    expect(keysIn(dir)).toBe(2);
    const before = readFileSync(join(dir, 'cellgate.snap'));

    ({ s, r } = await withKeys(dir, [], 5));
    expect(await r.dbsize()).toBe(5);
    expect(await shutdownAndExit(s, r, 'NOSAVE')).toBe(0);
    expect(readFileSync(join(dir, 'cellgate.snap')).equals(before)).toBe(true);
  });

  it('save "" : no snapshot on SIGTERM or plain SHUTDOWN, but SHUTDOWN SAVE writes one', async () => {
    const dir = newDir();
    let { s, r } = await withKeys(dir, ['--save', '']);
    r.disconnect();
    expect(await s.stop('SIGTERM')).toBe(0);
    expect(existsSync(join(dir, 'cellgate.snap'))).toBe(false);

    ({ s, r } = await withKeys(dir, ['--save', '']));
    expect(await shutdownAndExit(s, r, 'SAVE')).toBe(0);
    expect(keysIn(dir)).toBe(3);
  });

  it('SHUTDOWN whose save fails is refused (server keeps serving); FORCE exits anyway', async () => {
    const dir = newDir();
    const { s, r } = await withKeys(dir);
    // A plain file where the directory was makes every save fail (ENOTDIR), even as root.
    const blocker = blockDir(dir);
    await expect(r.call('SHUTDOWN')).rejects.toThrow('ERR Errors trying to SHUTDOWN. Check logs.');
    expect(await r.ping()).toBe('PONG');
    expect((await info(r)).rdb_last_error).toMatch(/^ENOTDIR/);
    await expect(r.call('SAVE')).rejects.toThrow(/^ERR$/);
    expect(await shutdownAndExit(s, r, 'FORCE')).toBe(1);
    blocker.restore();
    expect(existsSync(join(dir, 'cellgate.snap'))).toBe(false);
  });

  it('SIGTERM whose save fails logs it and exits 1, leaving the old snapshot', async () => {
    const dir = newDir();
    const { s, r } = await withKeys(dir);
    await r.save();
    const before = readFileSync(join(dir, 'cellgate.snap'));
    await r.call('CL.THROTTLE', 'more', 5, 10, 60);
    const blocker = blockDir(dir);
    r.disconnect();
    expect(await s.stop('SIGTERM')).toBe(1);
    blocker.restore();
    expect(s.logs.some((l) => l.includes('The final snapshot failed: exiting anyway'))).toBe(true);
    expect(readFileSync(join(dir, 'cellgate.snap')).equals(before)).toBe(true);
  });

  it('SHUTDOWN argument errors, as Redis', async () => {
    const dir = newDir();
    const { s, r } = await withKeys(dir);
    try {
      await expect(r.call('SHUTDOWN', 'NOSAVE', 'SAVE')).rejects.toThrow('ERR syntax error');
      await expect(r.call('SHUTDOWN', 'BOGUS')).rejects.toThrow('ERR syntax error');
      await expect(r.call('SHUTDOWN', 'ABORT')).rejects.toThrow('ERR No shutdown in progress.');
      expect(await r.ping()).toBe('PONG');
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('dbfilename must be a file name (as Redis), at start and with CONFIG SET', async () => {
    const r0 = runToExit(['--dbfilename', '../x.snap']);
    expect(r0.status).toBe(1);
    expect(r0.stderr).toBe("cellgate: --dbfilename: dbfilename can't be a path, just a filename\n");
    const dir = newDir();
    const { s, r } = await withKeys(dir, [], 1);
    try {
      await expect(r.config('SET', 'dbfilename', '/etc/x')).rejects.toThrow("dbfilename can't be a path, just a filename");
      expect(await r.config('SET', 'dbfilename', 'other.snap')).toBe('OK');
      expect(await r.save()).toBe('OK');
      expect(keysIn(dir, 'other.snap')).toBe(1);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });
});
