/**
 * The backend mode's plumbing, against a real redis-server and a real cellgate: replies that come
 * after a backend call keep their place among a connection's other replies (pipelines, MULTI/EXEC,
 * QUIT, HELLO switching protocol, more calls in flight than a client may have), the refusal cache,
 * the settings, INFO backend and /readyz, the cluster slot function.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startServer, freePort, type RunningServer } from '../helpers/server.js';
import { RawConnection, mbulk, parseReplies, type Reply } from '../helpers/raw.js';
import { randomFreePort } from '../helpers/ports.js';
import { RedisNode, useRedis } from '../helpers/redis.js';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { keySlot } from '../../src/backend/key-slot.js';
import { parseBackendUrl } from '../../src/backend/backend-url.js';
import { errorOf } from '../helpers/replies.js';
import { waitFor } from '../helpers/wait.js';

const redis = useRedis();
let sidecar: RunningServer;
let client: Redis;

function info(text: string, field: string): string | undefined {
  return new RegExp(`^${field}:(.*)$`, 'm').exec(text)?.[1]?.trim();
}

beforeAll(async () => {
  // A generous timeout: on a loaded 2-core machine these tests are about order, not about speed.
  sidecar = await startServer({ args: ['--backend', redis.node.url, '--backend-timeout', '5000'] });
  client = new Redis({ port: sidecar.port, host: '127.0.0.1', protocol: 2, maxRetriesPerRequest: 0 });
  await waitFor(async () => info(String(await client.info('backend')), 'backend_state') === 'up', 'backend_state up');
});

afterAll(async () => {
  client?.disconnect();
  await sidecar?.stop();
});

/** Sends `commands` in one write on a new connection and returns the first `count` replies. */
async function pipeline(commands: Buffer[], count: number): Promise<{ replies: Reply[]; conn: RawConnection }> {
  const conn = await RawConnection.open(sidecar.port);
  await conn.write(Buffer.concat(commands));
  let replies: Reply[] = [];
  await conn.waitFor(() => {
    replies = parseReplies(conn.received).replies;
    return replies.length >= count;
  }, 20_000, `${count} replies`);
  return { replies, conn };
}

describe('deferred replies keep their order', () => {
  it('a pipeline mixing backend calls and local commands', async () => {
    await client.del('order:a', 'order:b');
    const { replies, conn } = await pipeline([
      mbulk('PING'),
      mbulk('CL.THROTTLE', 'order:a', '1', '1', '60'),
      mbulk('ECHO', 'between'),
      mbulk('RL.TOKENBUCKET', 'order:b', '1', '60000'),
      mbulk('EXISTS', 'order:a', 'order:b', 'order:none'),
      mbulk('CL.THROTTLE', 'order:a', '1', '1', '60'),
      mbulk('CL.THROTTLE', 'order:a', '1', '1', '60'),
      mbulk('ECHO', 'last'),
    ], 8);
    conn.destroy();
    expect(replies).toEqual([
      'PONG',
      [0, 2, 1, -1, 60],
      'between',
      [0, 1, 0, -1, 60000, 0],
      2,
      [0, 2, 0, -1, 120],
      [1, 2, 0, 60, 120],
      'last',
    ]);
  });

  it('3,000 pipelined calls on one connection (more than may be in flight at once) all answered in order', async () => {
    await client.del('order:many');
    const commands: Buffer[] = [];
    for (let i = 0; i < 3000; i++) {
      commands.push(mbulk('RL.FIXEDWINDOW', 'order:many', '1000', '600000'));
      commands.push(mbulk('ECHO', String(i)));
    }
    const { replies, conn } = await pipeline(commands, 6000);
    conn.destroy();
    let allowed = 0;
    for (let i = 0; i < 3000; i++) {
      const r = replies[2 * i] as number[];
      expect(replies[2 * i + 1]).toBe(String(i));
      if (r[0] === 0) allowed++;
      expect(r[2]).toBe(Math.max(0, 1000 - Math.min(i + 1, 1000)));
    }
    expect(allowed).toBe(1000);
  });

  it('MULTI/EXEC holding backend calls answers one array, in order', async () => {
    await client.del('tx:a', '{tx}:s', '{tx}:h');
    const { replies, conn } = await pipeline([
      mbulk('MULTI'),
      mbulk('CL.THROTTLE', 'tx:a', '0', '1', '60'),
      mbulk('PING'),
      mbulk('RL.ALL', '2', '{tx}:s', 'FIXEDWINDOW', '5', '60000', '{tx}:h', 'FIXEDWINDOW', '1', '60000'),
      mbulk('EXEC'),
      mbulk('ECHO', 'after'),
    ], 6);
    conn.destroy();
    expect(replies.slice(0, 4)).toEqual(['OK', 'QUEUED', 'QUEUED', 'QUEUED']);
    expect(replies[4]).toEqual([
      [0, 1, 0, -1, 60],
      'PONG',
      // Fixed windows end at multiples of period_ms: the reset depends on the time.
      [0, [0, 5, 4, -1, expect.any(Number), 0], [0, 1, 0, -1, expect.any(Number), 0]],
    ]);
    expect(replies[5]).toBe('after');
  });

  it('QUIT after backend calls: their replies, then +OK, then the close', async () => {
    await client.del('quit:a');
    const { replies, conn } = await pipeline([
      mbulk('CL.THROTTLE', 'quit:a', '5', '1', '60'),
      mbulk('CL.THROTTLE', 'quit:a', '5', '1', '60'),
      mbulk('QUIT'),
    ], 3);
    await conn.waitForClose(10_000);
    expect(replies).toEqual([[0, 6, 5, -1, 60], [0, 6, 4, -1, 120], 'OK']);
  });

  it('HELLO 3 after a backend call: that reply in RESP2, the next in RESP3', async () => {
    await client.del('hello:a');
    const conn = await RawConnection.open(sidecar.port);
    await conn.write(Buffer.concat([
      mbulk('RL.SLIDINGLOG', 'hello:a', '3', '60000'),
      mbulk('HELLO', '3'),
      mbulk('RL.SLIDINGLOG', 'hello:a', '3', '60000'),
    ]));
    await conn.waitFor(() => conn.text().includes('%6\r\n'), 10_000, 'the RESP3 map');
    await conn.settle();
    const text = conn.text();
    conn.destroy();
    expect(text.startsWith('*6\r\n:0\r\n:3\r\n:2\r\n:-1\r\n:60000\r\n:0\r\n')).toBe(true);
    expect(text).toMatch(/%6\r\n\$7\r\nlimited\r\n:0\r\n\$5\r\nlimit\r\n:3\r\n\$9\r\nremaining\r\n:1\r\n/);
  });

  it('a client that goes away with calls in flight: the others are served', async () => {
    const conn = await RawConnection.open(sidecar.port);
    const commands: Buffer[] = [];
    for (let i = 0; i < 500; i++) commands.push(mbulk('CL.THROTTLE', `gone:${i}`, '1', '1', '60'));
    await conn.write(Buffer.concat(commands));
    conn.destroy();
    expect(await client.ping()).toBe('PONG');
    expect(await client.call('CL.THROTTLE', 'gone:check', '1', '1', '60')).toEqual([0, 2, 1, -1, 60]);
  });
});

describe('the refusal cache', () => {
  it('answers a repeated refusal locally, asks the backend for a smaller cost, and forgets on DEL', async () => {
    await client.del('cache:a');
    const hits = async () => Number(info(String(await client.info('backend')), 'backend_cache_hits'));
    const calls = async () => Number(info(String(await client.info('backend')), 'backend_calls'));
    expect(await client.call('RL.TOKENBUCKET', 'cache:a', '2', '600000', 'COST', '2')).toEqual([0, 2, 0, -1, 600000, 0]);
    const refused = (await client.call('RL.TOKENBUCKET', 'cache:a', '2', '600000', 'COST', '2')) as number[];
    expect(refused.slice(0, 3)).toEqual([1, 2, 0]);
    const [h0, c0] = [await hits(), await calls()];
    // The same call and a larger cost: from the cache, no backend call.
    const again = (await client.call('RL.TOKENBUCKET', 'cache:a', '2', '600000', 'COST', '2')) as number[];
    expect(again[0]).toBe(1);
    expect(again[3]).toBeGreaterThan(0);
    expect(again[3]).toBeLessThanOrEqual(refused[3]);
    expect(((await client.call('RL.TOKENBUCKET', 'cache:a', '2', '600000', 'COST', '3')) as number[])[0]).toBe(1);
    expect(await hits()).toBe(h0 + 2);
    expect(await calls()).toBe(c0);
    // A smaller cost, or other parameters: the backend decides.
    expect(((await client.call('RL.TOKENBUCKET', 'cache:a', '2', '600000', 'COST', '1')) as number[])[0]).toBe(1);
    expect(await calls()).toBe(c0 + 1);
    expect(await hits()).toBe(h0 + 2);
    // DEL resets the key, the cache included.
    expect(await client.del('cache:a')).toBe(1);
    expect(await client.call('RL.TOKENBUCKET', 'cache:a', '2', '600000', 'COST', '2')).toEqual([0, 2, 0, -1, 600000, 0]);
  });
});

describe('keyspace commands see only the prefixed keys', () => {
  it('DBSIZE, KEYS, SCAN, TYPE, PTTL', async () => {
    await client.call('FLUSHDB');
    const direct = new Redis({ port: redis.node.port, host: '127.0.0.1', protocol: 2, maxRetriesPerRequest: 0 });
    try {
      await direct.set('not-ours', 'x');
      await client.call('CL.THROTTLE', 'ks:gcra', '5', '1', '60');
      await client.call('RL.SLIDINGWINDOW', 'ks:sw', '5', '60000');
      expect(await client.dbsize()).toBe(2);
      expect((await client.keys('*')).sort()).toEqual(['ks:gcra', 'ks:sw']);
      expect(await client.keys('ks:g*')).toEqual(['ks:gcra']);
      const seen: string[] = [];
      let cursor = '0';
      do {
        const [next, keys] = await client.scan(cursor, 'COUNT', 1);
        seen.push(...keys);
        cursor = next;
      } while (cursor !== '0');
      // SCAN may return a key more than once (Redis's guarantee, while its table rehashes): as a set.
      expect([...new Set(seen)].sort()).toEqual(['ks:gcra', 'ks:sw']);
      expect(await client.call('SCAN', '0', 'TYPE', 'slidingwindow', 'COUNT', '100')).toEqual(['0', ['ks:sw']]);
      expect(await client.type('ks:gcra')).toBe('gcra');
      expect(await client.type('ks:none')).toBe('none');
      expect(await client.pttl('ks:gcra')).toBeGreaterThan(9000);
      expect(await client.exists('not-ours')).toBe(0);
      expect(await direct.pttl('cellgate:ks:gcra')).toBeGreaterThan(9000);
      await client.call('FLUSHDB');
      expect(await client.dbsize()).toBe(0);
      expect(await direct.get('not-ours')).toBe('x');
    } finally {
      direct.disconnect();
    }
  });
});

describe('settings, INFO, /readyz', () => {
  it('backend and backend-prefix are fixed at start; timeout and policy change at runtime', async () => {
    expect(await errorOf(client.call('CONFIG', 'SET', 'backend', 'redis://127.0.0.1:1'))).toMatch(/can't set immutable config|protected/i);
    expect(await client.call('CONFIG', 'SET', 'backend-timeout', '4000')).toBe('OK');
    expect(await client.call('CONFIG', 'SET', 'backend-unavailable', 'deny')).toBe('OK');
    const text = String(await client.info('backend'));
    expect(info(text, 'backend_timeout_ms')).toBe('4000');
    expect(info(text, 'backend_unavailable')).toBe('deny');
    expect(info(text, 'backend_mode')).toBe('standalone');
    expect(info(text, 'backend_url')).toBe(redis.node.url);
    await client.call('CONFIG', 'SET', 'backend-unavailable', 'local');
    await client.call('CONFIG', 'SET', 'backend-timeout', '5000');
  });

  it('a malformed backend URL stops the start with a clear message', async () => {
    await expect(startServer({ args: ['--backend', 'http://localhost:6379'] })).rejects.toThrow(/expected redis:\/\/, rediss:\/\/, redis-cluster:\/\/, rediss-cluster:\/\/ or redis-sentinel:\/\//);
    await expect(startServer({ args: ['--backend', 'redis://a:1,b:2'] })).rejects.toThrow(/several hosts need redis-cluster/);
  });

  it('an unreachable backend: every call answered by the policy after backend-timeout (deny refuses, local decides here, allow allows), /readyz 503 whatever the policy', async () => {
    const metricsPort = await freePort();
    const lone = await startServer({ args: ['--backend', 'redis://127.0.0.1:1', '--backend-unavailable', 'deny', '--metrics-port', String(metricsPort)] });
    const c = new Redis({ port: lone.port, host: '127.0.0.1', protocol: 2, maxRetriesPerRequest: 0 });
    try {
      expect(await c.call('CL.THROTTLE', 'x', '5', '1', '60')).toEqual([1, 6, 0, 1, 1]);
      expect(await c.call('RL.LEAKYBUCKET', 'x', '5', '1000')).toEqual([1, 5, 0, 1000, 1000, 0]);
      let res = await fetch(`http://127.0.0.1:${metricsPort}/readyz`);
      expect(res.status).toBe(503);
      expect(await res.text()).toMatch(/backend not reached yet/);
      const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      expect(metrics).toMatch(/^cellgate_backend_up 0$/m);
      expect(metrics).toMatch(/^cellgate_backend_policy_decisions_total\{policy="deny"\} 2$/m);
      await c.call('CONFIG', 'SET', 'backend-unavailable', 'local');
      expect(await c.call('CL.THROTTLE', 'x', '0', '1', '60')).toEqual([0, 1, 0, -1, 60]);
      expect(await c.call('CL.THROTTLE', 'x', '0', '1', '60')).toEqual([1, 1, 0, 60, 60]);
      await c.call('CONFIG', 'SET', 'backend-unavailable', 'allow');
      // allow: what a fresh key answers, nothing kept.
      expect(await c.call('CL.THROTTLE', 'y', '0', '1', '60')).toEqual([0, 1, 0, -1, 60]);
      expect(await c.call('CL.THROTTLE', 'y', '0', '1', '60')).toEqual([0, 1, 0, -1, 60]);
      // Never reached since the start: not ready even though allow answers every call.
      res = await fetch(`http://127.0.0.1:${metricsPort}/readyz`);
      expect(res.status).toBe(503);
      expect(await res.text()).toMatch(/^not ready: backend not reached yet \(connecting/);
      expect(await errorOf(c.call('DEL', 'x'))).toMatch(/^ERR backend unavailable/);
    } finally {
      c.disconnect();
      await lone.stop();
    }
  });
});

describe('rediss://', () => {
  it('a TLS backend whose CA is given with NODE_EXTRA_CA_CERTS', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-rediss-'));
    const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'key.pem', '-out', 'cert.pem', '-days', '2',
      '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { cwd: dir, encoding: 'utf8', timeout: 30_000 });
    expect(made.status, made.stderr).toBe(0);
    const tlsPort = await randomFreePort();
    const node = await RedisNode.start({ args: ['--tls-port', String(tlsPort), '--tls-cert-file', join(dir, 'cert.pem'), '--tls-key-file', join(dir, 'key.pem'), '--tls-auth-clients', 'no'] });
    const tlsSidecar = await startServer({ args: ['--backend', `rediss://127.0.0.1:${tlsPort}`, '--backend-timeout', '5000'], env: { NODE_EXTRA_CA_CERTS: join(dir, 'cert.pem') } });
    const c = new Redis({ port: tlsSidecar.port, host: '127.0.0.1', protocol: 2, maxRetriesPerRequest: 0 });
    try {
      for (let i = 0; i < 200 && info(String(await c.info('backend')), 'backend_state') !== 'up'; i++) await new Promise((r) => setTimeout(r, 25));
      expect(await c.call('CL.THROTTLE', 'tls:a', '0', '1', '60')).toEqual([0, 1, 0, -1, 60]);
      expect(await c.call('CL.THROTTLE', 'tls:a', '0', '1', '60')).toEqual([1, 1, 0, 60, 60]);
      expect(Number(info(String(await c.info('backend')), 'backend_policy_decisions'))).toBe(0);
      const direct = new Redis({ port: node.port, host: '127.0.0.1', maxRetriesPerRequest: 0 });
      expect(await direct.exists('cellgate:tls:a')).toBe(1);
      direct.disconnect();
    } finally {
      c.disconnect();
      await tlsSidecar.stop();
      await node.destroy();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('errors in the local order', () => {
  it("GCRA's overflow errors come after the key's type, as locally", async () => {
    await client.del('ord:k', 'ord:fresh');
    await client.call('RL.TOKENBUCKET', 'ord:k', '1', '1000');
    expect(await errorOf(client.call('GCRA', 'ord:k', '1', '1', '1', 'TOKENS', '9223372036854775807'))).toMatch(/^WRONGTYPE/);
    expect(await errorOf(client.call('GCRA', 'ord:fresh', '1', '1', '1', 'TOKENS', '9223372036854775807'))).toMatch(/TOKENS would cause an overflow$/);
    expect(await errorOf(client.call('GCRA', 'ord:fresh', '9223372036854775806', '1', '100000000000'))).toMatch(/max_burst would cause an overflow$/);
  });
});

describe('hostile input', () => {
  it('a key too long for the backend is refused before anything is sent; the connection stays up for everyone', async () => {
    const huge = 'k'.repeat(100 * 1024);
    expect(await errorOf(client.call('CL.THROTTLE', huge, '1', '1', '60'))).toBe('ERR key too long for the backend (at most 65536 bytes)');
    expect(await errorOf(client.call('RL.ALL', '2', 'short', 'TOKENBUCKET', '1', '1000', huge, 'TOKENBUCKET', '1', '1000'))).toMatch(/^ERR key too long/);
    expect(await errorOf(client.call('DEL', 'short', huge))).toMatch(/^ERR key too long/);
    expect(await errorOf(client.call('PTTL', huge))).toMatch(/^ERR key too long/);
    expect(info(String(await client.info('backend')), 'backend_state')).toBe('up');
    expect(await client.call('CL.THROTTLE', 'hostile:ok', '1', '1', '60')).toEqual([0, 2, 1, -1, 60]);
  });
});

describe('helpers', () => {
  // Against a real Cluster's CLUSTER KEYSLOT: test/backend/fixtures.test.ts.
  it('keySlot: CRC16/XMODEM of the key or of its hash tag', () => {
    expect(keySlot(Buffer.from('123456789'))).toBe(0x31c3 % 16384);
    expect(keySlot(Buffer.from('cellgate:{user:42}:s'))).toBe(keySlot(Buffer.from('{user:42}:h')));
  });

  it('parseBackendUrl: credentials, db, cluster seeds, the password never shown', () => {
    const t = parseBackendUrl('redis://app:p%40ss@cache.internal:6380/2');
    expect(t).toMatchObject({ mode: 'standalone', tls: false, username: 'app', password: 'p@ss', db: 2, nodes: [{ host: 'cache.internal', port: 6380 }] });
    expect(t.display).toBe('redis://app:***@cache.internal:6380/2');
    expect(parseBackendUrl('rediss://:secret@h').display).toBe('rediss://:***@h');
    expect(parseBackendUrl('rediss://:secret@h')).toMatchObject({ tls: true, password: 'secret', username: undefined, nodes: [{ host: 'h', port: 6379 }] });
    expect(parseBackendUrl('redis-cluster://a:7000,b:7001,[::1]:7002').nodes).toEqual([{ host: 'a', port: 7000 }, { host: 'b', port: 7001 }, { host: '::1', port: 7002 }]);
    expect(() => parseBackendUrl('redis-cluster://a:7000/1')).toThrow(/only database 0/);
    const sentinel = parseBackendUrl('redis-sentinel://u:p%40ss@s1:26380,s2,[::1]:26381/my%20master/2');
    expect([sentinel.mode, sentinel.masterName, sentinel.db, sentinel.username, sentinel.password, sentinel.display]).toEqual(['sentinel', 'my master', 2, 'u', 'p@ss', 'redis-sentinel://u:***@s1:26380,s2,[::1]:26381/my%20master/2']);
    expect(sentinel.nodes).toEqual([{ host: 's1', port: 26380 }, { host: 's2', port: 26379 }, { host: '::1', port: 26381 }]);
    expect([parseBackendUrl('rediss-cluster://a:7000').mode, parseBackendUrl('rediss-cluster://a:7000').tls]).toEqual(['cluster', true]);
    expect(() => parseBackendUrl('redis-sentinel://s1:26379')).toThrow(/needs the master's name/);
    expect(() => parseBackendUrl('redis-sentinel://s1:26379/m/x')).toThrow(/database 'x' is not a number/);
    expect(() => parseBackendUrl('redis://h:99999')).toThrow(/not host:port/);
    expect(() => parseBackendUrl('redis://:pw@h/x')).toThrow(/^backend 'redis:\/\/:\*\*\*@h\/x'/);
  });
});
