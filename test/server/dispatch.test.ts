/**
 * The dispatcher's bookkeeping, end to end: which refusals count as rejected calls and which as
 * failed ones (INFO commandstats), the error codes counted (INFO errorstats), the ACL LOG entries of
 * refusals at the top level and in MULTI, the MULTI queue's refusals (EXECABORT), and the
 * arguments the slow log keeps in place of secrets. These figures are Redis's (its call() and
 * processCommand: a refusal before the call is rejected_calls, an error reply from the command
 * itself failed_calls; an error inside EXEC's array fails the queued command, not EXEC).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startServer, type RunningServer } from '../helpers/server.js';

let server: RunningServer;
let redis: Redis;
let limited: Redis;

beforeAll(async () => {
  server = await startServer();
  redis = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2, maxRetriesPerRequest: 0 });
  limited = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2, maxRetriesPerRequest: 0 });
});

afterAll(async () => {
  redis.disconnect();
  limited.disconnect();
  await server.stop();
});

/** Sends a command and returns its reply, or the text of its error reply. */
async function send(client: Redis, ...args: string[]): Promise<unknown> {
  try {
    return await client.call(args[0], ...args.slice(1));
  } catch (e) {
    return `-${(e as Error).message}`;
  }
}

/** INFO's `section` lines without the timings (usec, usec_per_call, latency), which vary. */
async function counters(section: string): Promise<string[]> {
  const text = (await redis.call('INFO', section)) as string;
  return text
    .split('\r\n')
    .filter((l) => l !== '' && !l.startsWith('#') && !l.startsWith('cmdstat_info:') && !l.startsWith('cmdstat_config|resetstat:'))
    .map((l) => l.replace(/,usec=\d+,usec_per_call=[\d.]+/, ''))
    .sort();
}

describe('dispatch bookkeeping', () => {
  it('counts refusals as rejected calls, command errors as failed calls, and each error code once', async () => {
    await send(redis, 'ACL', 'SETUSER', 'limited', 'on', '>pw', '+ping', '+multi', '+exec', '+auth', '~allowed:*', '+cl.throttle');
    await send(redis, 'ACL', 'LOG', 'RESET');
    await send(redis, 'CONFIG', 'RESETSTAT');
    const replies: unknown[] = [];
    const r = async (client: Redis, ...args: string[]): Promise<void> => {
      replies.push(await send(client, ...args));
    };
    await r(redis, 'NOPE', 'a', 'b');
    await r(redis, 'CLIENT', 'NOSUCH');
    await r(redis, 'PING', 'a', 'b'); // too many arguments: the command's own error (failed)
    await r(redis, 'CL.THROTTLE', 'k', '1', '2', '3', '4', '5'); // too many: failed
    await r(redis, 'GCRA', 'k', '1', '2', '3', 'TOKENS', '1', 'x'); // too many: failed
    await r(redis, 'CL.THROTTLE', 'k'); // too few: rejected
    await r(redis, 'CL.THROTTLE', 'k', 'x', '1', '1'); // a bad argument: failed
    await r(redis, 'CL.THROTTLE', 'k', '1', '1', '1');
    await r(redis, 'EXEC'); // without MULTI: failed
    await r(redis, 'EXEC', 'x'); // arity: rejected, in EXECABORT form
    // A refusal while queuing marks the transaction; the command's own error (PING's arity) does not.
    await r(redis, 'MULTI');
    await r(redis, 'PING', 'a', 'b');
    await r(redis, 'CL.THROTTLE', 'k');
    await r(redis, 'EXEC');
    // Errors inside EXEC's array fail the queued commands, not EXEC.
    await r(redis, 'MULTI');
    await r(redis, 'CL.THROTTLE', 'k', 'x', '1', '1');
    await r(redis, 'PING', 'a', 'b');
    await r(redis, 'PING');
    await r(redis, 'EXEC');
    // no-multi, commands that run at once in MULTI, and EXEC's arity inside MULTI.
    await r(redis, 'MULTI');
    await r(redis, 'SAVE');
    await r(redis, 'WATCH', 'k');
    await r(redis, 'MULTI');
    await r(redis, 'DISCARD');
    await r(redis, 'MULTI');
    await r(redis, 'EXEC', 'x');
    await r(redis, 'EXEC');
    // ACL refusals: at the top level, while queuing, and a key; AUTH's own failure.
    await r(limited, 'AUTH', 'limited', 'nope');
    await r(limited, 'AUTH', 'limited', 'pw');
    await r(limited, 'ECHO', 'x');
    await r(limited, 'CL.THROTTLE', 'secret:1', '1', '1', '1');
    await r(limited, 'MULTI');
    await r(limited, 'ECHO', 'x');
    await r(limited, 'EXEC');
    expect(replies).toEqual([
      "-ERR unknown command 'NOPE', with args beginning with: 'a' 'b' ",
      "-ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP.",
      "-ERR wrong number of arguments for 'ping' command",
      "-ERR wrong number of arguments for 'cl.throttle' command",
      "-ERR wrong number of arguments for 'gcra' command",
      "-ERR wrong number of arguments for 'cl.throttle' command",
      "-ERR invalid max_burst 'x': not an integer",
      [0, 2, 1, -1, 1],
      '-ERR EXEC without MULTI',
      "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command",
      'OK',
      'QUEUED',
      "-ERR wrong number of arguments for 'cl.throttle' command",
      '-EXECABORT Transaction discarded because of previous errors.',
      'OK',
      'QUEUED',
      'QUEUED',
      'QUEUED',
      expect.any(Array),
      'OK',
      '-ERR Command not allowed inside a transaction',
      '-ERR WATCH inside MULTI is not allowed',
      '-ERR MULTI calls can not be nested',
      'OK',
      'OK',
      "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command",
      '-ERR EXEC without MULTI',
      '-WRONGPASS invalid username-password pair or user is disabled.',
      'OK',
      "-NOPERM User limited has no permissions to run the 'echo' command",
      "-NOPERM No permissions to access a key",
      'OK',
      "-NOPERM User limited has no permissions to run the 'echo' command",
      '-EXECABORT Transaction discarded because of previous errors.',
    ]);
    expect(await counters('errorstats')).toEqual([
      'errorstat_ERR:count=17',
      'errorstat_EXECABORT:count=2',
      'errorstat_NOPERM:count=3',
      'errorstat_WRONGPASS:count=1',
    ]);
    expect(await counters('commandstats')).toEqual([
      'cmdstat_auth:calls=2,rejected_calls=0,failed_calls=1',
      'cmdstat_cl.throttle:calls=4,rejected_calls=3,failed_calls=3',
      'cmdstat_discard:calls=1,rejected_calls=0,failed_calls=0',
      'cmdstat_echo:calls=0,rejected_calls=2,failed_calls=0',
      'cmdstat_exec:calls=5,rejected_calls=2,failed_calls=4',
      'cmdstat_gcra:calls=1,rejected_calls=0,failed_calls=1',
      'cmdstat_multi:calls=6,rejected_calls=0,failed_calls=1',
      'cmdstat_ping:calls=3,rejected_calls=0,failed_calls=2',
      'cmdstat_save:calls=0,rejected_calls=1,failed_calls=0',
      'cmdstat_watch:calls=1,rejected_calls=0,failed_calls=1',
    ]);
    const log = (await redis.call('ACL', 'LOG')) as unknown[][];
    const entries = log.map((e) => {
      const m = new Map<string, unknown>();
      for (let i = 0; i < e.length; i += 2) m.set(e[i] as string, e[i + 1]);
      return `${m.get('reason')} ${m.get('context')} ${m.get('object')} ${m.get('username')} ${String(m.get('client-info')).replace(/^.* cmd=(\S+) .*$/, 'cmd=$1')}`;
    });
    expect(entries).toEqual([
      'command toplevel echo limited cmd=echo',
      'key toplevel secret:1 limited cmd=cl.throttle',
      'auth toplevel auth limited cmd=auth',
    ]);
  });

  it('keeps secrets out of the slow log, per command and argument position', async () => {
    await send(redis, 'CONFIG', 'SET', 'slowlog-log-slower-than', '0');
    await send(redis, 'SLOWLOG', 'RESET');
    await send(redis, 'AUTH', 'nobody', 'pw1');
    await send(redis, 'AUTH', 'pw2');
    await send(redis, 'HELLO', '2', 'AUTH', 'nobody', 'pw3', 'SETNAME', 'visible');
    await send(redis, 'HELLO', '2', 'SETNAME', 'visible', 'AUTH', 'nobody', 'pw4');
    await send(redis, 'ACL', 'SETUSER', 'someone', '>pw5');
    await send(redis, 'ACL', 'GETUSER', 'someone');
    await send(redis, 'ACL', 'DELUSER', 'someone', 'other');
    await send(redis, 'CONFIG', 'SET', 'slowlog-max-len', '128', 'requirepass', '', 'maxmemory-clients', '0');
    await send(redis, 'ACL', 'SETUSER', 'default', 'nopass');
    const entries = (await redis.call('SLOWLOG', 'GET', '-1')) as [number, number, number, string[], string, string][];
    const args = entries.map((e) => e[3].join(' ')).reverse();
    expect(args.slice(1, 10)).toEqual([
      'AUTH (redacted) (redacted)',
      'AUTH (redacted)',
      'HELLO 2 AUTH (redacted) (redacted) SETNAME visible',
      'HELLO 2 SETNAME visible AUTH (redacted) (redacted)',
      'ACL SETUSER (redacted) (redacted)',
      'ACL GETUSER (redacted)',
      'ACL DELUSER (redacted) (redacted)',
      'CONFIG SET slowlog-max-len 128 requirepass (redacted) maxmemory-clients 0',
      'ACL SETUSER (redacted) (redacted)',
    ]);
    await send(redis, 'CONFIG', 'SET', 'slowlog-log-slower-than', '10000');
  });
});
