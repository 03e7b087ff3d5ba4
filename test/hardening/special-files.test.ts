/**
 * The ACL file, the TLS files, the config file and requirepass-file are read only when they are regular files of a bounded size
 * (src/files/regular-file.ts): a FIFO is refused at once (never waited on for a writer), a symlink to
 * /dev/zero is refused (never read), an oversized file is refused; at start the server exits with
 * the reason; at ACL LOAD or CONFIG SET the command fails with it and the server goes on serving.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, MAIN, startServer } from '../helpers/server.js';

const dirs: string[] = [];
function newDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'cellgate-special-'));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function mkfifo(path: string): void {
  const r = spawnSync('mkfifo', [path], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`mkfifo: ${r.stderr}`);
}

/** Starts the server expecting it to refuse: its exit code and output, bounded (a blocked read would hang). */
function refusedStart(args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const dir = newDir();
    const proc = spawn(process.execPath, [MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--warmup', 'no', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
    proc.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

describe('aclfile', () => {
  it('a FIFO at start: the server exits naming it, without waiting for a writer', async () => {
    const fifo = join(newDir(), 'users.acl');
    mkfifo(fifo);
    const r = await refusedStart(['--aclfile', fifo]);
    expect(r.code).not.toBe(null); // exited by itself, not killed by the bound
    expect(r.code).not.toBe(0);
    expect(r.out).toContain(`Error loading ACLs, opening file '${fifo}': it is a FIFO, only regular files are read`);
  }, 40_000);

  it('ACL LOAD of a FIFO, of /dev/zero, of a 9 MiB file: each refused with its reason, the users kept, the server serving', async () => {
    const dir = newDir();
    const acl = join(dir, 'users.acl');
    writeFileSync(acl, 'user default on nopass ~* &* +@all\nuser alice on >pw ~* +@all\n');
    const s = await startServer({ args: ['--aclfile', acl] });
    const r = new Redis({ port: s.port, host: '127.0.0.1' });
    try {
      expect(await r.call('ACL', 'USERS')).toEqual(['alice', 'default']);
      unlinkSync(acl);
      mkfifo(acl);
      await expect(r.call('ACL', 'LOAD')).rejects.toThrow(`ERR Error loading ACLs, opening file '${acl}': it is a FIFO, only regular files are read`);
      expect(await r.ping()).toBe('PONG');
      unlinkSync(acl);
      symlinkSync('/dev/zero', acl);
      await expect(r.call('ACL', 'LOAD')).rejects.toThrow(`ERR Error loading ACLs, opening file '${acl}': it is a character device, only regular files are read`);
      unlinkSync(acl);
      writeFileSync(acl, `# ${'x'.repeat(9 * 1024 * 1024)}\n`);
      await expect(r.call('ACL', 'LOAD')).rejects.toThrow(`ERR Error loading ACLs, opening file '${acl}': it is larger than 8388608 bytes`);
      expect(await r.call('ACL', 'USERS')).toEqual(['alice', 'default']);
      expect(await r.ping()).toBe('PONG');
    } finally {
      r.disconnect();
      await s.stop();
    }
  }, 40_000);

  it('ACL LOAD read off the loop keeps replies in order; inside MULTI/EXEC it answers in its place', async () => {
    const dir = newDir();
    const acl = join(dir, 'users.acl');
    writeFileSync(acl, 'user default on nopass ~* &* +@all\n');
    const s = await startServer({ args: ['--aclfile', acl] });
    const r = new Redis({ port: s.port, host: '127.0.0.1' });
    try {
      writeFileSync(acl, 'user default on nopass ~* &* +@all\nuser bob on >pw ~* +@all\n');
      // Pipelined: the read's reply comes later, and the replies after it wait behind it.
      const replies = await r.pipeline().call('ACL', 'LOAD').ping().call('ACL', 'USERS').exec();
      expect(replies).toEqual([[null, 'OK'], [null, 'PONG'], [null, ['bob', 'default']]]);
      unlinkSync(acl);
      mkfifo(acl);
      const exec = await r.multi().call('ACL', 'LOAD').ping().exec();
      expect(String(exec![0][0])).toContain('it is a FIFO, only regular files are read');
      expect(exec![1]).toEqual([null, 'PONG']);
    } finally {
      r.disconnect();
      await s.stop();
    }
  }, 40_000);
});

describe('TLS files', () => {
  it('a FIFO as tls-cert-file at start: the server exits naming it, without waiting for a writer', async () => {
    const dir = newDir();
    const fifo = join(dir, 'server.crt');
    mkfifo(fifo);
    writeFileSync(join(dir, 'server.key'), 'not a key\n');
    const r = await refusedStart(['--tls-port', String(await freePort()), '--tls-cert-file', fifo, '--tls-key-file', join(dir, 'server.key'), '--tls-auth-clients', 'no']);
    expect(r.code).not.toBe(null);
    expect(r.code).not.toBe(0);
    expect(r.out).toContain(`cannot read tls-cert-file '${fifo}': it is a FIFO, only regular files are read`);
  }, 40_000);

  it('/dev/zero as tls-key-file at start: refused as a character device, never read', async () => {
    const dir = newDir();
    writeFileSync(join(dir, 'server.crt'), 'not a certificate\n');
    const r = await refusedStart(['--tls-port', String(await freePort()), '--tls-cert-file', join(dir, 'server.crt'), '--tls-key-file', '/dev/zero', '--tls-auth-clients', 'no']);
    expect(r.code).not.toBe(null);
    expect(r.code).not.toBe(0);
    expect(r.out).toContain("cannot read tls-key-file '/dev/zero': it is a character device, only regular files are read");
  }, 40_000);

  it('rls-tls: a FIFO as tls-cert-file for the rate limit service: the server exits naming it', async () => {
    const dir = newDir();
    const fifo = join(dir, 'server.crt');
    mkfifo(fifo);
    mkdirSync(join(dir, 'cfg'));
    writeFileSync(join(dir, 'cfg', 'd.yaml'), 'domain: d\n');
    const r = await refusedStart(['--rls-port', String(await freePort()), '--rls-config', join(dir, 'cfg'), '--rls-tls', 'yes', '--tls-cert-file', fifo, '--tls-key-file', '/dev/zero', '--tls-auth-clients', 'no']);
    expect(r.code).not.toBe(null);
    expect(r.code).not.toBe(0);
    expect(r.out).toContain(`cannot read tls-cert-file '${fifo}': it is a FIFO, only regular files are read`);
  }, 40_000);
});

describe('configuration files', () => {
  it('a FIFO as the config file, and as requirepass-file: the server exits naming it', async () => {
    const dir = newDir();
    const fifo = join(dir, 'cellgate.conf');
    mkfifo(fifo);
    const conf = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const proc = spawn(process.execPath, [MAIN, fifo, '--port', '0', '--dir', newDir()], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
      proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
      proc.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, out });
      });
    });
    expect(conf.code).not.toBe(null);
    expect(conf.code).not.toBe(0);
    expect(conf.out).toContain(`cannot read config file '${fifo}': it is a FIFO, only regular files are read`);
    const secret = join(dir, 'password');
    mkfifo(secret);
    const r = await refusedStart(['--requirepass-file', secret]);
    expect(r.code).not.toBe(null);
    expect(r.code).not.toBe(0);
    expect(r.out).toContain(`cannot read requirepass-file '${secret}': it is a FIFO, only regular files are read`);
  }, 70_000);

  it('CONFIG REWRITE when the config file was replaced by a FIFO: an error, the server serving', async () => {
    const dir = newDir();
    const conf = join(dir, 'cellgate.conf');
    writeFileSync(conf, 'hz 10\n');
    const s = await startServer({ configFile: conf });
    const r = new Redis({ port: s.port, host: '127.0.0.1' });
    try {
      unlinkSync(conf);
      mkfifo(conf);
      await expect(r.call('CONFIG', 'REWRITE')).rejects.toThrow(`cannot read the config file '${conf}': it is a FIFO, only regular files are read`);
      expect(await r.ping()).toBe('PONG');
    } finally {
      r.disconnect();
      await s.stop();
    }
  }, 40_000);
});
