/**
 * ACL users with real clients and real server processes (docs/security.md "ACL users"): its
 * limiter-only app user through ioredis and node-redis, requirepass as the default user's password,
 * disconnects on ACL DELUSER / SETUSER off / CLIENT KILL USER, pre-auth limits for a client whose AUTH
 * as a disabled user fails, the aclfile (loaded at start, SAVE/LOAD round trip), and hostile input:
 * a 1 MiB SETUSER, 10,000 users, a backtracking key pattern against long keys.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, RawConnection, mbulk, type Reply } from '../helpers/raw.js';

const WRONGPASS = 'WRONGPASS invalid username-password pair or user is disabled.';
/** The app user of docs/security.md "ACL users". */
const APP_RULES = ['on', '>app-secret', '~*', '+@limiter', '+@connection', '-@admin', '+info'];

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'cellgate-acl-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function closed(conn: RawConnection): Promise<void> {
  await conn.waitFor(() => conn.ended, 5000, 'the connection closed');
}

describe('the app user of docs/security.md', () => {
  let server: RunningServer;
  beforeAll(async () => {
    server = await startServer();
    const admin = await Checker.open(server.port);
    expect(await admin.call('ACL', 'SETUSER', 'app', ...APP_RULES)).toBe('OK');
    admin.close();
  });
  afterAll(async () => server?.stop());

  it('ioredis: connects (INFO ready check, CLIENT SETINFO), limits, and is refused FLUSHALL, CONFIG SET, SHUTDOWN, DEBUG', async () => {
    const r = new Redis({ port: server.port, host: '127.0.0.1', username: 'app', password: 'app-secret', lazyConnect: true, maxRetriesPerRequest: 0 });
    try {
      await r.connect();
      expect(await r.call('CL.THROTTLE', 'user:1', '10', '10', '60')).toEqual([0, 11, 10, -1, 6]);
      expect(await r.call('RL.GCRA', 'user:2', '10', '1000')).toEqual(expect.any(Array));
      expect(await r.ping()).toBe('PONG');
      await expect(r.flushall()).rejects.toThrow("NOPERM User app has no permissions to run the 'flushall' command");
      await expect(r.config('SET', 'maxclients', '5')).rejects.toThrow("NOPERM User app has no permissions to run the 'config|set' command");
      await expect(r.call('SHUTDOWN')).rejects.toThrow("NOPERM User app has no permissions to run the 'shutdown' command");
      await expect(r.call('DEBUG', 'SLEEP', '0')).rejects.toThrow("NOPERM User app has no permissions to run the 'debug' command");
      await expect(r.call('ACL', 'SETUSER', 'app', '+@all')).rejects.toThrow('NOPERM');
      await expect(r.call('CLIENT', 'KILL', 'USER', 'default')).rejects.toThrow('NOPERM');
    } finally {
      r.disconnect();
    }
    // The handshake itself was not refused (no ACL log entry besides the four refusals above... and the two after).
    const admin = await Checker.open(server.port);
    const log = (await admin.call('ACL', 'LOG')) as Reply[][];
    expect(log.map((e) => e[7]).sort()).toEqual(['acl|setuser', 'client|kill', 'config|set', 'debug', 'flushall', 'shutdown']);
    admin.close();
  });

  it('node-redis: connects as app and limits', async () => {
    const c = createClient({ socket: { port: server.port, host: '127.0.0.1', reconnectStrategy: false }, username: 'app', password: 'app-secret' });
    c.on('error', () => {});
    await c.connect();
    try {
      expect(await c.sendCommand(['CL.THROTTLE', 'user:3', '10', '10', '60'])).toEqual([0, 11, 10, -1, 6]);
      await expect(c.sendCommand(['FLUSHALL'])).rejects.toThrow("NOPERM User app has no permissions to run the 'flushall' command");
    } finally {
      await c.disconnect();
    }
  });
});

describe('requirepass is the default user\'s password', () => {
  let server: RunningServer;
  beforeAll(async () => {
    server = await startServer({ args: ['--requirepass', 'first'] });
  });
  afterAll(async () => server?.stop());

  it('AUTH default <requirepass>; CONFIG SET requirepass changes it; empty makes default nopass', async () => {
    const c = await Checker.open(server.port);
    expect(await c.call('PING')).toEqual({ error: 'NOAUTH Authentication required.' });
    expect(await c.call('AUTH', 'default', 'first')).toBe('OK');
    expect(await c.call('ACL', 'GETUSER', 'default')).toEqual(expect.arrayContaining(['passwords', [expect.stringMatching(/^[0-9a-f]{64}$/)]]));
    expect(await c.call('CONFIG', 'SET', 'requirepass', 'second')).toBe('OK');
    const d = await Checker.open(server.port);
    expect(await d.call('AUTH', 'first')).toEqual({ error: WRONGPASS });
    expect(await d.call('AUTH', 'second')).toBe('OK');
    expect(await c.call('CONFIG', 'SET', 'requirepass', '')).toBe('OK');
    expect(((await c.call('ACL', 'LIST')) as string[])[0]).toBe('user default on nopass ~* &* +@all');
    const e = await Checker.open(server.port);
    expect(await e.call('PING')).toBe('PONG');
    for (const x of [c, d, e]) x.close();
  });
});

describe('clients of a user', () => {
  let server: RunningServer;
  beforeAll(async () => {
    server = await startServer();
  });
  afterAll(async () => server?.stop());

  async function authed(user: string): Promise<RawConnection> {
    const conn = await RawConnection.open(server.port);
    const c = Checker.wrap(conn);
    expect(await c.call('AUTH', user, 'pw')).toBe('OK');
    return conn;
  }

  it('CLIENT LIST shows user=; ACL DELUSER and SETUSER off disconnect the user\'s clients; CLIENT KILL USER', async () => {
    const admin = await Checker.open(server.port);
    for (const u of ['u1', 'u2', 'u3']) await admin.call('ACL', 'SETUSER', u, 'on', '>pw', '+@all', '~*');
    const a = await authed('u1');
    const b = await authed('u2');
    const c = await authed('u3');
    const list = String(await admin.call('CLIENT', 'LIST'));
    expect(list).toContain(' user=u1 ');
    expect(list).toContain(' user=u2 ');
    expect(list).toContain(' user=default ');
    expect(await admin.call('ACL', 'DELUSER', 'u1')).toBe(1);
    await closed(a);
    expect(await admin.call('ACL', 'SETUSER', 'u2', 'off')).toBe('OK');
    await closed(b);
    expect(await admin.call('CLIENT', 'KILL', 'USER', 'u3')).toBe(1);
    await closed(c);
    expect(await admin.call('CLIENT', 'KILL', 'USER', 'nobody')).toEqual({ error: "ERR No such user 'nobody'" });
    expect(await admin.call('PING')).toBe('PONG');
    admin.close();
  });

  it('a client whose AUTH as a disabled user fails keeps the pre-auth limits', async () => {
    const admin = await Checker.open(server.port);
    await admin.call('CONFIG', 'SET', 'requirepass', 'root');
    await admin.call('ACL', 'SETUSER', 'offuser', 'off', '>pw', '+@all', '~*');
    const conn = await RawConnection.open(server.port);
    const c = Checker.wrap(conn);
    expect(await c.call('AUTH', 'offuser', 'pw')).toEqual({ error: WRONGPASS });
    expect(await c.call('PING')).toEqual({ error: 'NOAUTH Authentication required.' });
    // Unauthenticated: a multibulk header over the pre-auth bound is a protocol error and closes the connection.
    await conn.write('*100000\r\n');
    await closed(conn);
    expect(conn.received.toString('latin1')).toContain('-ERR Protocol error: unauthenticated multibulk length');
    await admin.call('CONFIG', 'SET', 'requirepass', '');
    admin.close();
  });
});

describe('aclfile', () => {
  it('loaded at start; ACL SAVE writes it in Redis\'s format; ACL LOAD reads it back, all or nothing', async () => {
    const file = join(dir, 'users.acl');
    writeFileSync(file, '# limiter clients\nuser app on >app-secret ~* +@limiter\nuser default on nopass ~* &* +@all\n');
    const server = await startServer({ args: ['--aclfile', file] });
    try {
      const appConn = await RawConnection.open(server.port);
      const app = Checker.wrap(appConn);
      expect(await app.call('AUTH', 'app', 'app-secret')).toBe('OK');
      expect(await app.call('CL.THROTTLE', 'k', '1', '1', '1')).toEqual(expect.any(Array));
      const admin = await Checker.open(server.port);
      expect(await admin.call('ACL', 'SETUSER', 'ops', 'on', '>ops-pw', '%R~*', '+@read')).toBe('OK');
      expect(await admin.call('ACL', 'SAVE')).toBe('OK');
      const saved = readFileSync(file, 'latin1');
      expect(saved.split('\n').map((l) => l.split(' ')[1])).toEqual(['app', 'default', 'ops', undefined]);
      expect(saved).toContain('user app on #');
      expect(saved).toContain(' ~* resetchannels -@all +@limiter\n');
      expect(saved).toContain('user ops on #');
      expect(saved).toContain(' %R~* resetchannels -@all +@read\n');
      expect(saved).toContain('user default on nopass ~* &* +@all\n');
      const before = await admin.call('ACL', 'LIST');
      expect(await admin.call('ACL', 'DELUSER', 'ops')).toBe(1);
      expect(await admin.call('ACL', 'LOAD')).toBe('OK');
      expect(await admin.call('ACL', 'LIST')).toEqual(before);
      // Users are replaced by the file's: their connections are closed (the default user's stay).
      await closed(appConn);
      expect(await admin.call('PING')).toBe('PONG');
      // A bad line: nothing changes, and the error names the line.
      writeFileSync(file, `${saved}user broken on +nosuch\n`);
      const bad = (await admin.call('ACL', 'LOAD')) as { error: string };
      expect(bad.error).toContain(`${file}:4: Unknown command or category name in ACL`);
      expect(await admin.call('ACL', 'LIST')).toEqual(before);
      admin.close();
      app.close();
    } finally {
      await server.stop();
    }
  });

  it('a server whose aclfile is invalid does not start', async () => {
    const file = join(dir, 'bad.acl');
    writeFileSync(file, 'user x on bogus\n');
    await expect(startServer({ args: ['--aclfile', file] })).rejects.toThrow(/Syntax error/);
  });
});

describe('hostile input', () => {
  let server: RunningServer;
  beforeAll(async () => {
    server = await startServer();
  });
  afterAll(async () => server?.stop());

  it('ACL SETUSER with 1 MiB of rules (100k key patterns) is taken, and the server still answers', async () => {
    const conn = await RawConnection.open(server.port);
    const rules: string[] = [];
    let bytes = 0;
    for (let i = 0; bytes < 1024 * 1024; i++) {
      const r = `~key:${i}:*`;
      rules.push(r);
      bytes += r.length;
    }
    const args = ['ACL', 'SETUSER', 'big', 'on', 'nopass', '+@all', ...rules];
    const request = `*${args.length}\r\n` + args.map((a) => `$${a.length}\r\n${a}\r\n`).join('');
    await conn.write(request);
    await conn.waitFor(() => conn.text().startsWith('+OK\r\n'), 30_000, 'the SETUSER reply');
    const c = Checker.wrap(conn);
    const user = (await c.call('ACL', 'GETUSER', 'big')) as Reply[];
    expect(String(user[7]).split(' ').length).toBe(rules.length);
    expect(await c.call('ACL', 'DRYRUN', 'big', 'ttl', `key:${rules.length - 1}:x`)).toBe('OK');
    expect(await c.call('PING')).toBe('PONG');
    expect(await c.call('ACL', 'DELUSER', 'big')).toBe(1);
    c.close();
  });

  it('10,000 users: created, listed, deleted', async () => {
    const conn = await RawConnection.open(server.port);
    // The file's other tests share the server and may have left users of their own.
    const counter = await Checker.open(server.port);
    const usersBefore = ((await counter.call('ACL', 'USERS')) as string[]).length;
    counter.close();
    const parts: Buffer[] = [];
    for (let i = 0; i < 10_000; i++) parts.push(mbulk('ACL', 'SETUSER', `user${i}`, 'on', `>pw${i}`, '~*', '+@limiter'));
    await conn.write(Buffer.concat(parts));
    await conn.waitFor(() => (conn.received.toString('latin1').match(/\+OK\r\n/g)?.length ?? 0) === 10_000, 60_000, '10,000 OKs');
    const c = Checker.wrap(conn);
    expect(((await c.call('ACL', 'USERS')) as string[]).length).toBe(usersBefore + 10_000);
    const uConn = await RawConnection.open(server.port);
    const u = Checker.wrap(uConn);
    expect(await u.call('AUTH', 'user9999', 'pw9999')).toBe('OK');
    expect(await u.call('CL.THROTTLE', 'k', '1', '1', '1')).toEqual(expect.any(Array));
    const names = Array.from({ length: 10_000 }, (_, i) => `user${i}`);
    expect(await c.call('ACL', 'DELUSER', ...names)).toBe(10_000);
    await closed(uConn);
    c.close();
  });

  it('a backtracking pattern (~*a*a*a*a*a*b) against 64 KiB keys answers (the glob backtracks to the last * only)', async () => {
    const c = await Checker.open(server.port);
    expect(await c.call('ACL', 'SETUSER', 'bt', 'on', 'nopass', '~*a*a*a*a*a*b', '+@all')).toBe('OK');
    const u = await Checker.open(server.port);
    expect(await u.call('AUTH', 'bt', 'x')).toBe('OK');
    const key = 'a'.repeat(65536);
    for (let i = 0; i < 20; i++) expect(await u.call('TTL', key)).toEqual({ error: 'NOPERM No permissions to access a key' });
    expect(await u.call('TTL', key + 'b')).toBe(-2);
    u.close();
    c.close();
  });
});
