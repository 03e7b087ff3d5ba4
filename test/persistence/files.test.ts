/**
 * The files cellgate creates for itself, with real processes:
 * - every probe and temp file (start-up probe, SAVE/BGSAVE/SHUTDOWN temp files, CONFIG REWRITE's and
 *   ACL SAVE's temp files, the pidfile) is created exclusively under a random name: symlinks planted
 *   at every name an attacker could guess (the old `<prefix>-<pid>` names, for a range of the next
 *   pids, and counters after them) leave their target's bytes and mode untouched;
 * - a full disk (a real tmpfs, filled) never refuses a start that can load: the snapshot loads, the
 *   server serves, the log says DISK FULL, INFO says rdb_last_bgsave_status:err and /readyz is not
 *   ready until a save succeeds once space is back.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, closeSync, lstatSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync, writeSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, MAIN, startServer } from '../helpers/server.js';
import { info, startOn, T0_AHEAD_MS, tempDirsForFile, waitForBgsave } from './helpers.js';

const newDir = tempDirsForFile();
const outside = mkdtempSync(join(tmpdir(), 'cellgate-victim-'));
afterAll(() => rmSync(outside, { recursive: true, force: true }));

/** The last pid the kernel handed out: the next processes get the ones after it. */
function lastPid(): number {
  try {
    return Number(readFileSync('/proc/sys/kernel/ns_last_pid', 'utf8').trim());
  } catch {
    return process.pid;
  }
}

/** A server logging to `logfile`, started until its ready line (on stderr when the file cannot be written). */
function startLoggingTo(dir: string, logfile: string): Promise<{ proc: ChildProcess; stderr: string }> {
  const proc = spawn(process.execPath, [MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--warmup', 'no', '--logfile', logfile], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ready line: ${stderr}`)), 10_000);
    proc.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (stderr.includes('ready to accept connections')) {
        clearTimeout(timer);
        resolve({ proc, stderr });
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited with ${code}: ${stderr}`));
    });
  });
}

function get(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    }).on('error', reject);
  });
}

describe('files cellgate creates', () => {
  it('symlinks planted at every guessable probe/temp/pidfile name leave their target untouched (bytes and mode)', async () => {
    const victim = join(outside, 'secret');
    writeFileSync(victim, 'root-owned secret\n');
    chmodSync(victim, 0o600);
    const dir = newDir();
    const confDir = newDir();
    const conf = join(confDir, 'cellgate.conf');
    const aclfile = join(confDir, 'users.acl');
    const pidfile = join(confDir, 'cellgate.pid');
    writeFileSync(conf, '# test config\nmaxmemory-policy allkeys-lru\n');
    writeFileSync(aclfile, 'user default on nopass ~* &* +@all\n');
    // The names the old code used, for the next 1000 pids (the server will have one of them), and the
    // background-save counters after each: .cellgate-probe-<pid>, .cellgate-temp-<pid>.snap,
    // .cellgate-temp-<pid>-<n>.snap, .cellgate.conf.rewrite-<pid>, users.acl.tmp-<pid>.
    const from = lastPid() + 1;
    let planted = 0;
    for (let pid = from; pid < from + 1000; pid++) {
      const names = [
        join(dir, `.cellgate-probe-${pid}`), join(dir, `.cellgate-temp-${pid}.snap`),
        join(confDir, `.cellgate.conf.rewrite-${pid}`), `${aclfile}.tmp-${pid}`,
      ];
      for (let n = 1; n <= 3; n++) names.push(join(dir, `.cellgate-temp-${pid}-${n}.snap`));
      for (const name of names) {
        symlinkSync(victim, name);
        planted++;
      }
    }
    symlinkSync(victim, pidfile);
    const s = await startServer({ configFile: conf, args: ['--dir', dir, '--save', '', '--aclfile', aclfile, '--pidfile', pidfile] });
    const r = new Redis(s.port);
    try {
      expect(s.proc.pid).toBeGreaterThanOrEqual(from);
      expect(s.proc.pid).toBeLessThan(from + 1000);
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0_AHEAD_MS));
      await r.call('CL.THROTTLE', 'k', 5, 10, 60);
      expect(await r.save()).toBe('OK');
      for (let i = 0; i < 3; i++) {
        await r.call('CL.THROTTLE', `b${i}`, 5, 10, 60);
        expect(await r.bgsave()).toBe('Background saving started');
        expect((await waitForBgsave(r)).rdb_last_bgsave_status).toBe('ok');
      }
      expect(await r.call('ACL', 'SAVE')).toBe('OK');
      await r.config('SET', 'maxmemory-policy', 'allkeys-random');
      expect(await r.config('REWRITE')).toBe('OK');
      expect(readFileSync(conf, 'utf8')).toContain('maxmemory-policy allkeys-random');
      // The files written are regular files; the pidfile path holds our pid: its symlink was
      // replaced, not followed.
      for (const f of [conf, aclfile, pidfile, join(dir, 'cellgate.snap')]) expect(lstatSync(f).isFile()).toBe(true);
      expect(readFileSync(pidfile, 'utf8')).toBe(`${s.proc.pid}\n`);
    } finally {
      r.disconnect();
      await s.stop('SIGTERM'); // the final snapshot too
    }
    console.log(`[files] ${planted} symlinks planted for pids ${from}..${from + 999}; server pid ${s.proc.pid}`);
    expect(readFileSync(victim, 'utf8')).toBe('root-owned secret\n');
    expect(statSync(victim).mode & 0o7777).toBe(0o600);
    // Nothing was renamed over a planted link: every entry but the snapshot is one of them (the
    // start-up cleanup removed the `.cellgate-temp-` links of pids not running, as stale temp files:
    // unlinking a link leaves its target alone).
    expect(readdirSync(dir).filter((n) => !lstatSync(join(dir, n)).isSymbolicLink())).toEqual(['cellgate.snap']);
    expect(readdirSync(dir).filter((n) => n.startsWith('.cellgate-probe-') && lstatSync(join(dir, n)).isSymbolicLink()).length).toBe(1000);
    expect(readdirSync(confDir).filter((n) => lstatSync(join(confDir, n)).isSymbolicLink()).length).toBe(1000 * 2);
  });

  it('a symlink planted at the lock file\'s name is removed as no lock; its target is neither read as a pid nor written', async () => {
    const victim = join(outside, 'pid-looking');
    // A live pid (this test runner): read through the link, it would make the start fail as "in use".
    writeFileSync(victim, `${process.pid}\n`);
    chmodSync(victim, 0o640);
    const dir = newDir();
    symlinkSync(victim, join(dir, '.cellgate-lock'));
    const s = await startOn(dir, ['--save', '']);
    try {
      expect(lstatSync(join(dir, '.cellgate-lock')).isSymbolicLink()).toBe(false);
      expect(readFileSync(join(dir, '.cellgate-lock'), 'utf8')).toBe(`${s.proc.pid}\n`);
    } finally {
      await s.stop('SIGTERM');
    }
    expect(readFileSync(victim, 'utf8')).toBe(`${process.pid}\n`);
    expect(statSync(victim).mode & 0o7777).toBe(0o640);
  });

  // A real full disk: a small tmpfs, filled. Mounting needs root (true in the containers these tests
  // run in); elsewhere the test is skipped, saying so.
  const canMount = process.getuid?.() === 0 && spawnSync('mount', ['--version']).status === 0;
  if (!canMount) console.log('[files] skipping the full-disk start test: mounting a tmpfs needs root and mount(8)');
  it.runIf(canMount)('a full disk (ENOSPC) never refuses a start that can load: it serves, says DISK FULL, INFO err, /readyz 503; a save after space is freed clears it', async () => {
    const dir = newDir();
    if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', dir]).status !== 0) {
      console.log('[files] skipping: mount -t tmpfs failed');
      return;
    }
    const fill = join(dir, 'fill');
    try {
      let s = await startOn(dir, ['--save', '']);
      let r = new Redis(s.port);
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0_AHEAD_MS));
      for (let i = 0; i < 20; i++) await r.call('CL.THROTTLE', `k${i}`, 5, 10, 60);
      expect(await r.save()).toBe('OK');
      r.disconnect();
      expect(await s.stop('SIGTERM')).toBe(0);
      // Fill every page of the filesystem.
      const fd = openSync(fill, 'w');
      const page = Buffer.alloc(4096);
      let full = false;
      try {
        for (let i = 0; i < 1000 && !full; i++) {
          try {
            writeSync(fd, page);
          } catch (e) {
            expect((e as NodeJS.ErrnoException).code).toBe('ENOSPC');
            full = true;
          }
        }
      } finally {
        closeSync(fd);
      }
      expect(full).toBe(true);
      const metricsPort = await freePort();
      s = await startOn(dir, ['--save', '', '--metrics-port', String(metricsPort)]);
      r = new Redis(s.port);
      try {
        expect(await r.dbsize()).toBe(20);
        expect(s.logs.some((l) => l.includes('DISK FULL') && l.includes('ENOSPC'))).toBe(true);
        let i = await info(r);
        expect(i.rdb_last_bgsave_status).toBe('err');
        expect(i.rdb_last_error).toMatch(/^ENOSPC/);
        const notReady = await get(metricsPort, '/readyz');
        expect(notReady.status).toBe(503);
        expect(notReady.body).toContain('rdb_last_bgsave_status:err');
        // Limits are served (stop-writes-on-bgsave-error is no by default).
        await r.call('DEBUG', 'CLOCK', 'SET', String(T0_AHEAD_MS));
        expect(await r.call('CL.THROTTLE', 'k0', 5, 10, 60)).toEqual([0, 6, 4, -1, 12]);
        // A save still fails, and says why.
        expect(await r.bgsave()).toBe('Background saving started');
        i = await waitForBgsave(r);
        expect(i.rdb_last_bgsave_status).toBe('err');
        expect(i.rdb_last_error).toMatch(/^ENOSPC/);
        r.disconnect();
        await s.stop('SIGKILL');
        // With the log file on the full disk too: its lines go to stderr, the start goes on.
        const logged = await startLoggingTo(dir, join(dir, 'cellgate.log'));
        expect(logged.stderr).toContain(`cannot write the log file ${join(dir, 'cellgate.log')} (ENOSPC): logging to stderr until it can`);
        expect(logged.stderr).toContain('DISK FULL');
        expect(logged.stderr).toContain('snapshot loaded from');
        logged.proc.kill('SIGKILL');
        await new Promise((resolve) => logged.proc.once('exit', resolve));
        s = await startOn(dir, ['--save', '', '--metrics-port', String(metricsPort)]);
        r = new Redis(s.port);
        // Space comes back: the next save succeeds and the server is ready.
        rmSync(fill);
        expect(await r.bgsave()).toBe('Background saving started');
        expect((await waitForBgsave(r)).rdb_last_bgsave_status).toBe('ok');
        expect((await get(metricsPort, '/readyz')).status).toBe(200);
      } finally {
        r.disconnect();
        await s.stop('SIGTERM');
      }
    } finally {
      spawnSync('umount', [dir]);
    }
  });
  it.runIf(canMount)('out of inodes (ENOSPC at create, not at write): the probe and the lock cannot even be created, and the server still starts and serves', async () => {
    const dir = newDir();
    if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m,nr_inodes=64', 'tmpfs', dir]).status !== 0) {
      console.log('[files] skipping: mount -t tmpfs with nr_inodes failed');
      return;
    }
    try {
      let s = await startOn(dir, ['--save', '']);
      let r = new Redis(s.port);
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0_AHEAD_MS));
      for (let i = 0; i < 5; i++) await r.call('CL.THROTTLE', `k${i}`, 5, 10, 60);
      expect(await r.save()).toBe('OK');
      r.disconnect();
      expect(await s.stop('SIGTERM')).toBe(0);
      // Take every inode left.
      let taken = 0;
      for (let i = 0; i < 200; i++) {
        try {
          writeFileSync(join(dir, `inode-${i}`), '');
          taken++;
        } catch (e) {
          expect((e as NodeJS.ErrnoException).code).toBe('ENOSPC');
          break;
        }
      }
      expect(taken).toBeLessThan(200);
      s = await startOn(dir, ['--save', '']);
      r = new Redis(s.port);
      try {
        expect(await r.dbsize()).toBe(5);
        expect(s.logs.some((l) => l.includes('DISK FULL') && l.includes('holds no pid'))).toBe(true);
        expect((await info(r)).rdb_last_bgsave_status).toBe('err');
        await r.call('DEBUG', 'CLOCK', 'SET', String(T0_AHEAD_MS));
        expect(await r.call('CL.THROTTLE', 'k0', 5, 10, 60)).toEqual([0, 6, 4, -1, 12]);
      } finally {
        r.disconnect();
        await s.stop('SIGKILL');
      }
    } finally {
      spawnSync('umount', [dir]);
    }
  });
});
