/**
 * MULTI / EXEC / DISCARD / WATCH / UNWATCH over TCP, as Redis 7 (docs/commands.md, Transactions):
 * byte for byte against a real redis-server where both servers have the commands, real clients
 * (redis-py's transactional pipeline, ioredis and node-redis `.multi()`), queuing errors, WATCH
 * invalidation by every kind of change, and the bound on what a never-ending MULTI may hold.
 * Needs redis-server and python3-redis (`sh scripts/install-test-deps.sh`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { freePort, startServer, type RunningServer } from '../helpers/server.js';
import { RawConnection, infoField, mbulk } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';
import { REDIS_SERVER, expectOracleRedis } from '../helpers/redis.js';

/**
 * The least maxmemory the server accepts: what it holds with no key (used_memory_startup). With a
 * key present the server is over it, so it evicts (or, under noeviction, answers OOM).
 */
async function leastMaxmemory(c: Redis): Promise<string> {
  return infoField(await c.info('memory'), 'used_memory_startup')!;
}

const T0 = '1800000000000'; // the frozen debug clock (ms): limiter replies below do not depend on timing
const FIRST = [0, 6, 5, -1, 6]; // CL.THROTTLE k 5 10 60, first call
const SECOND = [0, 6, 4, -1, 12];
const THIRD = [0, 6, 3, -1, 18];

let server: RunningServer;
let redisServer: ChildProcess | null = null;
let redisPort = 0;
let redis: Redis;
let other: Redis;

beforeAll(async () => {
  server = await startServer();
  redis = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0 });
  other = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0 });
  await Promise.all([redis.connect(), other.connect()]);
  await redis.call('DEBUG', 'CLOCK', 'SET', T0);
  redisPort = await freePort();
  expectOracleRedis();
  redisServer = spawn(REDIS_SERVER, ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  for (let i = 0; i < 100; i++) {
    try {
      const c = await RawConnection.open(redisPort);
      c.destroy();
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error('redis-server did not start (install it: sh scripts/install-test-deps.sh)');
});

afterAll(async () => {
  redis?.disconnect();
  other?.disconnect();
  redisServer?.kill();
  await server?.stop();
});

/** Sends `payload` on a new connection and returns every byte received until the server is quiet (or closes). */
async function transcript(port: number, payload: string | Buffer, opts: { resp3?: boolean } = {}): Promise<{ bytes: string; closed: boolean }> {
  const conn = await RawConnection.open(port);
  try {
    let skip = 0;
    if (opts.resp3) {
      await conn.write('HELLO 3\r\n');
      await conn.settle(15, 3000, 1);
      skip = conn.length; // HELLO's own reply names the server: not compared
    }
    await conn.write(payload);
    // Each inline command gets one reply (or the server closes): wait for all of them.
    const inlineCommands = typeof payload === 'string' ? payload.split('\r\n').length - 1 : 0;
    await conn.settle(30, 3000, (opts.resp3 ? 1 : 0) + inlineCommands);
    return { bytes: conn.received.subarray(skip).toString('latin1'), closed: conn.ended };
  } finally {
    conn.destroy();
  }
}

/** The same input to cellgate and to redis-server: the same bytes back. */
async function sameAsRedis(payload: string, opts: { resp3?: boolean } = {}): Promise<string> {
  const [ours, theirs] = await Promise.all([transcript(server.port, payload, opts), transcript(redisPort, payload, opts)]);
  expect(ours.bytes).toBe(theirs.bytes);
  expect(ours.closed).toBe(theirs.closed);
  return ours.bytes;
}

function lines(...commands: string[]): string {
  return commands.map((c) => `${c}\r\n`).join('');
}

describe('replies byte for byte as redis-server', () => {
  it('a transaction of PING, ECHO, DEL, EXISTS: +QUEUED each, EXEC an array of their replies', async () => {
    const bytes = await sameAsRedis(lines('DEL tx:a', 'MULTI', 'PING', 'ECHO hello', 'DEL tx:a tx:b', 'EXISTS tx:a', 'EXEC', 'PING'));
    expect(bytes).toBe(':0\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n+PONG\r\n$5\r\nhello\r\n:0\r\n:0\r\n+PONG\r\n');
  });

  it('the same in RESP3', async () => {
    await sameAsRedis(lines('MULTI', 'PING', 'ECHO x', 'EXISTS tx:none', 'EXEC'), { resp3: true });
  });

  it('an unknown command and a wrong arity while queuing: EXECABORT', async () => {
    const bytes = await sameAsRedis(lines('MULTI', 'PING', 'NOSUCH a b', 'DEL', 'ECHO a', 'EXEC', 'PING'));
    expect(bytes).toContain('-EXECABORT Transaction discarded because of previous errors.\r\n');
  });

  it('nested MULTI, EXEC/DISCARD without MULTI, WATCH inside MULTI (none of them marks the transaction)', async () => {
    const bytes = await sameAsRedis(lines('EXEC', 'DISCARD', 'MULTI', 'MULTI', 'WATCH tx:w', 'PING', 'EXEC', 'MULTI', 'PING', 'DISCARD', 'DISCARD'));
    expect(bytes).toBe(
      '-ERR EXEC without MULTI\r\n-ERR DISCARD without MULTI\r\n+OK\r\n-ERR MULTI calls can not be nested\r\n' +
        '-ERR WATCH inside MULTI is not allowed\r\n+QUEUED\r\n*1\r\n+PONG\r\n+OK\r\n+QUEUED\r\n+OK\r\n-ERR DISCARD without MULTI\r\n',
    );
  });

  it('EXEC with arguments inside MULTI ends it with EXECABORT and its reason', async () => {
    const bytes = await sameAsRedis(lines('MULTI', 'PING', 'EXEC x', 'PING', 'EXEC'));
    expect(bytes).toContain("-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n");
  });

  it('EXEC with arguments outside MULTI: the same EXECABORT form', async () => {
    expect(await sameAsRedis(lines('EXEC x', 'PING'))).toBe("-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n+PONG\r\n");
  });

  it('a no-multi command (SAVE) is refused and marks the transaction', async () => {
    const bytes = await sameAsRedis(lines('MULTI', 'SAVE', 'PING', 'EXEC'));
    expect(bytes).toBe('+OK\r\n-ERR Command not allowed inside a transaction\r\n+QUEUED\r\n-EXECABORT Transaction discarded because of previous errors.\r\n');
  });

  it('WATCH then a DEL of the key by the same client: EXEC replies a null array (RESP2 and RESP3)', async () => {
    const script = lines('DEL tx:k', 'WATCH tx:k', 'ECHO v', 'UNWATCH', 'WATCH tx:k tx:k', 'MULTI', 'PING', 'EXEC', 'WATCH tx:none', 'DEL tx:none', 'MULTI', 'PING', 'EXEC');
    expect(await sameAsRedis(script)).toContain('*1\r\n+PONG\r\n');
    await sameAsRedis(script, { resp3: true });
  });

  it('UNWATCH queued inside MULTI replies +OK in EXEC', async () => {
    expect(await sameAsRedis(lines('WATCH tx:u', 'MULTI', 'UNWATCH', 'PING', 'EXEC'))).toBe('+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n+PONG\r\n');
  });

  it('RESET inside MULTI discards it; QUIT inside MULTI replies OK and closes', async () => {
    expect(await sameAsRedis(lines('MULTI', 'PING', 'RESET', 'EXEC'))).toBe('+OK\r\n+QUEUED\r\n+RESET\r\n-ERR EXEC without MULTI\r\n');
    const quit = await sameAsRedis(lines('MULTI', 'PING', 'QUIT', 'PING'));
    expect(quit).toBe('+OK\r\n+QUEUED\r\n+OK\r\n');
  });
});

describe('limiters in transactions', () => {
  it('queued limiter calls do not run until EXEC, then run once each with the clock of EXEC', async () => {
    const c = await RawConnection.open(server.port);
    try {
      await c.write(lines('MULTI', 'CL.THROTTLE tx:lim 5 10 60', 'CL.THROTTLE tx:lim 5 10 60'));
      await c.waitForBytes('+OK\r\n+QUEUED\r\n+QUEUED\r\n'.length);
      // Queued: nothing spent yet.
      expect(await other.exists('tx:lim')).toBe(0);
      await c.write(lines('EXEC'));
      await c.settle(15, 3000, 4);
      expect(c.text()).toBe(
        '+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:6\r\n*5\r\n:0\r\n:6\r\n:4\r\n:-1\r\n:12\r\n',
      );
    } finally {
      c.destroy();
    }
    expect(await redis.call('CL.THROTTLE', 'tx:lim', '5', '10', '60')).toEqual(THIRD);
  });

  it('queued commands keep their own arguments (copied: the parser reuses its buffers), sent in separate reads', async () => {
    const c = await RawConnection.open(server.port);
    try {
      await c.write(lines('MULTI'));
      await c.waitForBytes(5);
      for (let i = 0; i < 5; i++) {
        await c.write(mbulk('CL.THROTTLE', `tx:copy${i}`, '5', '10', '60'));
        await c.waitForBytes(5 + 9 * (i + 1));
      }
      await c.write(lines('EXEC'));
      await c.settle(15, 3000, 7);
      expect(c.text()).toContain(`*5\r\n${'*5\r\n:0\r\n:6\r\n:5\r\n:-1\r\n:6\r\n'.repeat(5)}`);
    } finally {
      c.destroy();
    }
    for (let i = 0; i < 5; i++) expect(await redis.call('CL.THROTTLE', `tx:copy${i}`, '5', '10', '60')).toEqual(SECOND);
  });

  it('EXECABORT after an unknown command or a wrong arity: nothing ran', async () => {
    for (const bad of ['NOSUCH x', 'CL.THROTTLE tx:abort 5']) {
      const c = await RawConnection.open(server.port);
      try {
        await c.write(lines('MULTI', 'CL.THROTTLE tx:abort 5 10 60', bad, 'RL.FIXEDWINDOW tx:abort2 10 60000', 'EXEC'));
        await c.settle(15, 3000, 5);
        expect(c.text()).toMatch(/^\+OK\r\n\+QUEUED\r\n-ERR [^\r]*\r\n\+QUEUED\r\n-EXECABORT Transaction discarded because of previous errors\.\r\n$/);
      } finally {
        c.destroy();
      }
      expect(await other.exists('tx:abort', 'tx:abort2')).toBe(0);
    }
  });

  it('an error inside EXEC is an error element (RESP2 and RESP3); the other commands still run', async () => {
    const r3 = new Redis({ port: server.port, host: '127.0.0.1', protocol: 3, lazyConnect: true, maxRetriesPerRequest: 0 });
    await r3.connect();
    try {
      for (const client of [redis, r3]) {
        await client.del('tx:e1', 'tx:e2');
        const res = await client.multi().call('CL.THROTTLE', 'tx:e1', '5', '10', '60').call('CL.THROTTLE', 'tx:e1', '5', '10', 'x').call('CL.THROTTLE', 'tx:e2', '5', '10', '60').exec();
        expect(res![0]).toEqual([null, FIRST]);
        expect((res![1][0] as Error).message).toMatch(/^ERR /);
        expect(res![2]).toEqual([null, FIRST]);
        expect(await client.call('CL.THROTTLE', 'tx:e1', '5', '10', '60')).toEqual(SECOND);
      }
    } finally {
      r3.disconnect();
    }
  });

  it('node-redis (v5) .multi(): replies right, spent once', async () => {
    const client = createClient({ socket: { host: '127.0.0.1', port: server.port, reconnectStrategy: false } });
    await client.connect();
    try {
      await client.del('tx:nr');
      const res = await client.multi().addCommand(['CL.THROTTLE', 'tx:nr', '5', '10', '60']).addCommand(['RL.FIXEDWINDOW', 'tx:nrf', '10', '60000']).ping().exec();
      expect(res[0]).toEqual(FIRST);
      expect((res[1] as unknown as number[])[2]).toBe(9);
      expect(res[2]).toBe('PONG');
      expect(await client.sendCommand(['CL.THROTTLE', 'tx:nr', '5', '10', '60'])).toEqual(SECOND);
    } finally {
      await client.close();
    }
  });

  it("redis-py's default (transactional) pipeline(): replies right, spent once", () => {
    const py = ['/usr/bin/python3', 'python3'].find((p) => (!p.startsWith('/') || existsSync(p)) && spawnSync(p, ['-c', 'import redis'], { timeout: 10_000 }).status === 0);
    if (py === undefined) throw new Error('no python3 can import redis: install python3-redis (sh scripts/install-test-deps.sh)');
    const script = [
      'import json, sys, redis',
      "r = redis.Redis(host='127.0.0.1', port=int(sys.argv[1]), socket_timeout=5)",
      "r.delete('tx:py', 'tx:pyf')",
      'p = r.pipeline()',
      "p.execute_command('CL.THROTTLE', 'tx:py', 5, 10, 60)",
      "p.execute_command('CL.THROTTLE', 'tx:py', 5, 10, 60)",
      "p.execute_command('RL.FIXEDWINDOW', 'tx:pyf', 10, 60000)",
      'p.ping()',
      'out = {}',
      "out['pipeline'] = p.execute()",
      "out['after'] = r.execute_command('CL.THROTTLE', 'tx:py', 5, 10, 60)",
      'w = r.pipeline()',
      "w.watch('tx:py')",
      "r2 = redis.Redis(host='127.0.0.1', port=int(sys.argv[1]), socket_timeout=5)",
      "r2.execute_command('CL.THROTTLE', 'tx:py', 5, 10, 60)",
      'w.multi()',
      "w.execute_command('CL.THROTTLE', 'tx:py', 5, 10, 60)",
      'try:',
      '    w.execute()',
      "    out['watch'] = 'ran'",
      'except redis.exceptions.WatchError:',
      "    out['watch'] = 'WatchError'",
      'print(json.dumps(out))',
    ].join('\n');
    const r = spawnSync(py, ['-c', script, String(server.port)], { encoding: 'utf8', timeout: 20_000 });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout) as { pipeline: unknown[]; after: number[]; watch: string };
    expect(out.pipeline[0]).toEqual(FIRST);
    expect(out.pipeline[1]).toEqual(SECOND);
    expect((out.pipeline[2] as number[])[2]).toBe(9);
    expect(out.pipeline[3]).toBe(true);
    expect(out.after).toEqual(THIRD);
    expect(out.watch).toBe('WatchError');
  });
});

describe('WATCH', () => {
  /** WATCH `key` on a new connection, run `change`, then MULTI + a limiter call on `key` + EXEC: EXEC's reply. */
  async function watchedExec(key: string, change: () => Promise<unknown>, proto: 2 | 3 = 2): Promise<unknown> {
    const c = new Redis({ port: server.port, host: '127.0.0.1', protocol: proto, lazyConnect: true, maxRetriesPerRequest: 0 });
    await c.connect();
    try {
      expect(await c.watch(key)).toBe('OK');
      await change();
      return await c.multi().call('CL.THROTTLE', key, '5', '10', '60').exec();
    } finally {
      c.disconnect();
    }
  }

  it("another client's limiter call on the key: EXEC null (RESP2 and RESP3), nothing ran", async () => {
    for (const proto of [2, 3] as const) {
      await redis.del('tx:w1');
      await redis.call('CL.THROTTLE', 'tx:w1', '5', '10', '60');
      expect(await watchedExec('tx:w1', () => other.call('CL.THROTTLE', 'tx:w1', '5', '10', '60'), proto)).toBeNull();
      expect(await redis.call('CL.THROTTLE', 'tx:w1', '5', '10', '60')).toEqual(THIRD);
    }
  });

  it('no change: EXEC runs', async () => {
    await redis.del('tx:w0');
    await redis.call('CL.THROTTLE', 'tx:w0', '5', '10', '60');
    expect(await watchedExec('tx:w0', () => other.call('CL.THROTTLE', 'tx:other', '5', '10', '60'))).toEqual([[null, SECOND]]);
  });

  it('RESP3 EXEC after a touched key is `_`, byte for byte', async () => {
    await redis.call('CL.THROTTLE', 'tx:w3', '5', '10', '60');
    const c = await RawConnection.open(server.port);
    try {
      await c.write(lines('HELLO 3'));
      await c.settle(15, 3000, 1);
      const skip = c.length;
      await c.write(lines('WATCH tx:w3'));
      await c.waitForBytes(skip + 5);
      await other.call('CL.THROTTLE', 'tx:w3', '5', '10', '60');
      await c.write(lines('MULTI', 'PING', 'EXEC'));
      await c.settle(15, 3000, 5);
      expect(c.received.subarray(skip).toString('latin1')).toBe('+OK\r\n+OK\r\n+QUEUED\r\n_\r\n');
    } finally {
      c.destroy();
    }
  });

  it('DEL and UNLINK of the key invalidate it', async () => {
    for (const cmd of ['DEL', 'UNLINK']) {
      await redis.call('CL.THROTTLE', 'tx:wd', '5', '10', '60');
      expect(await watchedExec('tx:wd', () => other.call(cmd, 'tx:wd'))).toBeNull();
      expect(await redis.exists('tx:wd')).toBe(0);
    }
  });

  it('a key that does not exist, then is created, invalidates it; a DEL of a missing key does not', async () => {
    await redis.del('tx:wn');
    expect(await watchedExec('tx:wn', () => other.del('tx:wn'))).toEqual([[null, FIRST]]);
    await redis.del('tx:wn');
    expect(await watchedExec('tx:wn', () => other.call('CL.THROTTLE', 'tx:wn', '5', '10', '60'))).toBeNull();
    expect(await redis.call('CL.THROTTLE', 'tx:wn', '5', '10', '60')).toEqual(SECOND);
  });

  it('FLUSHALL touches a watched key that exists, not one that does not', async () => {
    await redis.call('CL.THROTTLE', 'tx:wf', '5', '10', '60');
    expect(await watchedExec('tx:wf', () => other.flushall())).toBeNull();
    expect(await redis.exists('tx:wf')).toBe(0);
    expect(await watchedExec('tx:wf', () => other.flushall())).toEqual([[null, FIRST]]);
  });

  it('UNWATCH: a later change does not matter', async () => {
    await redis.call('CL.THROTTLE', 'tx:wu', '5', '10', '60');
    const c = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0 });
    await c.connect();
    try {
      await c.watch('tx:wu');
      await c.unwatch();
      await other.call('CL.THROTTLE', 'tx:wu', '5', '10', '60');
      expect(await c.multi().call('CL.THROTTLE', 'tx:wu', '5', '10', '60').exec()).toEqual([[null, THIRD]]);
    } finally {
      c.disconnect();
    }
    await redis.del('tx:wu');
  });

  it('expiry: the key expires (DEBUG CLOCK past its TTL) before EXEC: null, lazily removed or not; a key already expired when watched is no change when it goes', async () => {
    try {
      // Expired by EXEC time, not removed yet (nothing looked it up): counts as touched.
      await redis.call('CL.THROTTLE', 'tx:we', '5', '10', '60'); // TTL 6 s
      expect(await watchedExec('tx:we', () => redis.call('DEBUG', 'CLOCK', 'ADVANCE', '7000'))).toBeNull();
      // Expired and removed lazily by another client's lookup.
      await redis.call('DEBUG', 'CLOCK', 'SET', T0);
      await redis.del('tx:we');
      await redis.call('CL.THROTTLE', 'tx:we', '5', '10', '60');
      expect(await watchedExec('tx:we', async () => {
        await redis.call('DEBUG', 'CLOCK', 'ADVANCE', '7000');
        expect(await other.exists('tx:we')).toBe(0);
      })).toBeNull();
      // Already expired when watched: its removal is no change (Redis's wk->expired), EXEC runs.
      await redis.call('DEBUG', 'CLOCK', 'SET', T0);
      await redis.call('CL.THROTTLE', 'tx:wx', '5', '10', '60');
      await redis.call('DEBUG', 'CLOCK', 'ADVANCE', '7000');
      expect(await watchedExec('tx:wx', () => other.exists('tx:wx'))).toEqual([[null, FIRST]]);
    } finally {
      await redis.call('DEBUG', 'CLOCK', 'SET', T0);
    }
  });

  it('active expiry removing the key invalidates it', async () => {
    try {
      await redis.call('CL.THROTTLE', 'tx:wa', '5', '10', '60');
      expect(await watchedExec('tx:wa', async () => {
        // Read before the clock moves: the cycle may remove the key before the next INFO.
        const before = Number(infoField(await other.info('stats'), 'expired_keys'));
        await redis.call('DEBUG', 'CLOCK', 'ADVANCE', '7000');
        // The periodic task's expiry cycle removes it (nothing looks it up): wait for expired_keys to count it.
        await waitFor(async () => Number(infoField(await other.info('stats'), 'expired_keys')) > before, 'the expiry cycle to remove tx:wa');
      })).toBeNull();
    } finally {
      await redis.call('DEBUG', 'CLOCK', 'SET', T0);
    }
  });

  it('eviction (maxmemory) of the key invalidates it', async () => {
    await redis.call('CL.THROTTLE', 'tx:wv', '5', '10', '60');
    const before = Number(infoField(await redis.info('stats'), 'evicted_keys'));
    expect(await watchedExec('tx:wv', async () => {
      await other.config('SET', 'maxmemory-policy', 'allkeys-random');
      await other.config('SET', 'maxmemory', await leastMaxmemory(other));
      await other.ping(); // evicts before it runs
      await other.config('SET', 'maxmemory', '0');
      await other.config('SET', 'maxmemory-policy', 'volatile-ttl');
    })).toBeNull();
    expect(Number(infoField(await redis.info('stats'), 'evicted_keys'))).toBeGreaterThan(before);
    expect(await redis.exists('tx:wv')).toBe(0);
  });

  it('the watching client closing drops its watches', async () => {
    await redis.call('CL.THROTTLE', 'tx:wc', '5', '10', '60');
    const c = await RawConnection.open(server.port);
    await c.write(lines('WATCH tx:wc'));
    await c.waitForBytes(5);
    expect(c.text()).toBe('+OK\r\n');
    c.destroy();
    await c.waitForClose();
    await other.call('CL.THROTTLE', 'tx:wc', '5', '10', '60');
    expect(await redis.call('CL.THROTTLE', 'tx:wc', '5', '10', '60')).toEqual(THIRD);
  });
});

describe('introspection and limits', () => {
  it('a command queued in EXEC is bookkept as one run directly: the slow log redacts ACL SETUSER passwords', async () => {
    await redis.config('SET', 'slowlog-log-slower-than', '0');
    try {
      await redis.slowlog('RESET');
      const res = await redis.multi().call('ACL', 'SETUSER', 'tx-slow', 'on', '>tx-secret').exec();
      expect(res).toEqual([[null, 'OK']]);
      const entries = (await redis.slowlog('GET', 10)) as unknown[][];
      const setuser = entries.find((e) => String((e[3] as string[])[0]).toLowerCase() === 'acl');
      expect(setuser).toBeDefined();
      expect(JSON.stringify(setuser)).not.toContain('tx-secret');
      expect(JSON.stringify(setuser)).toContain('(redacted)');
    } finally {
      await redis.config('SET', 'slowlog-log-slower-than', '10000');
      await redis.call('ACL', 'DELUSER', 'tx-slow');
    }
  });

  it('CONFIG SET port inside MULTI is an error element (its listeners bind later than EXEC answers); the port stays', async () => {
    const port = await freePort();
    const res = await redis.multi().config('SET', 'port', String(port)).ping().exec();
    expect(res![0][0]).toBeInstanceOf(Error);
    expect((res![0][0] as Error).message).toMatch(/port and bind cannot be changed inside MULTI/);
    expect(res![1]).toEqual([null, 'PONG']);
    expect(await redis.config('GET', 'port')).toEqual(['port', String(server.port)]);
  });

  it('COMMAND INFO / DOCS list the transaction commands from the table', async () => {
    const info = (await redis.call('COMMAND', 'INFO', 'multi', 'exec', 'discard', 'watch', 'unwatch')) as unknown[][];
    expect(info.map((i) => [i[0], i[1], i[3], i[4], i[5]])).toEqual([
      ['multi', 1, 0, 0, 0], ['exec', 1, 0, 0, 0], ['discard', 1, 0, 0, 0], ['watch', -2, 1, -1, 1], ['unwatch', 1, 0, 0, 0],
    ]);
    expect(info[1][2]).toEqual(['noscript', 'loading', 'stale', 'skip_slowlog']);
    expect(info[3][6]).toEqual(['@fast', '@transaction']);
    const docs = (await redis.call('COMMAND', 'DOCS', 'exec')) as unknown[];
    expect(docs[0]).toBe('exec');
    expect(docs[1]).toContain('Executes all commands in a transaction.');
  });

  it('CLIENT LIST: multi=-1 outside, the number of queued commands inside, flags=x, multi-mem', async () => {
    const c = await RawConnection.open(server.port);
    try {
      await c.write(lines('CLIENT SETNAME txlist', 'MULTI', 'PING', 'ECHO abc'));
      await c.waitForBytes('+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n'.length);
      const line = ((await other.call('CLIENT', 'LIST')) as string).split('\n').find((l) => l.includes('name=txlist'))!;
      expect(line).toMatch(/ flags=x /);
      expect(line).toMatch(/ multi=2 /);
      expect(Number(/ multi-mem=(\d+) /.exec(line)![1])).toBeGreaterThan(0);
      await c.write(lines('DISCARD'));
      await c.waitForBytes('+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n+OK\r\n'.length);
      const after = ((await other.call('CLIENT', 'LIST')) as string).split('\n').find((l) => l.includes('name=txlist'))!;
      expect(after).toMatch(/ flags=N .* multi=-1 .* multi-mem=0 /);
      // Inside EXEC the client is still in MULTI, as Redis shows it.
      await c.write(lines('MULTI', 'CLIENT INFO', 'EXEC'));
      await c.settle(15, 3000, 8);
      expect(c.text()).toMatch(/\*1\r\n\$\d+\r\nid=\d+ .* flags=x .* multi=1 /);
    } finally {
      c.destroy();
    }
  });

  it('commandstats: EXEC counted, queued commands counted when they run, not when queued', async () => {
    await redis.call('CONFIG', 'RESETSTAT');
    const c = await RawConnection.open(server.port);
    try {
      await c.write(lines('MULTI', 'ECHO a', 'ECHO b'));
      await c.waitForBytes('+OK\r\n+QUEUED\r\n+QUEUED\r\n'.length);
      expect(infoField(await redis.info('commandstats'), 'cmdstat_echo')).toBeUndefined();
      await c.write(lines('EXEC'));
      await c.settle(15, 3000, 4);
    } finally {
      c.destroy();
    }
    const stats = await redis.info('commandstats');
    expect(infoField(stats, 'cmdstat_echo')).toMatch(/^calls=2,/);
    expect(infoField(stats, 'cmdstat_exec')).toMatch(/^calls=1,/);
    expect(infoField(stats, 'cmdstat_multi')).toMatch(/^calls=1,/);
  });

  it('OOM while queuing: the command is refused and EXECABORT follows', async () => {
    const c = await RawConnection.open(server.port);
    try {
      await c.write(lines('MULTI'));
      await c.waitForBytes(5);
      await other.call('CL.THROTTLE', 'tx:oom', '5', '10', '60');
      await other.config('SET', 'maxmemory-policy', 'noeviction');
      await other.config('SET', 'maxmemory', await leastMaxmemory(other));
      await c.write(lines('PING', 'EXEC'));
      await c.settle(15, 3000, 3);
      expect(c.text()).toBe("+OK\r\n-OOM command not allowed when used memory > 'maxmemory'.\r\n-EXECABORT Transaction discarded because of previous errors.\r\n");
    } finally {
      c.destroy();
      await other.config('SET', 'maxmemory', '0');
      await other.config('SET', 'maxmemory-policy', 'volatile-ttl');
    }
  });

  it('OOM at EXEC of a queue holding a denyoom command (CL.THROTTLE): EXECABORT with the reason, nothing ran', async () => {
    const c = await RawConnection.open(server.port);
    try {
      await c.write(lines('MULTI', 'CL.THROTTLE tx:oomexec 5 10 60'));
      await c.waitForBytes('+OK\r\n+QUEUED\r\n'.length);
      await other.call('CL.THROTTLE', 'tx:oom', '5', '10', '60');
      await other.config('SET', 'maxmemory-policy', 'noeviction');
      await other.config('SET', 'maxmemory', await leastMaxmemory(other));
      await c.write(lines('EXEC', 'EXEC'));
      await c.settle(15, 3000, 4);
      expect(c.text()).toBe(
        "+OK\r\n+QUEUED\r\n-EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.\r\n-ERR EXEC without MULTI\r\n",
      );
    } finally {
      c.destroy();
      await other.config('SET', 'maxmemory', '0');
      await other.config('SET', 'maxmemory-policy', 'volatile-ttl');
    }
    expect(await redis.exists('tx:oomexec')).toBe(0);
  });

  it('a MULTI that queues 100,000 commands without EXEC is closed at client-query-buffer-limit; nothing ran', async () => {
    await redis.config('SET', 'client-query-buffer-limit', '1mb');
    const before = Number(infoField(await redis.info('stats'), 'client_query_buffer_limit_disconnections'));
    const c = await RawConnection.open(server.port);
    try {
      const one = mbulk('CL.THROTTLE', 'tx:flood', '5', '10', '60');
      await c.write(lines('MULTI'));
      await c.waitForBytes(5);
      for (let sent = 0; sent < 100_000 && !c.ended; sent += 1000) await c.write(Buffer.concat(Array(1000).fill(one)));
      await c.waitForClose(10_000);
    } finally {
      c.destroy();
      await redis.config('SET', 'client-query-buffer-limit', '1gb');
    }
    expect(Number(infoField(await redis.info('stats'), 'client_query_buffer_limit_disconnections'))).toBe(before + 1);
    expect(await redis.exists('tx:flood')).toBe(0);
    expect(await redis.ping()).toBe('PONG');
  });
});
