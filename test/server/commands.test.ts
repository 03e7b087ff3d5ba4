/**
 * Server and keyspace commands over TCP with a real client (ioredis), as Redis answers them.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import net from 'node:net';
import { startServer, type RunningServer } from '../helpers/server.js';
import { errorOf } from '../helpers/replies.js';
import { waitFor } from '../helpers/wait.js';

let server: RunningServer;
let redis: Redis;
const T0 = 1_800_000_000_000; // a fixed instant for the debug clock (ms)

/** Sends raw bytes and collects the reply until it ends with `until`. */
function rawExchange(request: string, until: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, '127.0.0.1', () => socket.write(Buffer.from(request, 'latin1')));
    let got = '';
    socket.on('data', (d) => {
      got += d.toString('latin1');
      if (got.endsWith(until)) {
        socket.destroy();
        resolve(got);
      }
    });
    socket.on('error', reject);
  });
}


beforeAll(async () => {
  server = await startServer({ args: ['--hz', '100'] });
  redis = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2, lazyConnect: true });
  await redis.connect();
});

afterAll(async () => {
  redis.disconnect();
  await server.stop();
});

beforeEach(async () => {
  await redis.flushall();
  await redis.call('DEBUG', 'CLOCK', 'SET', String(T0));
});

describe('connection commands', () => {
  it('PING, ECHO and TIME', async () => {
    expect(await redis.ping()).toBe('PONG');
    expect(await redis.call('PING', 'hi')).toBe('hi');
    expect(await redis.echo('hello')).toBe('hello');
    await redis.call('DEBUG', 'CLOCK', 'SET', '1800000000123.456');
    expect(await redis.call('TIME')).toEqual(['1800000000', '123456']);
    expect(await errorOf(redis.call('ECHO'))).toBe("ERR wrong number of arguments for 'echo' command");
  });

  it('SELECT accepts only database 0', async () => {
    expect(await redis.call('SELECT', '0')).toBe('OK');
    expect(await errorOf(redis.call('SELECT', '1'))).toBe('ERR DB index is out of range');
    expect(await errorOf(redis.call('SELECT', 'x'))).toBe('ERR value is not an integer or out of range');
  });

  it('HELLO answers as Redis 7 and refuses protocol 4', async () => {
    const reply = (await redis.call('HELLO', '2')) as unknown[];
    expect(reply.slice(0, 6)).toEqual(['server', 'cellgate', 'version', '7.2.4', 'proto', 2]);
    expect(reply.slice(8)).toEqual(['mode', 'standalone', 'role', 'master', 'modules', []]);
    expect(await errorOf(redis.call('HELLO', '4'))).toBe('NOPROTO unsupported protocol version');
    expect(await errorOf(redis.call('HELLO', 'x'))).toBe('ERR Protocol version is not an integer or out of range');
  });

  it('CLIENT ID, SETNAME, GETNAME, SETINFO, INFO, LIST, NO-EVICT, HELP', async () => {
    const id = (await redis.call('CLIENT', 'ID')) as number;
    expect(id).toBeGreaterThan(0);
    expect(await redis.call('CLIENT', 'GETNAME')).toBeNull();
    expect(await redis.call('CLIENT', 'SETNAME', 'worker-1')).toBe('OK');
    expect(await redis.call('CLIENT', 'GETNAME')).toBe('worker-1');
    expect(await errorOf(redis.call('CLIENT', 'SETNAME', 'a b'))).toBe('ERR Client names cannot contain spaces, newlines or special characters.');
    expect(await redis.call('CLIENT', 'SETINFO', 'LIB-NAME', 'mylib')).toBe('OK');
    expect(await redis.call('CLIENT', 'SETINFO', 'lib-ver', '1.2.3')).toBe('OK');
    const info = (await redis.call('CLIENT', 'INFO')) as string;
    expect(info).toMatch(new RegExp(`^id=${id} addr=127\\.0\\.0\\.1:\\d+ laddr=127\\.0\\.0\\.1:${server.port} `));
    expect(info).toContain(' name=worker-1 ');
    expect(info).toContain(' cmd=client|info ');
    expect(info).toContain(' lib-name=mylib lib-ver=1.2.3');
    const list = (await redis.call('CLIENT', 'LIST')) as string;
    expect(list).toContain(`id=${id} `);
    expect(await redis.call('CLIENT', 'LIST', 'ID', String(id))).toBe(info.replace(' cmd=client|info ', ' cmd=client|list '));
    expect(await redis.call('CLIENT', 'NO-EVICT', 'on')).toBe('OK');
    expect(await errorOf(redis.call('CLIENT', 'NO-EVICT', 'maybe'))).toBe('ERR syntax error');
    const help = (await redis.call('CLIENT', 'HELP')) as string[];
    expect(help[0]).toMatch(/^CLIENT <subcommand>/);
    expect(await errorOf(redis.call('CLIENT', 'FOO'))).toBe("ERR unknown subcommand 'FOO'. Try CLIENT HELP.");
    expect(await errorOf(redis.call('CLIENT', 'SETNAME'))).toBe("ERR wrong number of arguments for 'client|setname' command");
  });

  it('unknown commands get Redis 7\'s text', async () => {
    expect(await errorOf(redis.call('NOPE', 'a', 'b'))).toBe("ERR unknown command 'NOPE', with args beginning with: 'a' 'b' ");
    expect(await errorOf(redis.call('NOPE'))).toBe("ERR unknown command 'NOPE', with args beginning with: ");
  });
});

describe('keyspace commands', () => {
  it('DBSIZE, EXISTS, TYPE, TTL, PTTL, DEL, UNLINK', async () => {
    expect(await redis.call('CL.THROTTLE', 'a', '4', '1', '10')).toEqual([0, 5, 4, -1, 10]);
    expect(await redis.call('GCRA', 'b', '4', '1', '10')).toEqual([0, 5, 4, -1, 10]);
    expect(await redis.dbsize()).toBe(2);
    expect(await redis.exists('a', 'b', 'a', 'nope')).toBe(3);
    expect(await redis.type('a')).toBe('gcra');
    expect(await redis.type('nope')).toBe('none');
    expect(await redis.pttl('a')).toBe(10000);
    expect(await redis.ttl('a')).toBe(10);
    expect(await redis.pttl('nope')).toBe(-2);
    expect(await redis.ttl('nope')).toBe(-2);
    await redis.call('DEBUG', 'CLOCK', 'ADVANCE', '1499');
    expect(await redis.pttl('a')).toBe(8501);
    expect(await redis.ttl('a')).toBe(9); // rounded to the nearest second, as Redis
    expect(await redis.del('a', 'nope')).toBe(1);
    expect(await redis.unlink('b')).toBe(1);
    expect(await redis.dbsize()).toBe(0);
  });

  it('a key is visible through its expiry millisecond and gone the next', async () => {
    await redis.call('CL.THROTTLE', 'k', '0', '1', '1'); // TAT = now + 1 s
    await redis.call('DEBUG', 'CLOCK', 'ADVANCE', '1000');
    expect(await redis.pttl('k')).toBe(0);
    expect(await redis.exists('k')).toBe(1);
    await redis.call('DEBUG', 'CLOCK', 'ADVANCE', '0.999');
    expect(await redis.exists('k')).toBe(1);
    await redis.call('DEBUG', 'CLOCK', 'ADVANCE', '0.001');
    expect(await redis.exists('k')).toBe(0);
    expect(await redis.pttl('k')).toBe(-2);
  });

  it('the active expiry cycle reclaims keys nobody touches', async () => {
    const pipe = redis.pipeline();
    for (let i = 0; i < 20_000; i++) pipe.call('CL.THROTTLE', `exp:${i}`, '0', '1', '1');
    await pipe.exec();
    expect(await redis.dbsize()).toBe(20_000);
    await redis.call('DEBUG', 'CLOCK', 'ADVANCE', '1001');
    // The cycle runs on the server's timer (hz 100), a time budget per run: poll until it has swept
    // every key, however many runs a loaded machine needs.
    await waitFor(async () => (await redis.dbsize()) === 0, 'the expiry cycle to sweep every key');
    expect(await redis.dbsize()).toBe(0);
    const info = (await redis.info('stats')) as string;
    expect(Number(/expired_keys:(\d+)/.exec(info)![1])).toBeGreaterThanOrEqual(20_000);
  });

  it('SCAN walks every key exactly once, with MATCH, COUNT and TYPE', async () => {
    const pipe = redis.pipeline();
    for (let i = 0; i < 1000; i++) pipe.call('CL.THROTTLE', `user:${i}`, '5', '10', '60');
    for (let i = 0; i < 100; i++) pipe.call('GCRA', `ip:${i}`, '5', '10', '60');
    await pipe.exec();
    const seen = new Set<string>();
    let cursor = '0';
    let calls = 0;
    do {
      const [next, keys] = (await redis.call('SCAN', cursor, 'COUNT', '97')) as [string, string[]];
      for (const k of keys) {
        expect(seen.has(k)).toBe(false);
        seen.add(k);
      }
      cursor = next;
      calls++;
    } while (cursor !== '0');
    expect(seen.size).toBe(1100);
    expect(calls).toBeGreaterThan(5);
    const matched: string[] = [];
    cursor = '0';
    do {
      const [next, keys] = (await redis.call('SCAN', cursor, 'MATCH', 'ip:*', 'COUNT', '1000')) as [string, string[]];
      matched.push(...keys);
      cursor = next;
    } while (cursor !== '0');
    expect(matched.length).toBe(100);
    const [, typed] = (await redis.call('SCAN', '0', 'COUNT', '5000', 'TYPE', 'gcra')) as [string, string[]];
    expect(typed.length).toBe(1100);
    const [, none] = (await redis.call('SCAN', '0', 'COUNT', '5000', 'TYPE', 'tokenbucket')) as [string, string[]];
    expect(none).toEqual([]);
    expect(await errorOf(redis.call('SCAN', 'x'))).toBe('ERR invalid cursor');
    expect(await errorOf(redis.call('SCAN', '0', 'COUNT', '0'))).toBe('ERR syntax error');
    expect(await errorOf(redis.call('SCAN', '0', 'BOGUS'))).toBe('ERR syntax error');
  });

  it('KEYS matches Redis glob patterns on binary keys', async () => {
    for (const k of ['user:1', 'user:2', 'user:10', 'ip:1', 'h\xe9llo', 'a*b']) await redis.call('CL.THROTTLE', k, '1', '1', '1');
    expect(((await redis.keys('user:?')) as string[]).sort()).toEqual(['user:1', 'user:2']);
    expect(((await redis.keys('user:[12]*')) as string[]).sort()).toEqual(['user:1', 'user:10', 'user:2']);
    expect(((await redis.keys('user:[^1]')) as string[]).sort()).toEqual(['user:2']);
    expect(await redis.keys('a\\*b')).toEqual(['a*b']);
    expect((await redis.keys('*')).length).toBe(6);
  });

  it('FLUSHDB and FLUSHALL empty the keyspace', async () => {
    await redis.call('CL.THROTTLE', 'x', '1', '1', '1');
    expect(await redis.call('FLUSHDB', 'ASYNC')).toBe('OK');
    expect(await redis.dbsize()).toBe(0);
    expect(await errorOf(redis.call('FLUSHDB', 'LATER'))).toBe('ERR syntax error');
  });

  it('WRONGTYPE is not possible between CL.THROTTLE and GCRA: they share a TAT', async () => {
    expect(await redis.call('CL.THROTTLE', 's', '1', '1', '10')).toEqual([0, 2, 1, -1, 10]);
    // GCRA sees the same TAT: one token left of two.
    expect(await redis.call('GCRA', 's', '1', '1', '10')).toEqual([0, 2, 0, -1, 20]);
    expect(await redis.call('CL.THROTTLE', 's', '1', '1', '10')).toEqual([1, 2, 0, 10, 20]);
  });
});

describe('server commands', () => {
  it('INFO always answers with redis_version, loading:0, process_id, keyspace and limiter stats', async () => {
    await redis.call('CONFIG', 'RESETSTAT');
    await redis.call('CL.THROTTLE', 'i', '0', '1', '60');
    await redis.call('CL.THROTTLE', 'i', '0', '1', '60');
    const info = (await redis.info()) as string;
    expect(info).toMatch(/^# Server\r\nredis_version:7\.2\.4\r\n/);
    expect(info).toContain('\r\nloading:0\r\n');
    expect(info).toContain(`\r\nprocess_id:${server.proc.pid}\r\n`);
    expect(info).toContain(`\r\ntcp_port:${server.port}\r\n`);
    expect(info).toContain('\r\ndb0:keys=1,expires=1,');
    expect(info).toContain('\r\nlimiter_cl.throttle:allowed=1,limited=1\r\n');
    const stats = (await redis.call('INFO', 'commandstats')) as string;
    expect(stats).toMatch(/cmdstat_cl\.throttle:calls=2,usec=\d+,usec_per_call=[\d.]+,rejected_calls=0,failed_calls=0/);
    const two = (await redis.call('INFO', 'server', 'clients')) as string;
    expect(two).toContain('# Server');
    expect(two).toContain('# Clients\r\nconnected_clients:');
    expect(two).not.toContain('# Memory');
  });

  it('CONFIG GET, SET and RESETSTAT', async () => {
    expect(await redis.call('CONFIG', 'GET', 'maxmemory-policy')).toEqual(['maxmemory-policy', 'volatile-ttl']);
    const all = (await redis.call('CONFIG', 'GET', '*')) as string[];
    expect(all).toContain('port');
    expect(all[all.indexOf('port') + 1]).toBe(String(server.port)); // the port actually bound, even when started with 0
    expect(await redis.call('CONFIG', 'GET', 'save', 'appendonly')).toEqual(['save', '3600 1 300 100 60 10000', 'appendonly', 'no']);
    expect(await redis.call('CONFIG', 'SET', 'timeout', '30', 'maxmemory', '1gb')).toBe('OK');
    expect(await redis.call('CONFIG', 'GET', 'maxmemory')).toEqual(['maxmemory', '1073741824']);
    expect(await errorOf(redis.call('CONFIG', 'SET', 'tls-port', '1'))).toBe("ERR CONFIG SET failed (possibly related to argument 'tls-port') - can't set immutable config");
    expect(await errorOf(redis.call('CONFIG', 'SET', 'nope', '1'))).toBe("ERR Unknown option or number of arguments for CONFIG SET - 'nope'");
    // All or nothing: a bad second pair leaves the first unchanged.
    expect(await errorOf(redis.call('CONFIG', 'SET', 'timeout', '60', 'hz', 'fast'))).toMatch(/^ERR CONFIG SET failed \(possibly related to argument 'hz'\)/);
    expect(await redis.call('CONFIG', 'GET', 'timeout')).toEqual(['timeout', '30']);
    await redis.call('CONFIG', 'SET', 'timeout', '0', 'maxmemory', '0');
    expect(await redis.call('CONFIG', 'RESETSTAT')).toBe('OK');
    const stats = (await redis.info('stats')) as string;
    expect(stats).toContain('\r\ntotal_commands_processed:1\r\n'); // RESETSTAT itself counts, as in Redis
  });

  it('COMMAND COUNT, LIST, INFO and DOCS come from one table', async () => {
    const count = (await redis.call('COMMAND', 'COUNT')) as number;
    const all = (await redis.call('COMMAND')) as unknown[][];
    expect(all.length).toBe(count);
    const list = (await redis.call('COMMAND', 'LIST')) as string[];
    expect(list).toContain('cl.throttle');
    expect(list).toContain('client|setname');
    const [info] = (await redis.call('COMMAND', 'INFO', 'cl.throttle')) as unknown[][];
    expect(info.slice(0, 6)).toEqual(['cl.throttle', -4, ['write', 'denyoom', 'fast'], 1, 1, 1]);
    expect(await redis.call('COMMAND', 'INFO', 'nope')).toEqual([null]);
    const docs = (await redis.call('COMMAND', 'DOCS', 'gcra')) as unknown[];
    expect(docs[0]).toBe('gcra');
    expect(docs[1]).toContain('summary');
    expect(((await redis.call('COMMAND', 'LIST', 'FILTERBY', 'PATTERN', 'cl*')) as string[]).sort()).toEqual(['cl.throttle', 'client', 'client|id', 'client|getname', 'client|setname', 'client|setinfo', 'client|info', 'client|kill', 'client|list', 'client|no-evict', 'client|help', 'client|unblock'].sort());
  });

  it('COMMAND INFO has Redis 7.0\'s wire shape (RESP3 sets for flags, categories, tips, key specs, subcommands)', async () => {
    const bytes = await rawExchange('HELLO 3\r\nCOMMAND INFO ping\r\n', '~0\r\n~0\r\n');
    expect(bytes.slice(bytes.indexOf('*1\r\n*10\r\n'))).toBe(
      '*1\r\n*10\r\n$4\r\nping\r\n:-1\r\n~1\r\n+fast\r\n:0\r\n:0\r\n:0\r\n~2\r\n+@fast\r\n+@connection\r\n~0\r\n~0\r\n~0\r\n');
  });

  it('error texts stop at a NUL byte, as Redis\'s %s formatting does', async () => {
    const bytes = await rawExchange('*2\r\n$3\r\na\x00b\r\n$3\r\nc\x00d\r\n', '\r\n');
    expect(bytes).toBe("-ERR unknown command 'a', with args beginning with: 'c' \r\n");
  });

  it('every command checks its arity from the table', async () => {
    const all = (await redis.call('COMMAND')) as [string, number, ...unknown[]][];
    for (const [name, arity] of all) {
      if (arity === -1 || arity === 1) continue; // nothing can be too few
      const needed = Math.abs(arity) - 1;
      const args = Array.from({ length: Math.max(0, needed - 1) }, () => 'x');
      expect(await errorOf(redis.call(name, ...args)), name).toBe(`ERR wrong number of arguments for '${name}' command`);
    }
  });

  it('DEBUG needs --enable-debug-command', async () => {
    const plain = await startServer({ debug: false });
    const c = new Redis({ port: plain.port, host: '127.0.0.1', protocol: 2 });
    try {
      expect(await errorOf(c.call('DEBUG', 'CLOCK', 'SET', '1'))).toMatch(/^ERR DEBUG command not allowed\./);
    } finally {
      c.disconnect();
      await plain.stop();
    }
    expect(await redis.call('DEBUG', 'SLEEP', '0')).toBe('OK');
    expect(await redis.call('DEBUG', 'GC')).toBe('OK');
    expect(await errorOf(redis.call('DEBUG', 'CLOCK', 'SET', 'soon'))).toMatch(/^ERR invalid milliseconds 'soon'/);
    expect(await redis.call('DEBUG', 'CLOCK', 'REAL')).toBe('OK');
    const [sec] = (await redis.call('TIME')) as string[];
    expect(Math.abs(Number(sec) - Date.now() / 1000)).toBeLessThan(5);
  });
});

describe('authentication', () => {
  it('requirepass gates commands; AUTH and HELLO AUTH open them', async () => {
    const secured = await startServer({ args: ['--requirepass', 's3cret'] });
    const c = new Redis({ port: secured.port, host: '127.0.0.1', protocol: 2, enableReadyCheck: false, lazyConnect: true });
    try {
      await c.connect();
      expect(await errorOf(c.call('CL.THROTTLE', 'k', '1', '1', '1'))).toBe('NOAUTH Authentication required.');
      expect(await c.ping().catch((e: Error) => e.message)).toBe('NOAUTH Authentication required.');
      expect(await errorOf(c.call('AUTH', 'wrong'))).toBe('WRONGPASS invalid username-password pair or user is disabled.');
      expect(await errorOf(c.call('AUTH', 'someone', 's3cret'))).toBe('WRONGPASS invalid username-password pair or user is disabled.');
      expect(await errorOf(c.call('HELLO', '3'))).toMatch(/^NOAUTH HELLO must be called with the client already authenticated/);
      expect(await c.call('AUTH', 's3cret')).toBe('OK');
      expect(await c.ping()).toBe('PONG');
      expect(await c.call('RESET')).toBe('RESET');
      expect(await errorOf(c.call('PING'))).toBe('NOAUTH Authentication required.');
      const hello = (await c.call('HELLO', '2', 'AUTH', 'default', 's3cret', 'SETNAME', 'n1')) as unknown[];
      expect(hello[1]).toBe('cellgate');
      expect(await c.call('CLIENT', 'GETNAME')).toBe('n1');
      const info = (await c.info('stats')) as string;
      expect(info).toContain('acl_access_denied_auth:2');
    } finally {
      c.disconnect();
      await secured.stop();
    }
    // Without a password configured, AUTH <pass> says so, as Redis does.
    expect(await errorOf(redis.call('AUTH', 'x'))).toBe('ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?');
    expect(await redis.call('AUTH', 'default', 'anything')).toBe('OK');
  });
});

describe('SHUTDOWN', () => {
  it('stops the server with exit code 0', async () => {
    const s = await startServer();
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2, retryStrategy: () => null });
    c.on('error', () => {});
    await c.ping();
    await c.call('SHUTDOWN', 'NOSAVE').catch(() => undefined);
    expect(await s.stop()).toBe(0);
    c.disconnect();
  });
});
