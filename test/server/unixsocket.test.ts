/**
 * `unixsocket` / `unixsocketperm`: the socket is created at start with its permissions, removed at
 * exit, a stale socket file is replaced, clients on it are local for protected mode, and CLIENT LIST
 * shows them as Redis does (`addr=<path>:0 laddr=<path>:0`). Tested with redis-cli -s, ioredis
 * `{ path }` and redis-py `unix_socket_path`.
 */
import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { startServer } from '../helpers/server.js';
import { runToExit } from '../helpers/replies.js';

function socketPath(): string {
  return join(mkdtempSync(join(tmpdir(), 'cellgate-unix-')), 'cellgate.sock');
}

describe('unixsocket', () => {
  it('serves redis-cli -s, ioredis { path } and redis-py unix_socket_path; perm applied; removed at exit', async () => {
    const sock = socketPath();
    // Protected mode on and no password: a client whose peer address is not loopback is denied; a
    // unix socket client has no address at all and must count as local.
    const s = await startServer({ args: ['--unixsocket', sock, '--unixsocketperm', '700', '--protected-mode', 'yes'] });
    const c = new Redis({ path: sock, protocol: 2, lazyConnect: true });
    try {
      const st = lstatSync(sock);
      expect(st.isSocket()).toBe(true);
      expect((st.mode & 0o777).toString(8)).toBe('700');
      expect(execFileSync('redis-cli', ['-s', sock, 'PING'], { encoding: 'utf8' })).toBe('PONG\n');
      await c.connect();
      expect(await c.call('CL.THROTTLE', 'u', '0', '1', '60', '1')).toEqual([0, 1, 0, -1, 60]);
      const list = (await c.call('CLIENT', 'LIST')) as string;
      const me = list.split('\n').find((l) => l.includes('cmd=client|list'))!;
      expect(me).toContain(`addr=${sock}:0 laddr=${sock}:0`);
      const py = execFileSync('/usr/bin/python3', ['-c', `import redis; r = redis.Redis(unix_socket_path=${JSON.stringify(sock)}); print(r.ping(), r.execute_command('CL.THROTTLE', 'u', 0, 1, 60, 1)[0])`], { encoding: 'utf8' });
      expect(py).toBe('True 1\n');
    } finally {
      c.disconnect();
      expect(await s.stop()).toBe(0);
    }
    expect(existsSync(sock)).toBe(false);
  });

  it('replaces a stale socket file nobody listens on', async () => {
    const sock = socketPath();
    // A socket file bound by a process that is gone, as a killed server leaves it: nothing listens.
    execFileSync('/usr/bin/python3', ['-c', `import socket; socket.socket(socket.AF_UNIX).bind(${JSON.stringify(sock)})`]);
    expect(lstatSync(sock).isSocket()).toBe(true);
    const s = await startServer({ args: ['--unixsocket', sock] });
    try {
      expect(execFileSync('redis-cli', ['-s', sock, 'PING'], { encoding: 'utf8' })).toBe('PONG\n');
      expect(s.logs.join('\n')).toContain(`removed the stale unix socket ${sock}`);
    } finally {
      await s.stop();
    }
  });

  it('refuses to start on a socket another server listens on, and never deletes a file that is not a socket', async () => {
    const sock = socketPath();
    const s = await startServer({ args: ['--unixsocket', sock] });
    try {
      const dir = mkdtempSync(join(tmpdir(), 'cellgate-unix-dir-'));
      const r = runToExit(['--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--unixsocket', sock]);
      expect(r.status).toBe(1);
      expect(r.stderr).toBe(`cellgate: cannot listen on unix socket ${sock}: address already in use\n`);
      expect(execFileSync('redis-cli', ['-s', sock, 'PING'], { encoding: 'utf8' })).toBe('PONG\n');
    } finally {
      await s.stop();
    }
    const plain = socketPath();
    writeFileSync(plain, 'not a socket');
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-unix-dir-'));
    const r = runToExit(['--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--unixsocket', plain]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`cannot listen on unix socket ${plain}: EEXIST`);
    expect(existsSync(plain)).toBe(true);
  });
});
