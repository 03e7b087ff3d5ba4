/**
 * Operating the snapshot directory, with real processes:
 * - temp files have a reserved name no dbfilename can have, and the start-up cleanup removes only
 *   those (a snapshot called `temp-4000000.snap` is no longer deleted); dbfilename refuses CR/LF/NUL,
 *   path separators and the reserved prefix, at start and with CONFIG SET;
 * - a failed background save is reported (INFO, log) but does not refuse writes by default;
 * - `dir` is created, proved writable and locked at start, failing at once with the real cause
 *   (ENOTDIR, a /proc path, EROFS, another instance's pid); a stale lock is taken over; a clean exit
 *   removes the lock;
 * - the port is bound before the snapshot loads (a port in use fails before any loading), INFO says
 *   loading:1 and other commands get LOADING during the load (made slow with `key-load-delay`), and a
 *   shutdown during the load does not save a half-loaded keyspace;
 * - snapshot-corrupt-policy move-aside renames a corrupt snapshot and starts empty;
 * - SIGHUP is logged and ignored.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { fillKeys, info, runToExit, startOn, tempDirsForFile, waitFor, waitForBgsave } from '../persistence/helpers.js';
import { MAIN } from '../helpers/server.js';

const newDir = tempDirsForFile();

/** A dir holding a snapshot of `n` CL.THROTTLE keys (each lives about an hour), written at SIGTERM. */
async function dirWithKeys(n: number, dbfilename = 'cellgate.snap'): Promise<string> {
  const dir = newDir();
  const s = await startOn(dir, ['--dbfilename', dbfilename]);
  await fillKeys(s.port, n);
  expect(await s.stop('SIGTERM')).toBe(0);
  expect(existsSync(join(dir, dbfilename))).toBe(true);
  return dir;
}

/** A cellgate process whose log lines (JSON) are collected, for starts that `startServer` cannot wait for. */
class Proc {
  readonly proc: ChildProcess;
  readonly lines: string[] = [];
  stderr = '';
  readonly exited: Promise<number | null>;
  private waiters: (() => void)[] = [];

  constructor(args: string[]) {
    this.proc = spawn(process.execPath, [MAIN, '--bind', '127.0.0.1', '--log-format', 'json', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let buf = '';
    this.proc.stdout!.on('data', (chunk: Buffer) => {
      buf += chunk.toString('utf8');
      let nl: number;
      while ((nl = buf.indexOf('\n')) !== -1) {
        this.lines.push(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
      for (const w of this.waiters) w();
    });
    this.proc.stderr!.on('data', (chunk: Buffer) => (this.stderr += chunk.toString('utf8')));
    this.exited = new Promise((resolve) => this.proc.on('exit', (code) => {
      resolve(code);
      for (const w of this.waiters) w();
    }));
  }

  /** The first log entry whose message contains `text` (waits up to 20 s). */
  async entry(text: string): Promise<Record<string, unknown>> {
    const find = (): Record<string, unknown> | undefined => {
      for (const l of this.lines) {
        try {
          const e = JSON.parse(l) as Record<string, unknown>;
          if (String(e.msg).includes(text)) return e;
        } catch {
          /* not JSON */
        }
      }
      return undefined;
    };
    const until = Date.now() + 20_000;
    for (;;) {
      const e = find();
      if (e !== undefined) return e;
      if (this.proc.exitCode !== null || Date.now() > until) throw new Error(`no log line with '${text}': ${this.lines.join('\n')}\n${this.stderr}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<number | null> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(signal);
    return this.exited;
  }
}
const procs: Proc[] = [];
afterAll(async () => {
  await Promise.all(procs.map((p) => p.kill()));
});
function run(args: string[]): Proc {
  const p = new Proc(args);
  procs.push(p);
  return p;
}

describe('temp files and dbfilename', () => {
  it('a snapshot named like an old-style temp file (temp-4000000.snap) is loaded, not deleted as stale', async () => {
    const dir = await dirWithKeys(100, 'temp-4000000.snap');
    const s = await startOn(dir, ['--dbfilename', 'temp-4000000.snap']);
    const r = new Redis(s.port);
    try {
      expect(await r.dbsize()).toBe(100);
      expect(existsSync(join(dir, 'temp-4000000.snap'))).toBe(true);
      expect(s.logs.some((l) => l.includes('left by a save that never finished'))).toBe(false);
    } finally {
      r.disconnect();
      await s.stop('SIGKILL');
    }
  });

  it('a stale temp file of the reserved form is removed at start; nothing else in dir is', async () => {
    const dir = newDir();
    // A pid that is certainly not running: a process that has exited.
    const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
    const stale = join(dir, `.cellgate-temp-${dead.stdout}-3.snap`);
    writeFileSync(stale, 'partial');
    for (const other of [`temp-${dead.stdout}.snap`, 'notes.txt', `x.cellgate-temp-${dead.stdout}.snap`]) writeFileSync(join(dir, other), 'keep');
    const s = await startOn(dir);
    try {
      expect(existsSync(stale)).toBe(false);
      expect(s.logs.some((l) => l.includes(`removed ${stale}, left by a save that never finished`))).toBe(true);
      expect(readdirSync(dir).filter((n) => readFileSync(join(dir, n), 'utf8') === 'keep').length).toBe(3);
    } finally {
      await s.stop('SIGKILL');
    }
  });

  it('dbfilename refuses CR, LF, NUL, path separators and the reserved prefix, at start and with CONFIG SET', async () => {
    for (const [bad, why] of [
      ['a\r\nb.snap', 'control characters'], ['evil\n.snap', 'control characters'], ['nul\x00.snap', 'control characters'],
      ['dir/x.snap', "can't be a path"], ['dir\\x.snap', "can't be a path"], ['.cellgate-lock', 'reserved'], ['.cellgate-temp-1.snap', 'reserved'],
    ] as const) {
      if (bad.includes('\x00')) continue; // a NUL cannot be passed in argv: CONFIG SET below covers it
      const r0 = runToExit(['--port', '0', '--dbfilename', bad]);
      expect(r0.status, bad).toBe(1);
      expect(r0.stderr, bad).toContain(why);
    }
    const s = await startOn(newDir());
    const r = new Redis(s.port);
    try {
      for (const bad of ['a\r\nb.snap', 'evil\n.snap', 'nul\x00.snap', 'dir\\x.snap', '.cellgate-lock']) {
        await expect(r.config('SET', 'dbfilename', bad), JSON.stringify(bad)).rejects.toThrow(/dbfilename/);
      }
      expect(await r.config('GET', 'dbfilename')).toEqual(['dbfilename', 'cellgate.snap']);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });
});

describe('a failed background save', () => {
  it('is reported (INFO err, the log) but writes go on by default (stop-writes-on-bgsave-error no)', async () => {
    const dir = newDir();
    const s = await startOn(dir);
    const r = new Redis(s.port);
    try {
      expect(await r.config('GET', 'stop-writes-on-bgsave-error')).toEqual(['stop-writes-on-bgsave-error', 'no']);
      // The rename onto the snapshot fails: a non-empty directory sits where the file must go (works as root).
      mkdirSync(join(dir, 'blocked.snap', 'x'), { recursive: true });
      await r.config('SET', 'dbfilename', 'blocked.snap');
      await r.call('CL.THROTTLE', 'a', 5, 10, 60);
      expect(await r.bgsave()).toBe('Background saving started');
      const i = await waitForBgsave(r);
      expect(i.rdb_last_bgsave_status).toBe('err');
      expect(i.rdb_last_error).toMatch(/EISDIR|ENOTEMPTY|EEXIST/);
      expect(s.logs.some((l) => l.includes('Background saving error'))).toBe(true);
      expect(((await r.call('CL.THROTTLE', 'a', 5, 10, 60)) as number[])[0]).toBe(0);
      expect(await r.del('a')).toBe(1);
    } finally {
      r.disconnect();
      await s.stop('SIGKILL');
    }
  });
});

describe('the snapshot directory at start', () => {
  it('a dir that cannot be created fails at once with the real cause: ENOTDIR, a /proc path', () => {
    const file = join(newDir(), 'plain-file');
    writeFileSync(file, 'x');
    const r1 = runToExit(['--port', '0', '--dir', join(file, 'sub')]);
    expect(r1.status).toBe(1);
    expect(r1.stderr).toMatch(/cannot create the snapshot directory '.*plain-file\/sub': ENOTDIR/);
    // Node's recursive mkdir loops forever here (100% CPU); the start must fail instead (runToExit
    // gives up after 20 s, which would leave status null).
    const r2 = runToExit(['--port', '0', '--dir', '/proc/cellgate-nope/x']);
    expect(r2.status).toBe(1);
    expect(r2.stderr).toMatch(/cannot create the snapshot directory '\/proc\/cellgate-nope\/x': ENOENT \(mkdir \/proc\/cellgate-nope\)/);
  });

  const canMount = process.getuid?.() === 0 && spawnSync('mount', ['--version']).status === 0;
  it.runIf(canMount)('a read-only dir (a read-only tmpfs: chmod does not stop root) fails at start with EROFS', () => {
    const dir = newDir();
    if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=1m', 'tmpfs', dir]).status !== 0) return;
    try {
      const r = runToExit(['--port', '0', '--dir', dir]);
      expect(r.status).toBe(1);
      expect(r.stderr).toBe(`cellgate: the snapshot directory '${dir}' is not writable: EROFS\n`);
    } finally {
      spawnSync('umount', [dir]);
    }
  });

  it('a second instance on the same dir fails naming the first one\'s pid; a clean exit removes the lock', async () => {
    const dir = newDir();
    const first = await startOn(dir);
    try {
      expect(readFileSync(join(dir, '.cellgate-lock'), 'utf8')).toBe(`${first.proc.pid}\n`);
      const second = runToExit(['--port', '0', '--dir', dir]);
      expect(second.status).toBe(1);
      expect(second.stderr).toContain(`the snapshot directory is in use by another cellgate (pid ${first.proc.pid}, lock file ${join(dir, '.cellgate-lock')})`);
    } finally {
      expect(await first.stop('SIGTERM')).toBe(0);
    }
    expect(existsSync(join(dir, '.cellgate-lock'))).toBe(false);
  });

  it('a stale lock (its pid is not running, e.g. after kill -9) is taken over, with a warning', async () => {
    const dir = newDir();
    const crashed = await startOn(dir);
    const pid = crashed.proc.pid;
    await crashed.stop('SIGKILL');
    expect(readFileSync(join(dir, '.cellgate-lock'), 'utf8')).toBe(`${pid}\n`);
    const s = await startOn(dir);
    try {
      expect(s.logs.some((l) => l.includes(`took over the lock file ${join(dir, '.cellgate-lock')} left by pid ${pid}`))).toBe(true);
      expect(readFileSync(join(dir, '.cellgate-lock'), 'utf8')).toBe(`${s.proc.pid}\n`);
    } finally {
      await s.stop();
    }
  });
});

describe('loading', () => {
  it('a port in use fails the start before the snapshot is loaded', async () => {
    const dir = await dirWithKeys(1000);
    const blocker = net.createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as net.AddressInfo).port;
    try {
      const r = runToExit(['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--log-format', 'json']);
      expect(r.status).toBe(1);
      expect(r.stderr).toContain(`cannot listen on 127.0.0.1:${port}: address already in use`);
      expect(r.stdout).not.toContain('snapshot loaded');
    } finally {
      blocker.close();
    }
  });

  it('while the snapshot loads, INFO says loading:1, PING answers, other commands get LOADING; then every key is there', async () => {
    const dir = await dirWithKeys(3000);
    // 1 ms per key: the load lasts at least 3 s of real time, however busy the machine.
    const p = run(['--port', '0', '--dir', dir, '--key-load-delay', '1000']);
    const port = Number((await p.entry('loading the snapshot')).port);
    // No ready check: ioredis's own would hold every command back until INFO says loading:0.
    const r = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0, enableReadyCheck: false });
    try {
      let loadingSeen = 0;
      let loadingError = '';
      let pong = '';
      await waitFor('the end of the load', async () => {
        const i = await info(r);
        if (i.loading === '1') {
          loadingSeen++;
          expect(Number(i.loading_total_bytes)).toBeGreaterThan(0);
          expect(i.loading_eta_seconds).toMatch(/^\d+$/);
          expect(Number(i.loading_loaded_perc)).toBeLessThanOrEqual(100);
          if (loadingError === '') loadingError = await r.call('CL.THROTTLE', 'x', 5, 10, 60).then(String, (e: Error) => e.message);
          if (pong === '') pong = await r.ping();
        }
        return i.loading === '0';
      }, 60_000);
      expect(loadingSeen).toBeGreaterThanOrEqual(1);
      expect(loadingError).toBe('LOADING Redis is loading the dataset in memory');
      expect(pong).toBe('PONG');
      await p.entry('ready to accept connections');
      expect(await r.dbsize()).toBe(3000);
      expect((await info(r)).rdb_last_load_keys_loaded).toBe('3000');
      expect((await info(r, 'errorstats')).errorstat_LOADING).toBe('count=1');
    } finally {
      r.disconnect();
      await p.kill();
    }
  }, 90_000);

  it('SIGTERM during the load exits without saving: the snapshot stays as it was', async () => {
    const dir = await dirWithKeys(3000);
    const before = readFileSync(join(dir, 'cellgate.snap'));
    const p = run(['--port', '0', '--dir', dir, '--key-load-delay', '1000']);
    await p.entry('loading the snapshot');
    expect(await p.kill('SIGTERM')).toBe(0);
    expect(p.lines.some((l) => l.includes('ready to accept connections'))).toBe(false);
    expect(p.lines.some((l) => l.includes('Shutting down while loading the snapshot: not saving'))).toBe(true);
    expect(readFileSync(join(dir, 'cellgate.snap')).equals(before)).toBe(true);
  });
});

describe('snapshot-corrupt-policy and SIGHUP', () => {
  it('move-aside renames a corrupt snapshot to <file>.corrupt-<timestamp>, logs a warning and starts empty', async () => {
    const dir = await dirWithKeys(50);
    const file = join(dir, 'cellgate.snap');
    const corrupt = Buffer.from(readFileSync(file));
    corrupt[corrupt.length - 1] ^= 0xff; // the checksum
    writeFileSync(file, corrupt);
    // The default refuses, leaving the file.
    const refused = runToExit(['--port', '0', '--dir', dir]);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toContain('checksum mismatch');
    expect(readFileSync(file).equals(corrupt)).toBe(true);
    const s = await startOn(dir, ['--snapshot-corrupt-policy', 'move-aside']);
    const r = new Redis(s.port);
    try {
      expect(await r.dbsize()).toBe(0);
      expect(existsSync(file)).toBe(false);
      const moved = readdirSync(dir).filter((n) => /^cellgate\.snap\.corrupt-\d{8}T\d{9}Z$/.test(n));
      expect(moved.length).toBe(1);
      expect(readFileSync(join(dir, moved[0])).equals(corrupt)).toBe(true);
      const warning = s.logs.map((l) => JSON.parse(l) as { level?: string; msg: string }).find((e) => e.msg.includes('CORRUPT SNAPSHOT'));
      expect(warning?.level).toBe('warning');
      expect(warning?.msg).toContain(`moved aside to ${join(dir, moved[0])}`);
    } finally {
      r.disconnect();
      await s.stop('SIGKILL');
    }
  });

  it('SIGHUP is logged and ignored', async () => {
    const s = await startOn(newDir());
    const r = new Redis(s.port);
    try {
      s.proc.kill('SIGHUP');
      await waitFor('the SIGHUP log line', async () => s.logs.some((l) => l.includes('received SIGHUP: ignored')));
      expect(await r.ping()).toBe('PONG');
      expect(s.proc.exitCode).toBe(null);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });
});
