/**
 * Authentication and protected mode (docs/security.md): requirepass from a file, the failed-auth counter,
 * CONFIG SET requirepass at run time, and protected mode seen from a real non-loopback address in a
 * network namespace this test creates (veth pair; skipped with a message where that is impossible).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MAIN, startServer, type RunningServer } from '../helpers/server.js';
import { Checker, infoField } from '../helpers/raw.js';

const WRONGPASS = 'WRONGPASS invalid username-password pair or user is disabled.';

let secrets: string;
beforeAll(() => {
  secrets = mkdtempSync(join(tmpdir(), 'cellgate-secret-'));
});
afterAll(() => rmSync(secrets, { recursive: true, force: true }));

function startFails(args: string[], env: Record<string, string> = {}): { status: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', secrets, ...args], {
    env: { ...process.env, ...env }, encoding: 'utf8', timeout: 10_000,
  });
  return { status: r.status, stderr: r.stderr };
}

describe('requirepass-file', () => {
  it('reads the password from CELLGATE_REQUIREPASS_FILE, one trailing newline stripped', async () => {
    const file = join(secrets, 'pass');
    writeFileSync(file, 'p4ss word\n');
    const s = await startServer({ env: { CELLGATE_REQUIREPASS_FILE: file } });
    const c = await Checker.open(s.port);
    try {
      expect(await c.call('PING')).toEqual({ error: 'NOAUTH Authentication required.' });
      expect(await c.call('AUTH', 'p4ss word\n')).toEqual({ error: WRONGPASS });
      expect(await c.call('AUTH', 'p4ss word')).toBe('OK');
      expect(await c.call('CONFIG', 'GET', 'requirepass-file')).toEqual(['requirepass-file', file]);
    } finally {
      c.close();
      await s.stop();
    }
  });

  it('--requirepass-file strips a CRLF too, and keeps inner and leading spaces', async () => {
    const file = join(secrets, 'pass-crlf');
    writeFileSync(file, ' a b\r\n');
    const s = await startServer({ args: ['--requirepass-file', file] });
    const c = await Checker.open(s.port);
    try {
      expect(await c.call('AUTH', ' a b')).toBe('OK');
    } finally {
      c.close();
      await s.stop();
    }
  });

  it('refuses to start on a missing or empty file, or with requirepass as well', () => {
    const missing = startFails(['--requirepass-file', join(secrets, 'nope')]);
    expect(missing.status).toBe(1);
    expect(missing.stderr).toMatch(/cannot read requirepass-file '.*nope': ENOENT/);
    const empty = join(secrets, 'empty');
    writeFileSync(empty, '\n');
    expect(startFails(['--requirepass-file', empty]).stderr).toMatch(/is empty/);
    const both = join(secrets, 'both');
    writeFileSync(both, 'x');
    const r = startFails(['--requirepass', 'y'], { CELLGATE_REQUIREPASS_FILE: both });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/requirepass and requirepass-file are both set/);
  });
});

describe('auth at run time', () => {
  let s: RunningServer;
  beforeAll(async () => {
    s = await startServer({ args: ['--requirepass', 'one'] });
  });
  afterAll(async () => {
    await s.stop();
  });

  it('counts failed AUTH and HELLO AUTH in acl_access_denied_auth', async () => {
    const c = await Checker.open(s.port);
    try {
      expect(await c.call('AUTH', 'one')).toBe('OK');
      const before = Number(infoField(await c.call('INFO', 'stats'), 'acl_access_denied_auth'));
      expect(await c.call('AUTH', 'bad')).toEqual({ error: WRONGPASS });
      expect(await c.call('AUTH', 'someone', 'one')).toEqual({ error: WRONGPASS });
      expect(await c.call('HELLO', '3', 'AUTH', 'default', 'bad')).toEqual({ error: WRONGPASS });
      expect(Number(infoField(await c.call('INFO', 'stats'), 'acl_access_denied_auth'))).toBe(before + 3);
      // A failed AUTH does not undo an earlier success (as Redis).
      expect(await c.call('PING')).toBe('PONG');
    } finally {
      c.close();
    }
  });

  it('CONFIG SET requirepass applies to new connections; authenticated ones stay authenticated', async () => {
    const admin = await Checker.open(s.port);
    const other = await Checker.open(s.port);
    try {
      expect(await admin.call('AUTH', 'one')).toBe('OK');
      expect(await other.call('AUTH', 'one')).toBe('OK');
      expect(await admin.call('CONFIG', 'SET', 'requirepass', 'two')).toBe('OK');
      expect(await other.call('PING')).toBe('PONG');
      const fresh = await Checker.open(s.port);
      try {
        expect(await fresh.call('PING')).toEqual({ error: 'NOAUTH Authentication required.' });
        expect(await fresh.call('AUTH', 'one')).toEqual({ error: WRONGPASS });
        expect(await fresh.call('AUTH', 'two')).toBe('OK');
      } finally {
        fresh.close();
      }
      // Clearing the password opens new connections without AUTH.
      expect(await admin.call('CONFIG', 'SET', 'requirepass', '')).toBe('OK');
      const open = await Checker.open(s.port);
      try {
        expect(await open.call('PING')).toBe('PONG');
      } finally {
        open.close();
      }
      expect(await admin.call('CONFIG', 'SET', 'requirepass', 'one')).toBe('OK');
    } finally {
      admin.close();
      other.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Protected mode from a non-loopback address: a network namespace with a veth pair, private /30.
// ---------------------------------------------------------------------------------------------

const NS = `cgtest${process.pid}`;
const HOST_IF = `cgh${process.pid % 100000}`;
const NS_IF = `cgn${process.pid % 100000}`;
const HOST_IP = '10.213.77.1';
const NS_IP = '10.213.77.2';

function sh(cmd: string): { ok: boolean; out: string } {
  const r = spawnSync('sh', ['-c', cmd], { encoding: 'utf8', timeout: 10_000 });
  return { ok: r.status === 0, out: (r.stdout ?? '') + (r.stderr ?? '') };
}

function setUpNamespace(): string | null {
  if (process.getuid?.() !== 0) return 'not root: cannot create a network namespace';
  const steps = [
    `ip netns add ${NS}`,
    `ip link add ${HOST_IF} type veth peer name ${NS_IF}`,
    `ip link set ${NS_IF} netns ${NS}`,
    `ip addr add ${HOST_IP}/30 dev ${HOST_IF}`,
    `ip link set ${HOST_IF} up`,
    `ip netns exec ${NS} ip addr add ${NS_IP}/30 dev ${NS_IF}`,
    `ip netns exec ${NS} ip link set ${NS_IF} up`,
    `ip netns exec ${NS} ip link set lo up`,
  ];
  for (const step of steps) {
    const r = sh(step);
    if (!r.ok) return `'${step}' failed: ${r.out.trim()}`;
  }
  return null;
}

function tearDownNamespace(): void {
  sh(`ip link del ${HOST_IF} 2>/dev/null; ip netns del ${NS} 2>/dev/null`);
}

/** redis-cli run inside the namespace, i.e. from NS_IP: a remote client. */
function remoteCli(port: number, args: string[]): string {
  const r = spawnSync('ip', ['netns', 'exec', NS, 'redis-cli', '-h', HOST_IP, '-p', String(port), ...args], { encoding: 'utf8', timeout: 10_000 });
  return (r.stdout + r.stderr).trim();
}

describe('protected mode (remote client in a network namespace)', () => {
  let why: string | null = null;
  beforeAll(() => {
    why = spawnSync('sh', ['-c', 'command -v redis-cli'], { encoding: 'utf8' }).status === 0 ? setUpNamespace() : 'redis-cli not installed';
  });
  afterAll(() => tearDownNamespace());

  it('refuses a remote client with -DENIED when there is no password; loopback clients are served', async (ctx) => {
    if (why !== null) ctx.skip(`no network namespace: ${why}`);
    const s = await startServer({ args: ['--bind', HOST_IP, '127.0.0.1'] });
    const local = await Checker.open(s.port);
    try {
      expect(remoteCli(s.port, ['PING'])).toMatch(/^DENIED cellgate is running in protected mode because protected mode is enabled and no password is set/);
      expect(await local.call('PING')).toBe('PONG');
      expect(Number(infoField(await local.call('INFO', 'stats'), 'rejected_connections'))).toBeGreaterThanOrEqual(1);
      // As the message says: CONFIG SET protected-mode no from loopback lets remote clients in.
      expect(await local.call('CONFIG', 'SET', 'protected-mode', 'no')).toBe('OK');
      expect(remoteCli(s.port, ['PING'])).toBe('PONG');
    } finally {
      local.close();
      await s.stop();
    }
  });

  it('lets a remote client in with a password (and asks it to AUTH)', async (ctx) => {
    if (why !== null) ctx.skip(`no network namespace: ${why}`);
    const s = await startServer({ args: ['--bind', HOST_IP, '--requirepass', 'pw'] });
    try {
      expect(remoteCli(s.port, ['PING'])).toBe('NOAUTH Authentication required.');
      expect(remoteCli(s.port, ['--no-auth-warning', '-a', 'pw', 'PING'])).toBe('PONG');
    } finally {
      await s.stop();
    }
  });
});
