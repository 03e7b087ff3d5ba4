/**
 * Hostile files where persistence reads: a FIFO (whose open would wait for a writer for ever, with
 * the port already answering LOADING) or a symlink to /dev/zero (a read that never ends) named as
 * the snapshot, the journal manifest, the journal base or an incremental file. Each start is
 * refused at once with the file and the reason; `check` says the same; nothing hangs (a hung
 * process would be killed by runToExit's deadline and report no exit status). A FIFO planted as
 * the lock file is no lock: the server starts.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { readdirSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { runToExit, startOn, T0_AHEAD_MS, tempDirsForFile } from './helpers.js';

const newDir = tempDirsForFile();
const aofDir = (dir: string): string => join(dir, 'appendonlydir');

function mkfifo(path: string): void {
  rmSync(path, { force: true });
  const r = spawnSync('mkfifo', [path], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`mkfifo failed: ${r.stderr}`);
}

function devZero(path: string): void {
  rmSync(path, { force: true });
  symlinkSync('/dev/zero', path);
}

function start(dir: string, args: string[] = []): { status: number | null; out: string } {
  const r = runToExit(['--port', '0', '--dir', dir, '--warmup', 'no', '--save', '', ...args]);
  return { status: r.status, out: r.stdout + r.stderr };
}

/** A real journal of a few keys (base and incremental file seq 1), its server killed. */
async function journalOf(): Promise<string> {
  const dir = newDir();
  const s = await startOn(dir, ['--appendonly', 'yes', '--save', '']);
  const r = new Redis(s.port);
  try {
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0_AHEAD_MS));
    for (let i = 0; i < 5; i++) await r.call('CL.THROTTLE', `k${i}`, 5, 10, 60, 1);
    await r.call('DEBUG', 'SLEEP', '0.002');
  } finally {
    r.disconnect();
  }
  await s.stop('SIGKILL');
  return dir;
}

describe('persistence: special files are refused, never waited on', () => {
  it('the snapshot as a FIFO or a symlink to /dev/zero: the start is refused at once, naming it; check too', () => {
    for (const [make, kind] of [[mkfifo, 'a FIFO'], [devZero, 'a character device']] as const) {
      const dir = newDir();
      const snap = join(dir, 'cellgate.snap');
      make(snap);
      const started = start(dir);
      expect(started.status, started.out).toBe(1);
      expect(started.out).toContain(`cannot read snapshot '${snap}': it is ${kind}, only regular files are read`);
      const check = runToExit(['check', snap]);
      expect(check.status, check.stdout + check.stderr).toBe(1);
      expect(check.stderr).toContain(`it is ${kind}, only regular files are read`);
    }
  });

  it('the journal manifest as a FIFO or /dev/zero: the start is refused at once, naming it; check too', async () => {
    const dir = await journalOf();
    const manifest = join(aofDir(dir), 'appendonly.aof.manifest');
    for (const [make, kind] of [[mkfifo, 'a FIFO'], [devZero, 'a character device']] as const) {
      make(manifest);
      const started = start(dir, ['--appendonly', 'yes']);
      expect(started.status, started.out).toBe(1);
      expect(started.out).toContain(`cannot read journal manifest '${manifest}': it is ${kind}, only regular files are read`);
      const check = runToExit(['check', aofDir(dir)]);
      expect(check.status, check.stdout + check.stderr).toBe(1);
      expect(check.stderr).toContain(`it is ${kind}, only regular files are read`);
    }
  });

  for (const worker of ['yes', 'no']) {
    it(`an incremental file as a FIFO or /dev/zero (aof-load-worker ${worker}): the start is refused at once, naming it; check too`, async () => {
      const dir = await journalOf();
      const incr = join(aofDir(dir), readdirSync(aofDir(dir)).find((n) => n.endsWith('.incr.aof'))!);
      for (const [make, kind] of [[mkfifo, 'a FIFO'], [devZero, 'a character device']] as const) {
        make(incr);
        const started = start(dir, ['--appendonly', 'yes', '--aof-load-worker', worker]);
        expect(started.status, started.out).toBe(1);
        expect(started.out).toContain(`cannot read journal file '${incr}': it is ${kind}, only regular files are read`);
        const check = runToExit(['check', aofDir(dir)]);
        expect(check.status, check.stdout + check.stderr).toBe(1);
        expect(check.stderr).toContain(`it is ${kind}, only regular files are read`);
      }
    });
  }

  it('the journal base as a FIFO: the start is refused at once, naming it', async () => {
    const dir = await journalOf();
    const base = join(aofDir(dir), readdirSync(aofDir(dir)).find((n) => n.endsWith('.base.snap'))!);
    mkfifo(base);
    const started = start(dir, ['--appendonly', 'yes']);
    expect(started.status, started.out).toBe(1);
    expect(started.out).toContain(`cannot read snapshot '${base}': it is a FIFO, only regular files are read`);
    const check = runToExit(['check', aofDir(dir)]);
    expect(check.status, check.stdout + check.stderr).toBe(1);
    expect(check.stderr).toContain('it is a FIFO, only regular files are read');
  });

  it('a snapshot larger than the bound (a sparse file of 4 GiB + 1 byte) is refused before any of it is read', () => {
    const dir = newDir();
    const snap = join(dir, 'cellgate.snap');
    writeFileSync(snap, '');
    truncateSync(snap, 4 * 1024 * 1024 * 1024 + 1);
    try {
      const started = start(dir);
      expect(started.status, started.out).toBe(1);
      expect(started.out).toContain(`cannot read snapshot '${snap}': it is larger than 4294967296 bytes`);
      const check = runToExit(['check', snap]);
      expect(check.status, check.stdout + check.stderr).toBe(1);
      expect(check.stderr).toContain('it is larger than 4294967296 bytes');
    } finally {
      rmSync(snap, { force: true });
    }
  });

  it('a FIFO planted as the lock file is no lock: the server starts and serves', async () => {
    const dir = newDir();
    mkfifo(join(dir, '.cellgate-lock'));
    const s = await startOn(dir, ['--save', '']);
    const r = new Redis(s.port);
    try {
      expect(await r.ping()).toBe('PONG');
    } finally {
      r.disconnect();
      await s.stop();
    }
  });
});
