/**
 * Hostile use of concurrency limits: a million distinct ids on one key (the key stays bounded by its
 * limit), the largest limit with the longest ids (bounded memory, calls still answered), a limit of
 * 2^53 (refused), RENEW storms (no growth), acquire/release churn (the key comes and goes), and a
 * server that keeps serving others throughout.
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { useServer } from '../helpers/server.js';
import { errorOf } from '../helpers/replies.js';

const env = useServer();
const T0 = 1_800_000_000_000;

function command(...args: string[]): string {
  return `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
}

/**
 * Sends `count` commands made by `make(i)` on one raw connection, in chunks, then PING, and
 * resolves with the reply bytes once the PONG has come (every command before it was answered).
 */
function pipeline(port: number, count: number, make: (i: number) => string): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let tail = '';
    let bytes = 0;
    socket.on('data', (d: Buffer) => {
      bytes += d.length;
      tail = (tail + d.toString('latin1')).slice(-16);
      if (tail.endsWith('+PONG\r\n')) {
        socket.destroy();
        resolve(bytes);
      }
    });
    socket.on('error', reject);
    let i = 0;
    const writeMore = (): void => {
      while (i < count) {
        let chunk = '';
        for (let k = 0; k < 2000 && i < count; k++, i++) chunk += make(i);
        if (!socket.write(chunk)) {
          socket.once('drain', writeMore);
          return;
        }
      }
      socket.write(command('PING'));
    };
    socket.on('connect', writeMore);
  });
}

async function limiterCounts(): Promise<{ allowed: number; limited: number }> {
  const text = (await env.redis.info('limiter')) as string;
  const m = /limiter_rl\.acquire:allowed=(\d+),limited=(\d+)/.exec(text);
  return m === null ? { allowed: 0, limited: 0 } : { allowed: Number(m[1]), limited: Number(m[2]) };
}

describe('concurrency limits under hostile use', () => {
  it('a million distinct ids on one key: 4 granted, the rest limited, the key stays the size of 4 leases', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    const before = await limiterCounts();
    const n = 1_000_000;
    await pipeline(env.server.port, n, (i) => command('RL.ACQUIRE', 'h:million', '4', '600000', 'ID', `client-${i}`));
    const after = await limiterCounts();
    expect(after.allowed - before.allowed).toBe(4);
    expect(after.limited - before.limited).toBe(n - 4);
    const usage = (await r.call('MEMORY', 'USAGE', 'h:million')) as number;
    expect(usage).toBeLessThan(1024);
    expect(await r.call('RL.RELEASE', 'h:million', 'client-3')).toBe(1);
    expect(await r.call('RL.RELEASE', 'h:million', `client-${n - 1}`)).toBe(0);
  }, 120_000);

  it('the largest limit with the longest ids: bounded memory, a full key still answered; 2^53 refused', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    const limit = 10_000;
    const id = (i: number): string => `${i}:`.padEnd(64, 'x');
    await pipeline(env.server.port, limit + 10, (i) => command('RL.ACQUIRE', 'h:max', String(limit), '600000', 'ID', id(i)));
    const usage = (await r.call('MEMORY', 'USAGE', 'h:max')) as number;
    // 14 words a lease of a 64-byte id, the blob at most twice what it holds.
    expect(usage).toBeGreaterThan(limit * 14 * 8);
    expect(usage).toBeLessThan(2 * limit * 14 * 8 + 4096);
    expect(await r.call('RL.ACQUIRE', 'h:max', String(limit), '1000')).toEqual([1, limit, 0, 600000, 600000, 0, null]);
    expect(await r.call('RL.RENEW', 'h:max', id(limit - 1), '700000')).toBe(1);
    expect(await r.call('RL.RELEASE', 'h:max', id(0))).toBe(1);
    expect(await errorOf(r.call('RL.ACQUIRE', 'h:max', String(2 ** 53), '1000'))).toMatch(/^ERR invalid limit '9007199254740992': must be <= 10000/);
    expect(await errorOf(r.call('RL.ACQUIRE', 'h:max', '1e20', '1000'))).toMatch(/^ERR invalid limit '1e20': not an integer/);
    expect(await r.del('h:max')).toBe(1);
  }, 60_000);

  it('a RENEW storm on one lease and on unknown ids: all answered, nothing grows', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('RL.ACQUIRE', 'h:renew', '2', '1000', 'ID', 'live');
    const usage = (await r.call('MEMORY', 'USAGE', 'h:renew')) as number;
    await pipeline(env.server.port, 200_000, (i) => (i % 2 === 0 ? command('RL.RENEW', 'h:renew', 'live', String(1000 + (i % 1000))) : command('RL.RENEW', 'h:renew', `ghost-${i}`, '1000')));
    expect(await r.call('MEMORY', 'USAGE', 'h:renew')).toBe(usage);
    expect(await r.pttl('h:renew')).toBe(1000 + (199_998 % 1000));
    expect(await r.call('RL.RENEW', 'h:renew', 'ghost-1', '1000')).toBe(0);
  }, 60_000);

  it('over maxmemory under noeviction: ACQUIRE is refused with -OOM, RELEASE and RENEW still work', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('RL.ACQUIRE', 'h:oom', '3', '60000', 'ID', 'a');
    await r.config('SET', 'maxmemory-policy', 'noeviction');
    // The least the server accepts (what it holds with no key): with a key present it is over it.
    const least = /^used_memory_startup:(\d+)/m.exec((await r.info('memory')) as string)![1];
    await r.config('SET', 'maxmemory', least);
    try {
      expect(await errorOf(r.call('RL.ACQUIRE', 'h:oom', '3', '60000', 'ID', 'b'))).toMatch(/^OOM command not allowed/);
      expect(await r.call('RL.RENEW', 'h:oom', 'a', '1000')).toBe(1);
      expect(await r.call('RL.RELEASE', 'h:oom', 'a')).toBe(1);
    } finally {
      await r.config('SET', 'maxmemory', '0');
      await r.config('SET', 'maxmemory-policy', 'volatile-ttl');
    }
    expect(await r.exists('h:oom')).toBe(0);
  });

  it('acquire/release churn and short leases: keys come and go, none left behind', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    const keysBefore = await r.dbsize();
    await pipeline(env.server.port, 100_000, (i) => (i % 2 === 0
      ? command('RL.ACQUIRE', `h:churn:${(i >> 1) % 100}`, '1', '60000', 'ID', `id-${i >> 1}`)
      : command('RL.RELEASE', `h:churn:${(i >> 1) % 100}`, `id-${i >> 1}`)));
    expect(await r.dbsize()).toBe(keysBefore);
    // Short leases of many ids: the ended ones are dropped before each decision.
    await pipeline(env.server.port, 1000, (i) => command('RL.ACQUIRE', 'h:short', '5', '1', 'ID', `s-${i}`));
    const usage = (await r.call('MEMORY', 'USAGE', 'h:short')) as number;
    await r.call('DEBUG', 'CLOCK', 'ADVANCE', '1');
    for (let round = 0; round < 50; round++) {
      await r.call('RL.ACQUIRE', 'h:short', '5', '1', 'ID', `t-${round}`);
      await r.call('DEBUG', 'CLOCK', 'ADVANCE', '1');
    }
    expect(await r.call('MEMORY', 'USAGE', 'h:short')).toBeLessThanOrEqual(usage);
    // Visible through its expiry instant (the last lease's end), gone after it.
    await r.call('DEBUG', 'CLOCK', 'ADVANCE', '1');
    expect(await r.exists('h:short')).toBe(0);
    expect(await r.ping()).toBe('PONG');
  }, 60_000);
});
