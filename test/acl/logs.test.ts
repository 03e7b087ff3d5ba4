/**
 * What the server keeps about a client's doing stays bounded and keeps no secret (docs/security.md "ACL
 * users", docs/commands.md): ACL LOG entries and SLOWLOG entries hold cut copies of a client's name,
 * an unknown user name, a refused key; the arguments a command marks secret (AUTH, HELLO AUTH, ACL
 * SETUSER/GETUSER/DELUSER, CONFIG SET of a sensitive config) show as `(redacted)`.
 *
 * The attack: a limiter-only user names its connection with a huge name, then fails AUTH with a
 * different unknown user name each time (each makes a new ACL LOG entry, up to 128). Before, each
 * entry copied the whole name (the server died at 4.37 GB RSS after 21 AUTHs of a 200 MB name).
 * Now the huge name is refused at CLIENT SETNAME (16 MiB here; 200 MB with CELLGATE_SOAK=1) and the
 * entries cut the largest name allowed; 40 AUTHs (160 with CELLGATE_SOAK=1).
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, processAlive, type Reply } from '../helpers/raw.js';

const SOAK = process.env.CELLGATE_SOAK === '1';
const NAME_BYTES = SOAK ? 200_000_000 : 16 * 1024 * 1024;
const FAILED_AUTHS = SOAK ? 160 : 40;
/** The longest client name the server accepts. */
const NAME_CAP_BYTES = 4096;
/** A bound on one ACL LOG entry's client-info: Redis's fields (~400 bytes) and three fields of at most 131. */
const CLIENT_INFO_MAX = 1024;

function vmRss(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
  return Number(m![1]) * 1024;
}

/** ACL LOG entries as field → value. */
function entries(log: Reply): Map<string, Reply>[] {
  return (log as Reply[][]).map((e) => {
    const m = new Map<string, Reply>();
    for (let i = 0; i < e.length; i += 2) m.set(String(e[i]), e[i + 1]);
    return m;
  });
}

let server: RunningServer;
let admin: Checker;
beforeAll(async () => {
  server = await startServer({ args: ['--client-query-buffer-limit', '1gb'] });
  admin = await Checker.open(server.port);
});
afterAll(async () => {
  admin?.close();
  await server?.stop();
});

describe('ACL LOG entries are bounded whatever the client sends', () => {
  it(`a ${NAME_BYTES}-byte client name and ${FAILED_AUTHS} failed AUTHs with new user names: alive, each entry bounded`, async () => {
    const pid = server.proc.pid!;
    expect(await admin.call('ACL', 'SETUSER', 'app', 'on', '>app-pass', '+@limiter', '+@connection', '-@admin', '+info')).toBe('OK');
    expect(await admin.call('ACL', 'LOG', 'RESET')).toBe('OK');
    const app = await Checker.open(server.port);
    expect(await app.call('AUTH', 'app', 'app-pass')).toBe('OK');
    const rssBefore = vmRss(pid);
    // The name itself is capped (docs/security.md's limits: 4,096 bytes): the huge one is refused, the
    // largest allowed one is what the log entries below must cut.
    expect(await app.call('CLIENT', 'SETNAME', 'n'.repeat(NAME_BYTES))).toEqual({ error: 'ERR Client names cannot be longer than 4096 bytes.' });
    expect(await app.call('CLIENT', 'SETNAME', 'n'.repeat(NAME_CAP_BYTES))).toBe('OK');
    const rssNamed = vmRss(pid);
    for (let i = 0; i < FAILED_AUTHS; i++) {
      expect(await app.call('AUTH', `nobody-${i}`, 'wrong')).toEqual({ error: 'WRONGPASS invalid username-password pair or user is disabled.' });
    }
    // A huge unknown user name is cut in its entry too.
    expect(await app.call('AUTH', 'u'.repeat(1024 * 1024), 'wrong')).toEqual({ error: 'WRONGPASS invalid username-password pair or user is disabled.' });
    // So is a refused key (the app user may not touch keys outside its patterns: it has none).
    expect(await app.call('CL.THROTTLE', 'k'.repeat(1024 * 1024), '1', '1', '1')).toEqual({ error: 'NOPERM No permissions to access a key' });
    const rssAfter = vmRss(pid);
    const mib = (n: number): string => (n / 2 ** 20).toFixed(1);
    console.log(`[attack] ${FAILED_AUTHS} failed AUTHs with a ${NAME_BYTES}-byte client name: server RSS ${mib(rssBefore)} MiB before the name, ${mib(rssNamed)} MiB with it, ${mib(rssAfter)} MiB after the AUTHs (${mib(rssAfter - rssNamed)} MiB for them)`);
    // Each AUTH used to copy the whole name into its entry (FAILED_AUTHS x the name). A generous
    // bound: the entries themselves are ~200 KiB in all.
    expect(rssAfter - rssNamed).toBeLessThan(Math.max(64 * 2 ** 20, NAME_BYTES / 2));
    expect(processAlive(server)).toBe(true);

    const log = entries(await admin.call('ACL', 'LOG'));
    expect(log).toHaveLength(Math.min(FAILED_AUTHS + 2, 128)); // acllog-max-len
    let largest = 0;
    for (const e of log) {
      const info = String(e.get('client-info'));
      expect(info.length).toBeLessThanOrEqual(CLIENT_INFO_MAX);
      // The name is there, cut to 128 bytes and marked: the line still splits into key=value fields.
      expect(info).toContain(` name=${'n'.repeat(128)}... `);
      expect(String(e.get('username')).length).toBeLessThanOrEqual(1024 + 32);
      expect(String(e.get('object')).length).toBeLessThanOrEqual(1024 + 32);
      largest = Math.max(largest, info.length + String(e.get('username')).length + String(e.get('object')).length);
    }
    console.log(`[attack] largest ACL LOG entry: ${largest} bytes of text`);
    const key = log[0];
    expect(key.get('reason')).toBe('key');
    expect(key.get('object')).toBe(`${'k'.repeat(1024)}... (${1024 * 1024 - 1024} more bytes)`);
    const longUser = log[1];
    expect(longUser.get('reason')).toBe('auth');
    expect(longUser.get('username')).toBe(`${'u'.repeat(1024)}... (${1024 * 1024 - 1024} more bytes)`);
    expect(log[2].get('username')).toBe(`nobody-${FAILED_AUTHS - 1}`);
    // The connection itself still has its whole (capped) name: only what is kept is cut. (Not
    // read back in the soak variant: a 200 MB reply is slow to parse here.)
    if (!SOAK) expect(await app.call('CLIENT', 'GETNAME')).toHaveLength(NAME_CAP_BYTES);
    app.close();
  }, 120_000);

  it('a repeat is grouped among the 10 newest entries only (bounded work per refusal), as Redis', async () => {
    expect(await admin.call('ACL', 'LOG', 'RESET')).toBe('OK');
    const c = await Checker.open(server.port);
    await c.call('AUTH', 'again', 'x');
    for (let i = 0; i < 10; i++) await c.call('AUTH', `other-${i}`, 'x');
    await c.call('AUTH', 'again', 'x'); // 11th newest now: a new entry, not a count of the first
    const log = entries(await admin.call('ACL', 'LOG'));
    expect(log.filter((e) => e.get('username') === 'again').map((e) => e.get('count'))).toEqual([1, 1]);
    await c.call('AUTH', 'again', 'x'); // the newest: counted in it
    expect(entries(await admin.call('ACL', 'LOG', '1'))[0].get('count')).toBe(2);
    c.close();
  });
});

describe('SLOWLOG keeps cut copies and no secrets', () => {
  /** The SLOWLOG entry of `run`'s last command, run by a client named `probe` unless `run` renames it. */
  async function slowlogArgs(run: (c: Checker) => Promise<unknown>, name = 'probe'): Promise<{ args: Reply[]; name: string }> {
    const c = await Checker.open(server.port);
    expect(await c.call('CLIENT', 'SETNAME', 'probe')).toBe('OK');
    expect(await admin.call('CONFIG', 'SET', 'slowlog-log-slower-than', '0')).toBe('OK');
    expect(await admin.call('SLOWLOG', 'RESET')).toBe('OK');
    await run(c);
    expect(await admin.call('CONFIG', 'SET', 'slowlog-log-slower-than', '-1')).toBe('OK');
    const log = (await admin.call('SLOWLOG', 'GET', '-1')) as Reply[][];
    c.close();
    const mine = log.find((e) => e[5] === name)!; // newest first
    return { args: mine[3] as Reply[], name: String(mine[5]) };
  }

  it('the client name is kept cut to 128 bytes', async () => {
    const { args, name } = await slowlogArgs(async (c) => {
      expect(await c.call('CLIENT', 'SETNAME', 'x'.repeat(NAME_CAP_BYTES))).toBe('OK');
      expect(await c.call('PING')).toBe('PONG');
    }, `${'x'.repeat(128)}...`);
    expect(args).toEqual(['PING']);
    expect(name).toBe(`${'x'.repeat(128)}...`);
  });

  it('CONFIG SET of requirepass and tls-key-file-pass: the values redacted, the other values kept', async () => {
    const { args } = await slowlogArgs(async (c) => {
      expect(await c.call('CONFIG', 'SET', 'maxclients', '5000', 'requirepass', 'hunter2', 'tls-key-file-pass', 'p4ss')).toBe('OK');
    });
    expect(args).toEqual(['CONFIG', 'SET', 'maxclients', '5000', 'requirepass', '(redacted)', 'tls-key-file-pass', '(redacted)']);
    expect(await admin.call('CONFIG', 'SET', 'requirepass', '', 'tls-key-file-pass', '')).toBe('OK');
  });

  it('CONFIG SET of a refused secret (masterauth) is redacted too: the value was sent', async () => {
    const { args } = await slowlogArgs(async (c) => {
      expect(await c.call('CONFIG', 'SET', 'masterauth', 'hunter2')).toHaveProperty('error');
    });
    expect(args).toEqual(['CONFIG', 'SET', 'masterauth', '(redacted)']);
  });

  it('HELLO AUTH: the user name and password redacted, SETNAME kept', async () => {
    const { args } = await slowlogArgs(async (c) => {
      expect(await c.call('HELLO', '2', 'AUTH', 'nosuchuser', 'anything', 'SETNAME', 'conn1')).toHaveProperty('error');
    });
    expect(args).toEqual(['HELLO', '2', 'AUTH', '(redacted)', '(redacted)', 'SETNAME', 'conn1']);
  });

  it('AUTH, ACL SETUSER, ACL GETUSER, ACL DELUSER: every argument after the name redacted', async () => {
    expect((await slowlogArgs((c) => c.call('AUTH', 'someone', 'pw'))).args).toEqual(['AUTH', '(redacted)', '(redacted)']);
    expect((await slowlogArgs((c) => c.call('ACL', 'SETUSER', 'sl1', 'on', '>secret'))).args).toEqual(['ACL', 'SETUSER', '(redacted)', '(redacted)', '(redacted)']);
    expect((await slowlogArgs((c) => c.call('ACL', 'GETUSER', 'sl1'))).args).toEqual(['ACL', 'GETUSER', '(redacted)']);
    expect((await slowlogArgs((c) => c.call('ACL', 'DELUSER', 'sl1'))).args).toEqual(['ACL', 'DELUSER', '(redacted)']);
  });

  it('CLIENT LIST shows a command by its name only (cmd=config|set), never its arguments', async () => {
    const c = await Checker.open(server.port);
    expect(await c.call('CONFIG', 'SET', 'requirepass', 'hunter3')).toBe('OK');
    const list = String(await admin.call('CLIENT', 'LIST'));
    expect(list).toContain(' cmd=config|set ');
    expect(list).not.toContain('hunter3');
    expect(await admin.call('CONFIG', 'SET', 'requirepass', '')).toBe('OK');
    c.close();
  });
});
