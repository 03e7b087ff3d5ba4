/**
 * ACL users (docs/security.md "ACL users"): SETUSER rules and their errors, LIST/GETUSER/USERS/DELUSER/
 * WHOAMI/CAT/LOG/DRYRUN/GENPASS/HELP, NOPERM for commands and keys, AUTH/HELLO as a user, as Redis 7.2
 * replies them. One server over raw sockets.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { startServer, type RunningServer } from '../helpers/server.js';
import { Checker, type Reply } from '../helpers/raw.js';

const WRONGPASS = 'WRONGPASS invalid username-password pair or user is disabled.';
const SHA = (s: string): string => createHash('sha256').update(s).digest('hex');

let server: RunningServer;
let admin: Checker;
beforeAll(async () => {
  server = await startServer();
  admin = await Checker.open(server.port);
});
afterAll(async () => {
  admin?.close();
  await server?.stop();
});

async function as(user: string, pass: string): Promise<Checker> {
  const c = await Checker.open(server.port);
  expect(await c.call('AUTH', user, pass)).toBe('OK');
  return c;
}

function listLine(list: Reply, name: string): string | undefined {
  return (list as string[]).find((l) => l.startsWith(`user ${name} `));
}

describe('ACL SETUSER rules and ACL LIST', () => {
  it('the default user is printed as Redis prints it', async () => {
    // Alone, whatever the other tests of this file created before it (they share the server).
    for (const u of (await admin.call('ACL', 'USERS')) as string[]) if (u !== 'default') await admin.call('ACL', 'DELUSER', u);
    expect(await admin.call('ACL', 'LIST')).toEqual(['user default on nopass ~* &* +@all']);
    expect(await admin.call('ACL', 'USERS')).toEqual(['default']);
    expect(await admin.call('ACL', 'WHOAMI')).toBe('default');
  });

  it('a new user is off with no commands; every rule kind shows in its rule string', async () => {
    expect(await admin.call('ACL', 'SETUSER', 'r1')).toBe('OK');
    expect(listLine(await admin.call('ACL', 'LIST'), 'r1')).toBe('user r1 off resetchannels -@all');
    expect(await admin.call('ACL', 'SETUSER', 'r1', 'on', '>one', '>two', '<one', `#${SHA('three')}`, `!${SHA('two')}`,
      '~k*', '%R~r*', '%W~w*', '&ch*', '+@limiter', '+get'.replace('get', 'ping'), '-@dangerous', '+config|get', '-cl.throttle')).toBe('OK');
    expect(listLine(await admin.call('ACL', 'LIST'), 'r1')).toBe(
      `user r1 on #${SHA('three')} ~k* %R~r* %W~w* resetchannels &ch* -@all +@limiter +ping -@dangerous +config|get -cl.throttle`);
    expect(await admin.call('ACL', 'SETUSER', 'r1', 'nopass', 'allkeys', 'allchannels', 'allcommands')).toBe('OK');
    expect(listLine(await admin.call('ACL', 'LIST'), 'r1')).toBe('user r1 on nopass ~* &* +@all');
    expect(await admin.call('ACL', 'SETUSER', 'r1', 'resetpass', 'resetkeys', 'resetchannels', 'nocommands', '+@all', '-flushall', 'off')).toBe('OK');
    expect(listLine(await admin.call('ACL', 'LIST'), 'r1')).toBe('user r1 off resetchannels +@all -flushall');
    expect(await admin.call('ACL', 'SETUSER', 'r1', 'on', 'nopass', '~*', 'reset')).toBe('OK');
    expect(listLine(await admin.call('ACL', 'LIST'), 'r1')).toBe('user r1 off resetchannels -@all');
  });

  it('rule errors are Redis\'s, and a failed SETUSER changes nothing', async () => {
    const err = (m: string, why: string): Reply => ({ error: `ERR Error in ACL SETUSER modifier '${m}': ${why}` });
    expect(await admin.call('ACL', 'SETUSER', 'e1', 'on', 'foo')).toEqual(err('foo', 'Syntax error'));
    expect(await admin.call('ACL', 'SETUSER', 'e1', '#abc')).toEqual(err('#abc', 'The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters'));
    expect(await admin.call('ACL', 'SETUSER', 'e1', '+nosuch')).toEqual(err('+nosuch', 'Unknown command or category name in ACL'));
    expect(await admin.call('ACL', 'SETUSER', 'e1', '-@nosuch')).toEqual(err('-@nosuch', 'Unknown command or category name in ACL'));
    expect(await admin.call('ACL', 'SETUSER', 'e1', '<nope')).toEqual(err('<nope', 'The password you are trying to remove from the user does not exist'));
    expect(await admin.call('ACL', 'SETUSER', 'e1', '%X~a')).toEqual(err('%X~a', 'Syntax error'));
    expect(await admin.call('ACL', 'SETUSER', 'e1', '~*', '~k*')).toEqual(err('~k*', "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns"));
    expect(await admin.call('ACL', 'SETUSER', 'a b')).toEqual({ error: "ERR Usernames can't contain spaces or null characters" });
    expect(await admin.call('ACL', 'GETUSER', 'e1')).toBe(null);
    expect(await admin.call('ACL', 'SETUSER', 'e1', 'on', '>p', 'bogus')).toEqual(err('bogus', 'Syntax error'));
    expect(await admin.call('ACL', 'USERS')).not.toContain('e1');
  });

  it('ACL GETUSER replies Redis 7\'s fields', async () => {
    await admin.call('ACL', 'SETUSER', 'g1', 'reset', 'on', '>pw', '~a*', '%R~b*', '&c', '+@limiter', '-gcra');
    expect(await admin.call('ACL', 'GETUSER', 'g1')).toEqual([
      'flags', ['on'], 'passwords', [SHA('pw')], 'commands', '-@all +@limiter -gcra', 'keys', '~a* %R~b*', 'channels', '&c', 'selectors', [],
    ]);
    expect(await admin.call('ACL', 'GETUSER', 'default')).toEqual([
      'flags', ['on', 'nopass'], 'passwords', [], 'commands', '+@all', 'keys', '~*', 'channels', '&*', 'selectors', [],
    ]);
  });
});

describe('permissions', () => {
  it('NOPERM for a command, with Redis 7.2\'s text; logged in ACL LOG', async () => {
    await admin.call('ACL', 'LOG', 'RESET');
    // The counters are the server's since its start (other tests of this file deny too): what moved.
    const denied = async (): Promise<number[]> => {
      const stats = String(await admin.call('INFO', 'stats'));
      return ['cmd', 'key', 'channel'].map((k) => Number(new RegExp(`\\r\\nacl_access_denied_${k}:(\\d+)\\r\\n`).exec(stats)?.[1]));
    };
    const deniedBefore = await denied();
    await admin.call('ACL', 'SETUSER', 'app', 'on', '>app-secret', '~*', '+@limiter');
    const app = await as('app', 'app-secret');
    expect(await app.call('CL.THROTTLE', 'k', '10', '10', '60')).toEqual([0, 11, 10, -1, 6]);
    expect(await app.call('FLUSHALL')).toEqual({ error: "NOPERM User app has no permissions to run the 'flushall' command" });
    expect(await app.call('CONFIG', 'SET', 'maxclients', '10')).toEqual({ error: "NOPERM User app has no permissions to run the 'config|set' command" });
    expect(await app.call('DEBUG', 'SLEEP', '0')).toEqual({ error: "NOPERM User app has no permissions to run the 'debug' command" });
    expect(await app.call('SHUTDOWN')).toEqual({ error: "NOPERM User app has no permissions to run the 'shutdown' command" });
    expect(await app.call('ACL', 'WHOAMI')).toEqual({ error: "NOPERM User app has no permissions to run the 'acl|whoami' command" });
    expect(await app.call('FLUSHALL')).toEqual({ error: "NOPERM User app has no permissions to run the 'flushall' command" });
    const log = (await admin.call('ACL', 'LOG')) as Reply[][];
    expect(log.length).toBe(5);
    const flush = log.find((e) => e[7] === 'flushall')!;
    expect(flush.filter((_, i) => i % 2 === 0)).toEqual(['count', 'reason', 'context', 'object', 'username', 'age-seconds', 'client-info', 'entry-id', 'timestamp-created', 'timestamp-last-updated']);
    expect(flush.slice(0, 10)).toEqual(['count', 2, 'reason', 'command', 'context', 'toplevel', 'object', 'flushall', 'username', 'app']);
    expect(String(flush[13])).toContain(' cmd=flushall user=app ');
    expect(await admin.call('ACL', 'LOG', '1')).toHaveLength(1);
    expect(await admin.call('ACL', 'LOG', 'x')).toEqual({ error: 'ERR value is not an integer or out of range' });
    expect(await admin.call('ACL', 'LOG', 'RESET')).toBe('OK');
    expect(await admin.call('ACL', 'LOG')).toEqual([]);
    const info = String(await admin.call('INFO', 'stats'));
    expect(info).toMatch(/\r\nacl_access_denied_cmd:\d+\r\nacl_access_denied_key:\d+\r\nacl_access_denied_channel:\d+\r\n/);
    expect((await denied()).map((n, i) => n - deniedBefore[i])).toEqual([6, 0, 0]);
    app.close();
  });

  it('key patterns: NOPERM for a key outside them, %R~ and %W~ by access, RL.ALL\'s every key checked', async () => {
    await admin.call('ACL', 'SETUSER', 'keys1', 'on', '>p', '~a*', '%R~r*', '%W~w*', '+@all');
    const c = await as('keys1', 'p');
    expect(await c.call('CL.THROTTLE', 'a1', '10', '10', '60')).toEqual([0, 11, 10, -1, 6]);
    expect(await c.call('CL.THROTTLE', 'b1', '10', '10', '60')).toEqual({ error: 'NOPERM No permissions to access a key' });
    expect(await c.call('TTL', 'r1')).toBe(-2); // read of a %R~ key
    expect(await c.call('CL.THROTTLE', 'r1', '10', '10', '60')).toEqual({ error: 'NOPERM No permissions to access a key' }); // read+write
    expect(await c.call('TTL', 'w1')).toEqual({ error: 'NOPERM No permissions to access a key' });
    expect(await c.call('DEL', 'w1', 'a2')).toBe(0); // DEL only writes
    expect(await c.call('DEL', 'a1', 'b1')).toEqual({ error: 'NOPERM No permissions to access a key' });
    expect(await c.call('RL.ALL', '2', 'a3', 'GCRA', '10', '1000', 'BURST', '2', 'a4', 'TOKENBUCKET', '10', '1000')).toEqual(expect.any(Array));
    expect(await c.call('RL.ALL', '2', 'a3', 'GCRA', '10', '1000', 'BURST', '2', 'b4', 'TOKENBUCKET', '10', '1000')).toEqual({ error: 'NOPERM No permissions to access a key' });
    const log = (await admin.call('ACL', 'LOG', '1')) as Reply[][];
    expect(log[0].slice(0, 10)).toEqual(['count', 1, 'reason', 'key', 'context', 'toplevel', 'object', 'b4', 'username', 'keys1']);
    c.close();
  });

  it('ACL DRYRUN answers without running', async () => {
    await admin.call('ACL', 'SETUSER', 'dry', 'on', 'nopass', '~a*', '+@limiter');
    expect(await admin.call('ACL', 'DRYRUN', 'dry', 'cl.throttle', 'a', '1', '1', '1')).toBe('OK');
    expect(await admin.call('ACL', 'DRYRUN', 'dry', 'flushall')).toBe("User dry has no permissions to run the 'flushall' command");
    expect(await admin.call('ACL', 'DRYRUN', 'dry', 'cl.throttle', 'b', '1', '1', '1')).toBe("No permissions to access the 'b' key");
    expect(await admin.call('ACL', 'DRYRUN', 'nouser', 'ping')).toEqual({ error: "ERR User 'nouser' not found" });
    expect(await admin.call('ACL', 'DRYRUN', 'dry', 'nocmd')).toEqual({ error: "ERR Command 'nocmd' not found" });
  });

  it('AUTH and HELLO AUTH as a user; wrong password, unknown or disabled user → WRONGPASS, logged', async () => {
    await admin.call('ACL', 'LOG', 'RESET');
    await admin.call('ACL', 'SETUSER', 'h1', 'on', '>hp', '+@all', '~*');
    await admin.call('ACL', 'SETUSER', 'h2', 'off', '>hp', '+@all', '~*');
    const c = await Checker.open(server.port);
    expect(await c.call('AUTH', 'h1', 'nope')).toEqual({ error: WRONGPASS });
    expect(await c.call('AUTH', 'nosuch', 'hp')).toEqual({ error: WRONGPASS });
    expect(await c.call('AUTH', 'h2', 'hp')).toEqual({ error: WRONGPASS });
    expect(await c.call('ACL', 'WHOAMI')).toBe('default');
    const hello = (await c.call('HELLO', '2', 'AUTH', 'h1', 'hp')) as Reply[];
    expect(hello[0]).toBe('server');
    expect(await c.call('ACL', 'WHOAMI')).toBe('h1');
    expect(await c.call('HELLO', '2', 'AUTH', 'h2', 'hp')).toEqual({ error: WRONGPASS });
    expect(await c.call('CLIENT', 'INFO')).toContain(' user=h1 ');
    expect(await c.call('RESET')).toBe('RESET');
    expect(await c.call('ACL', 'WHOAMI')).toBe('default');
    const log = (await admin.call('ACL', 'LOG')) as Reply[][];
    expect(log.map((e) => [e[3], e[7], e[9]])).toEqual([['auth', 'auth', 'h2'], ['auth', 'auth', 'nosuch'], ['auth', 'auth', 'h1']]);
    c.close();
  });
});

describe('RESP3', () => {
  it('HELLO 3 AUTH user pass; ACL GETUSER and ACL LOG are maps', async () => {
    await admin.call('ACL', 'SETUSER', 'h3', 'on', '>p3', '+@all', '~*');
    const c = await Checker.open(server.port);
    const hello = (await c.call('HELLO', '3', 'AUTH', 'h3', 'p3')) as Map<Reply, Reply>;
    expect(hello.get('proto')).toBe(3);
    expect(await c.call('ACL', 'WHOAMI')).toBe('h3');
    const user = (await c.call('ACL', 'GETUSER', 'h3')) as Map<Reply, Reply>;
    expect([...user.keys()]).toEqual(['flags', 'passwords', 'commands', 'keys', 'channels', 'selectors']);
    expect(user.get('commands')).toBe('+@all');
    expect(await c.call('HELLO', '3', 'AUTH', 'h3', 'wrong')).toEqual({ error: WRONGPASS });
    const [entry] = (await c.call('ACL', 'LOG', '1')) as Map<Reply, Reply>[];
    expect(entry.get('reason')).toBe('auth');
    expect(entry.get('username')).toBe('h3');
    expect(typeof entry.get('age-seconds')).toBe('number');
    c.close();
  });
});

describe('other subcommands', () => {
  it('ACL CAT lists Redis\'s categories and @limiter; a category lists its commands', async () => {
    const cats = (await admin.call('ACL', 'CAT')) as string[];
    expect(cats.slice(0, 4)).toEqual(['keyspace', 'read', 'write', 'set']);
    expect(cats).toContain('limiter');
    const limiter = (await admin.call('ACL', 'CAT', 'limiter')) as string[];
    expect(limiter.sort()).toEqual(['cl.throttle', 'gcra', 'rl.acquire', 'rl.all', 'rl.block', 'rl.fixedwindow', 'rl.gcra', 'rl.leakybucket', 'rl.release', 'rl.renew', 'rl.slidinglog', 'rl.slidingwindow', 'rl.tokenbucket']);
    const dangerous = (await admin.call('ACL', 'CAT', 'dangerous')) as string[];
    for (const c of ['flushall', 'flushdb', 'keys', 'debug', 'config|set', 'shutdown', 'acl|setuser']) expect(dangerous).toContain(c);
    expect(await admin.call('ACL', 'CAT', 'nope')).toEqual({ error: "ERR Unknown category 'nope'" });
  });

  it('COMMAND INFO shows the categories', async () => {
    const [info] = (await admin.call('COMMAND', 'INFO', 'cl.throttle')) as Reply[][];
    expect(info[6]).toEqual(['@write', '@fast', '@limiter']);
    const [flush] = (await admin.call('COMMAND', 'INFO', 'flushall')) as Reply[][];
    expect(flush[6]).toEqual(['@keyspace', '@write', '@slow', '@dangerous']);
  });

  it('ACL DELUSER: count deleted, default cannot be removed', async () => {
    await admin.call('ACL', 'SETUSER', 'd1');
    await admin.call('ACL', 'SETUSER', 'd2');
    expect(await admin.call('ACL', 'DELUSER', 'd1', 'd2', 'none')).toBe(2);
    expect(await admin.call('ACL', 'DELUSER', 'default')).toEqual({ error: "ERR The 'default' user cannot be removed" });
  });

  it('ACL SETUSER\'s arguments (passwords) are redacted in the slowlog', async () => {
    expect(await admin.call('CONFIG', 'SET', 'slowlog-log-slower-than', '0')).toBe('OK');
    await admin.call('ACL', 'SETUSER', 'slow1', 'on', '>very-secret');
    expect(await admin.call('CONFIG', 'SET', 'slowlog-log-slower-than', '10000')).toBe('OK');
    const entries = (await admin.call('SLOWLOG', 'GET', '10')) as Reply[][];
    const setuser = entries.find((e) => (e[3] as string[])[0] === 'ACL')!;
    expect(setuser[3]).toEqual(['ACL', 'SETUSER', '(redacted)', '(redacted)', '(redacted)']);
    expect(JSON.stringify(entries)).not.toContain('very-secret');
  });

  it('ACL GENPASS, HELP, SAVE/LOAD without aclfile', async () => {
    expect(await admin.call('ACL', 'GENPASS')).toMatch(/^[0-9a-f]{64}$/);
    expect(await admin.call('ACL', 'GENPASS', '5')).toMatch(/^[0-9a-f]{2}$/);
    expect(((await admin.call('ACL', 'HELP')) as string[])[0]).toBe('ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:');
    const noFile = { error: expect.stringContaining('ERR This Redis instance is not configured to use an ACL file.') };
    expect(await admin.call('ACL', 'SAVE')).toEqual(noFile);
    expect(await admin.call('ACL', 'LOAD')).toEqual(noFile);
  });
});
