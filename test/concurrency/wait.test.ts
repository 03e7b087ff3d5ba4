/**
 * RL.ACQUIRE ... WAIT, as Redis blocks BLPOP: the connection waits (its later pipelined commands
 * get no reply until then), a slot freed by RELEASE, DEL or a lease ending on the debug clock goes to
 * the waiters first come first served, the timeout answers limited, a disconnected waiter leaves
 * nothing behind, CLIENT UNBLOCK ends a wait, and a flood of waiters from many connections is
 * bounded and all answered.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { useServer } from '../helpers/server.js';
import { waitFor } from '../helpers/wait.js';

const env = useServer();
const T0 = 1_800_000_000_000;
const opened: Redis[] = [];

function connect(): Redis {
  const r = new Redis({ port: env.server.port, host: '127.0.0.1', protocol: 2, maxRetriesPerRequest: 0 });
  opened.push(r);
  return r;
}

afterEach(() => {
  for (const r of opened.splice(0)) r.disconnect();
});

async function info(field: string, section = 'clients'): Promise<number> {
  const text = (await env.redis.info(section)) as string;
  const m = new RegExp(`^${field}:(\\d+)`, 'm').exec(text);
  return Number(m![1]);
}

async function blocked(n: number): Promise<void> {
  await waitFor(async () => (await info('blocked_clients')) === n, `${n} blocked clients`);
}

describe('RL.ACQUIRE ... WAIT', () => {
  it('blocks the connection, its pipelined commands too, until a RELEASE frees a slot', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('RL.ACQUIRE', 'w:1', '1', '60000', 'ID', 'holder');
    const waiter = connect();
    const order: string[] = [];
    const granted = waiter.call('RL.ACQUIRE', 'w:1', '1', '60000', 'ID', 'me', 'WAIT', '0').then((v) => { order.push('acquire'); return v; });
    const ping = waiter.ping().then((v) => { order.push('ping'); return v; });
    await blocked(1);
    expect(order).toEqual([]);
    expect(await r.call('CLIENT', 'LIST')).toMatch(/flags=b /);
    expect(await r.call('RL.RELEASE', 'w:1', 'holder')).toBe(1);
    expect(await granted).toEqual([0, 1, 0, -1, 60000, 0, 'me']);
    expect(await ping).toBe('PONG');
    expect(order).toEqual(['acquire', 'ping']);
    expect(await info('blocked_clients')).toBe(0);
  });

  it('a WAIT that a free slot grants at once answers at once, and the commands pipelined after it run', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    const c = connect();
    const pipe = c.pipeline();
    pipe.call('RL.ACQUIRE', 'w:now', '2', '60000', 'ID', 'a', 'WAIT', '0');
    pipe.ping();
    pipe.call('RL.ACQUIRE', 'w:now', '2', '60000', 'ID', 'b', 'WAIT', '5000');
    pipe.call('RL.ACQUIRE', 'w:now', '2', '60000', 'ID', 'c');
    const replies = (await pipe.exec())!.map(([e, v]) => e ?? v);
    expect(replies).toEqual([[0, 2, 1, -1, 60000, 0, 'a'], 'PONG', [0, 2, 0, -1, 60000, 0, 'b'], [1, 2, 0, 60000, 60000, 0, null]]);
    expect(await info('blocked_clients')).toBe(0);
  });

  it('serves waiters first come first served, before a caller that does not wait', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('RL.ACQUIRE', 'w:2', '1', '60000', 'ID', 'h');
    const got: string[] = [];
    const waits: Promise<unknown>[] = [];
    for (let i = 0; i < 3; i++) {
      const c = connect();
      waits.push(c.call('RL.ACQUIRE', 'w:2', '1', '60000', 'ID', `w${i}`, 'WAIT', '0').then((v) => got.push((v as string[])[6])));
      await blocked(i + 1);
    }
    // A release and a non-waiting ACQUIRE in one pipeline: the head waiter gets the slot.
    const [, [, other]] = (await r.pipeline().call('RL.RELEASE', 'w:2', 'h').call('RL.ACQUIRE', 'w:2', '1', '60000', 'ID', 'jumper').exec())!;
    expect((other as unknown[])[0]).toBe(1);
    await waitFor(() => got.length === 1, 'the first waiter');
    expect(got).toEqual(['w0']);
    await r.call('RL.RELEASE', 'w:2', 'w0');
    await waitFor(() => got.length === 2, 'the second waiter');
    // DEL frees every slot: the last waiter goes.
    await r.del('w:2');
    await Promise.all(waits);
    expect(got).toEqual(['w0', 'w1', 'w2']);
  });

  it('a lease ending on the debug clock wakes the waiter; the timeout answers limited', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('RL.ACQUIRE', 'w:3', '1', '1000', 'ID', 'h');
    const c = connect();
    const counts = async (): Promise<string> => /limiter_rl\.acquire:(\S+)/.exec((await r.info('limiter')) as string)![1];
    const decided = await counts();
    const p = c.call('RL.ACQUIRE', 'w:3', '1', '500', 'ID', 'next', 'WAIT', '0');
    await blocked(1);
    for (let i = 0; i < 9; i++) await r.call('DEBUG', 'CLOCK', 'ADVANCE', '111');
    await r.ping();
    expect(await info('blocked_clients')).toBe(1);
    await r.call('DEBUG', 'CLOCK', 'ADVANCE', '1');
    expect(await p).toEqual([0, 1, 0, -1, 500, 0, 'next']);
    // The wait's attempts are no decisions; its grant is one.
    const [a0, l0] = decided.split(',').map((f) => Number(f.split('=')[1]));
    expect(await counts()).toBe(`allowed=${a0 + 1},limited=${l0}`);
    // Timeout (real time), with the clock frozen: limited, retry when the holder's lease ends.
    const before = await info('lease_waits_timed_out', 'limiter');
    const t = await connect().call('RL.ACQUIRE', 'w:3', '1', '500', 'WAIT', '50');
    expect(t).toEqual([1, 1, 0, 500, 500, 0, null]);
    expect(await info('lease_waits_timed_out', 'limiter')).toBe(before + 1);
  });

  it('on the real clock, a lease that ends by itself wakes the waiter (a timer at retry_after_ms)', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'REAL');
    try {
      await r.call('RL.ACQUIRE', 'w:real', '1', '150', 'ID', 'short');
      // Nothing releases, deletes or moves the clock: only the lease's end can grant this.
      const got = (await connect().call('RL.ACQUIRE', 'w:real', '1', '1000', 'ID', 'next', 'WAIT', '20000')) as unknown[];
      expect(got.slice(0, 2)).toEqual([0, 1]);
      expect(got[6]).toBe('next');
    } finally {
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    }
  });

  it('a waiter that disconnects leaves nothing behind; CLIENT UNBLOCK ends a wait as a timeout or an error', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('RL.ACQUIRE', 'w:4', '1', '60000', 'ID', 'h');
    const gone = connect();
    gone.call('RL.ACQUIRE', 'w:4', '1', '60000', 'ID', 'ghost', 'WAIT', '0').catch(() => undefined);
    await blocked(1);
    gone.disconnect();
    await blocked(0);
    expect(await r.call('RL.RELEASE', 'w:4', 'h')).toBe(1);
    // No lease was taken for the ghost: the key is gone with the last lease.
    expect(await r.exists('w:4')).toBe(0);
    await r.call('RL.ACQUIRE', 'w:4', '1', '60000', 'ID', 'h');
    const c = connect();
    const id = (await c.call('CLIENT', 'ID')) as number;
    const p = c.call('RL.ACQUIRE', 'w:4', '1', '60000', 'WAIT', '0');
    await blocked(1);
    expect(await r.call('CLIENT', 'UNBLOCK', String(id))).toBe(1);
    expect(await p).toEqual([1, 1, 0, 60000, 60000, 0, null]);
    expect(await r.call('CLIENT', 'UNBLOCK', String(id))).toBe(0);
    const q = c.call('RL.ACQUIRE', 'w:4', '1', '60000', 'WAIT', '0').then(() => 'granted', (e: Error) => e.message);
    await blocked(1);
    expect(await r.call('CLIENT', 'UNBLOCK', String(id), 'ERROR')).toBe(1);
    expect(await q).toBe('UNBLOCKED client unblocked via CLIENT UNBLOCK');
    expect(await c.ping()).toBe('PONG');
  });

  it('a waiting client is not idle: the timeout setting closes an idle client, not a blocked one', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('RL.ACQUIRE', 'w:6', '1', '60000', 'ID', 'h');
    const idle = connect();
    const idleId = (await idle.call('CLIENT', 'ID')) as number;
    const waiter = connect();
    const waiterId = (await waiter.call('CLIENT', 'ID')) as number;
    const p = waiter.call('RL.ACQUIRE', 'w:6', '1', '60000', 'ID', 'patient', 'WAIT', '0');
    await blocked(1);
    await r.config('SET', 'timeout', '1');
    try {
      await waitFor(async () => !((await r.call('CLIENT', 'LIST')) as string).includes(`id=${idleId} `), 'the idle client closed');
      expect((await r.call('CLIENT', 'LIST')) as string).toContain(`id=${waiterId} `);
    } finally {
      await r.config('SET', 'timeout', '0');
    }
    await r.call('RL.RELEASE', 'w:6', 'h');
    expect(((await p) as unknown[])[6]).toBe('patient');
  });

  it('a flood of waiters from many connections: each counted in its client memory, all answered', async () => {
    const r = env.redis;
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('RL.ACQUIRE', 'w:5', '5', '60000', 'ID', 'h');
    for (let i = 0; i < 4; i++) await r.call('RL.ACQUIRE', 'w:5', '5', '60000', 'ID', `h${i}`);
    const n = 200;
    const clients = Array.from({ length: n }, () => connect());
    const replies = clients.map((c) => c.call('RL.ACQUIRE', 'w:5', '5', '1000', 'WAIT', '0') as Promise<unknown[]>);
    await blocked(n);
    const list = (await r.call('CLIENT', 'LIST')) as string;
    const blockedLines = list.split('\n').filter((l) => / flags=b /.test(l));
    expect(blockedLines.length).toBe(n);
    // Each waiter's call is in its account: more than a bare idle connection's.
    const idle = Number(/ tot-mem=(\d+)/.exec(list.split('\n').find((l) => / flags=N /.test(l))!)![1]);
    for (const l of blockedLines) expect(Number(/ tot-mem=(\d+)/.exec(l)![1])).toBeGreaterThan(idle);
    // Leases of 1 s on the debug clock: each second frees 5 slots for the next 5 waiters.
    await r.del('w:5');
    for (let round = 0; round < n / 5 + 2 && (await info('blocked_clients')) > 0; round++) {
      await r.call('DEBUG', 'CLOCK', 'ADVANCE', '1000');
      await waitFor(async () => (await info('blocked_clients')) <= Math.max(0, n - 5 * (round + 1)), `round ${round}`);
    }
    const all = await Promise.all(replies);
    expect(all.every((v) => v[0] === 0)).toBe(true);
    expect(new Set(all.map((v) => v[6])).size).toBe(n);
    expect(await info('blocked_clients')).toBe(0);
  });
});
