/**
 * Concurrency leases on the shared backend: three cellgate sidecars on one redis-server and on a
 * Redis Cluster (3 masters), real processes. Exact under contention (bursts from every sidecar grant
 * exactly `limit`; a churn of acquire/release never holds more than `limit` at once); a lease taken
 * through one sidecar is renewed and released through the others; expiry follows the clock the
 * calls carry (DEBUG CLOCK, as the rate limits' tests); a WAIT is woken by a release through another
 * sidecar; kill -9 of a sidecar holding leases leaves them to end, and nothing else is lost.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keySlot, RedisCluster, RedisNode, stopAllRedis } from '../helpers/redis.js';
import { backendInfo, burst, freezeClocks, frozenInstant, pollUntil, startSidecars, stopSidecars, type Sidecar } from './helpers.js';

const PREFIX = 'cellgate:';
const T0 = frozenInstant();
const TIMEOUT_MS = '10000';

interface Backend {
  url: string;
  /** `n` key names per master (one group on a standalone). */
  keys(base: string, n: number): Promise<string[]>;
  destroy(): Promise<void>;
}

async function standalone(): Promise<Backend> {
  const node = await RedisNode.start();
  return { url: node.url, keys: async (base, n) => Array.from({ length: 3 * n }, (_, i) => `${base}${i}`), destroy: () => node.destroy() };
}

async function cluster(): Promise<Backend> {
  const c = await RedisCluster.start();
  return { url: c.url, keys: async (base, n) => (await c.keysPerMaster(base, n, PREFIX)).flatMap((g) => g.keys), destroy: () => c.destroy() };
}

const acquire = (s: Sidecar, key: string, limit: number, leaseMs: number, ...rest: string[]) =>
  s.admin.call('RL.ACQUIRE', key, String(limit), String(leaseMs), ...rest) as Promise<(number | string | null)[]>;

afterAll(async () => {
  await stopAllRedis();
});

for (const make of [standalone, cluster]) {
  const kind = make === standalone ? 'standalone' : 'cluster';
  describe(`leases on a ${kind} backend, three sidecars`, () => {
    let backend: Backend;
    let sidecars: Sidecar[] = [];

    beforeAll(async () => {
      backend = await make();
      sidecars = await startSidecars(3, backend.url, { conns: 3, args: ['--backend-timeout', TIMEOUT_MS] });
    }, 90_000);

    afterAll(async () => {
      for (const s of sidecars) {
        if (s.server.proc.exitCode !== null || s.server.proc.signalCode !== null) continue;
        const info = await backendInfo(s);
        // Every decision was the backend's.
        expect(info.backend_policy_decisions).toBe('0');
      }
      await stopSidecars(sidecars);
      await backend?.destroy();
    });

    it('a burst of 90 ACQUIREs through 3 sidecars grants exactly `limit` per key, each id once; released through other sidecars, the key is gone', async () => {
      await freezeClocks(sidecars, T0);
      const keys = await backend.keys('burst:', 2);
      for (const key of keys) {
        const replies = (await burst(sidecars, (k) => ['RL.ACQUIRE', k, '5', '60000'], key, 10));
        for (const r of replies) if (r.reply instanceof Error) throw r.reply;
        const granted = replies.filter((r) => (r.reply as unknown[])[0] === 0);
        expect(granted.length, key).toBe(5);
        const ids = granted.map((r) => String((r.reply as unknown[])[6]));
        expect(new Set(ids).size).toBe(5);
        expect(granted.map((r) => (r.reply as number[])[2]).sort()).toEqual([0, 1, 2, 3, 4]);
        for (const r of replies.filter((x) => (x.reply as unknown[])[0] === 1)) expect(r.reply).toEqual([1, 5, 0, 60000, 60000, 0, null]);
        expect(await sidecars[1].admin.call('TYPE', key)).toBe('concurrency');
        // Each released through the next sidecar.
        for (const g of granted) expect(await sidecars[(g.sidecar + 1) % 3].admin.call('RL.RELEASE', key, String((g.reply as unknown[])[6]))).toBe(1);
        expect(await sidecars[2].admin.call('EXISTS', key)).toBe(0);
      }
    });

    it('a churn of acquire/release from 3 sidecars never holds more than the limit at once', async () => {
      await freezeClocks(sidecars, T0);
      const [key] = await backend.keys('churn:', 1);
      const limit = 3;
      let held = 0;
      let maxHeld = 0;
      let grants = 0;
      let refusals = 0;
      const worker = async (s: Sidecar, c: number): Promise<void> => {
        const conn = s.conns[c];
        for (let i = 0; i < 60; i++) {
          const r = (await conn.call('RL.ACQUIRE', key, String(limit), '60000')) as unknown[];
          if (r[0] !== 0) { refusals++; continue; }
          grants++;
          held++;
          maxHeld = Math.max(maxHeld, held);
          await new Promise((resolve) => setImmediate(resolve));
          held--; // counted as given back before the release is sent: the backend holds it at least as long
          expect(await conn.call('RL.RELEASE', key, String(r[6]))).toBe(1);
        }
      };
      await Promise.all(sidecars.flatMap((s) => s.conns.map((_, c) => worker(s, c))));
      expect(maxHeld).toBeLessThanOrEqual(limit);
      expect(grants).toBeGreaterThan(0);
      expect(refusals).toBeGreaterThan(0); // there was contention: 9 connections on 3 slots
      expect(await sidecars[0].admin.call('EXISTS', key)).toBe(0);
    });

    it('RENEW through another sidecar extends the lease on every sidecar; it ends at the exact instant', async () => {
      await freezeClocks(sidecars, T0);
      const [key] = await backend.keys('renew:', 1);
      const a = await acquire(sidecars[0], key, 1, 1000, 'ID', 'lease-a');
      expect(a).toEqual([0, 1, 0, -1, 1000, 0, 'lease-a']);
      expect(await sidecars[1].admin.call('RL.RENEW', key, 'lease-a', '5000')).toBe(1);
      await freezeClocks(sidecars, T0 + 4999);
      expect(await acquire(sidecars[2], key, 1, 1000)).toEqual([1, 1, 0, 1, 1, 0, null]);
      await freezeClocks(sidecars, T0 + 5000);
      const b = await acquire(sidecars[2], key, 1, 1000);
      expect(b[0]).toBe(0);
      expect(await sidecars[0].admin.call('RL.RENEW', key, 'lease-a', '5000')).toBe(0);
      expect(await sidecars[0].admin.call('RL.RELEASE', key, 'lease-a')).toBe(0);
      expect(await sidecars[1].admin.call('RL.RELEASE', key, String(b[6]))).toBe(1);
    });

    it('a WAIT through one sidecar is woken by a release through another', async () => {
      await freezeClocks(sidecars, T0);
      const [key] = await backend.keys('wait:', 1);
      const held = await acquire(sidecars[0], key, 1, 600_000);
      expect(held[0]).toBe(0);
      const waiting = sidecars[1].conns[0].call('RL.ACQUIRE', key, '1', '600000', 'WAIT', '60000') as Promise<unknown[]>;
      let answered = false;
      void waiting.then(() => { answered = true; });
      // The waiter is parked (its first attempt refused) before the slot frees.
      await pollUntil(async () => Number(/blocked_clients:(\d+)/.exec(String(await sidecars[1].admin.call('INFO', 'clients')))?.[1] ?? 0) >= 1, 'the waiter blocked');
      expect(answered).toBe(false);
      expect(await sidecars[2].admin.call('RL.RELEASE', key, String(held[6]))).toBe(1);
      const got = await waiting;
      expect(got[0]).toBe(0);
      expect(await sidecars[0].admin.call('RL.RELEASE', key, String(got[6]))).toBe(1);
    });

    it('kill -9 of a sidecar holding leases: they end at their expiry; the other sidecars\' leases and limits are intact', async () => {
      await freezeClocks(sidecars, T0);
      const [key, other] = await backend.keys('crash:', 1);
      const victim = sidecars[0];
      for (const id of ['v1', 'v2']) expect((await acquire(victim, key, 3, 3000, 'ID', id))[0]).toBe(0);
      const mine = await acquire(sidecars[1], key, 3, 600_000, 'ID', 'survivor');
      expect(mine[0]).toBe(0);
      expect((await acquire(sidecars[1], other, 1, 600_000, 'ID', 'o'))[0]).toBe(0);
      expect((await sidecars[1].admin.call('RL.FIXEDWINDOW', `{${key}}:rate`, '10', '600000') as number[]).slice(0, 3)).toEqual([0, 10, 9]);
      victim.server.proc.kill('SIGKILL');
      await new Promise((resolve) => victim.server.proc.once('exit', resolve));
      const rest = sidecars.slice(1);
      // Full: the dead sidecar's two leases are live until T0 + 3000.
      expect(await acquire(rest[0], key, 3, 1000)).toEqual([1, 3, 0, 3000, 600000, 0, null]);
      await freezeClocks(rest, T0 + 3000);
      const after = await acquire(rest[1], key, 3, 1000);
      expect(after.slice(0, 3)).toEqual([0, 3, 1]);
      // Nothing else lost: the survivor's lease, the other key's, the rate limit's count.
      expect(await rest[0].admin.call('RL.RENEW', key, 'survivor', '600000')).toBe(1);
      expect(await rest[1].admin.call('RL.RENEW', other, 'o', '600000')).toBe(1);
      expect((await rest[0].admin.call('RL.FIXEDWINDOW', `{${key}}:rate`, '10', '600000') as number[])[2]).toBe(8);
      sidecars = rest;
    });
  });
}

describe('hostile values on the backend', () => {
  let node: RedisNode;
  let sidecars: Sidecar[] = [];

  beforeAll(async () => {
    node = await RedisNode.start();
    sidecars = await startSidecars(1, node.url, { conns: 1, args: ['--backend-timeout', TIMEOUT_MS] });
  }, 60_000);

  afterAll(async () => {
    await stopSidecars(sidecars);
    await node?.destroy();
  });

  it('a lease call on a rate limit\'s key is WRONGTYPE and leaves it as it was (RELEASE reads it with GETDEL and puts it back)', async () => {
    const [s] = sidecars;
    const first = await s.admin.call('RL.FIXEDWINDOW', 'rate:k', '10', '600000') as number[];
    const pttl = Number(await node.call('PTTL', `${PREFIX}rate:k`));
    for (const argv of [['RL.ACQUIRE', 'rate:k', '2', '1000'], ['RL.RELEASE', 'rate:k', 'x'], ['RL.RENEW', 'rate:k', 'x', '1000']]) {
      await expect(s.admin.call(argv[0], ...argv.slice(1))).rejects.toThrow(/WRONGTYPE/);
    }
    expect(Number(await node.call('PTTL', `${PREFIX}rate:k`))).toBeGreaterThan(pttl - 60_000);
    expect((await s.admin.call('RL.FIXEDWINDOW', 'rate:k', '10', '600000') as number[])[2]).toBe(first[2] - 1);
    // A block (RL.BLOCK) refuses an ACQUIRE until it ends; RELEASE and RENEW answer 0 and keep it.
    await s.admin.call('RL.BLOCK', 'blocked:k', '60000');
    expect((await s.admin.call('RL.ACQUIRE', 'blocked:k', '2', '1000') as unknown[]).slice(0, 3)).toEqual([1, 2, 0]);
    expect(await s.admin.call('RL.RELEASE', 'blocked:k', 'x')).toBe(0);
    expect(await s.admin.call('TYPE', 'blocked:k')).toBe('block');
  });

  it('a malformed lease value (counts and lengths that lie) is WRONGTYPE, never a script error; the sidecar serves on', async () => {
    const [s] = sidecars;
    const header = (n: number) => {
      const b = Buffer.alloc(34);
      b[0] = 198;
      b[1] = 8;
      b.writeDoubleLE(Date.now() + 600_000, 2);
      b.writeDoubleLE(n, 10);
      return b;
    };
    const entry = (len: number, id: string) => Buffer.concat([Buffer.from(new Float64Array([Date.now() + 600_000]).buffer), Buffer.from([len]), Buffer.from(id)]);
    const bad = [
      Buffer.concat([header(3), entry(1, 'a')]), // fewer entries than counted
      Buffer.concat([header(1), entry(200, 'a')]), // an id longer than the value
      Buffer.concat([header(1), entry(1, 'a'), Buffer.from('junk')]), // bytes after the last entry
      Buffer.concat([header(1e9), entry(1, 'a')]), // a count past the largest limit
      Buffer.concat([header(0.5), entry(1, 'a')]), // not an integer
    ];
    for (const [i, v] of bad.entries()) {
      const client = new (await import('ioredis')).Redis({ port: Number(new URL(node.url).port), host: '127.0.0.1' });
      await client.set(`${PREFIX}bad:${i}`, v);
      client.disconnect();
      for (const argv of [['RL.ACQUIRE', `bad:${i}`, '5', '1000'], ['RL.RENEW', `bad:${i}`, 'a', '1000'], ['RL.RELEASE', `bad:${i}`, 'a']]) {
        await expect(s.admin.call(argv[0], ...argv.slice(1)), `${i} ${argv[0]}`).rejects.toThrow(/WRONGTYPE/);
      }
      expect(await s.admin.call('EXISTS', `bad:${i}`)).toBe(1); // put back by the RELEASE
    }
    expect((await s.admin.call('RL.ACQUIRE', 'good', '1', '1000') as unknown[])[0]).toBe(0);
    expect((await backendInfo(s)).backend_errors).toBe('0');
  });
});

describe('leases while the backend is down: backend-unavailable answers', () => {
  it('deny refuses, allow grants without state, local decides on the sidecar; the backend decides again once it is back', async () => {
    const node = await RedisNode.start();
    const [s] = await startSidecars(1, node.url, { conns: 0, args: ['--backend-timeout', '500'] });
    try {
      expect((await acquire(s, 'down:k', 1, 60_000, 'ID', 'on-backend'))[0]).toBe(0);
      await node.stop();
      await pollUntil(async () => (await backendInfo(s)).backend_state === 'down', 'backend down');
      await s.admin.call('CONFIG', 'SET', 'backend-unavailable', 'deny');
      expect(await acquire(s, 'down:k', 1, 60_000)).toEqual([1, 1, 0, 1000, 1000, 0, null]);
      expect(await s.admin.call('RL.RELEASE', 'down:k', 'on-backend')).toBe(0);
      await s.admin.call('CONFIG', 'SET', 'backend-unavailable', 'allow');
      const allowed = await acquire(s, 'down:k', 1, 60_000);
      expect(allowed.slice(0, 5)).toEqual([0, 1, 0, -1, 60_000]);
      expect(await s.admin.call('RL.RENEW', 'down:k', 'anything', '1000')).toBe(1);
      await s.admin.call('CONFIG', 'SET', 'backend-unavailable', 'local');
      expect((await acquire(s, 'down:k', 1, 60_000, 'ID', 'local-1'))[0]).toBe(0);
      expect((await acquire(s, 'down:k', 1, 60_000))[0]).toBe(1); // this sidecar's own count
      expect(Number((await backendInfo(s)).backend_policy_decisions)).toBeGreaterThanOrEqual(6);
      await node.restart();
      await pollUntil(async () => (await backendInfo(s)).backend_state === 'up', 'backend up');
      // The backend decides again (its restart without persistence emptied it: the slot is free).
      const back = await acquire(s, 'down:k', 1, 60_000);
      expect(back[0]).toBe(0);
    } finally {
      await stopSidecars([s]);
      await node.destroy();
    }
  }, 90_000);
});

describe('a lease key whose Cluster slot moved', () => {
  it('is sent again on its own by its slot (the batch of one) and decided on its new master; the rest of its batch once', async () => {
    const c = await RedisCluster.start();
    const [s] = await startSidecars(1, c.url, { conns: 1, args: ['--backend-timeout', TIMEOUT_MS] });
    try {
      await freezeClocks([s], T0);
      const masters = await c.masters();
      const topology = await c.topology();
      const idOf = (n: RedisNode) => topology.find((t) => t.port === n.port)!.id;
      const [{ master: from, keys }] = (await c.keysPerMaster('lmove', 4, PREFIX)).filter((m) => m.master.port === masters[0].port);
      const moved = PREFIX + keys[0];
      const to = masters[1];
      // The other keys once, so the sidecar's slot map is current for them.
      for (const k of keys.slice(1)) expect((await acquire(s, k, 2, 60_000))[0]).toBe(0);
      const slot = keySlot(moved);
      expect(await from.call('CLUSTER', 'COUNTKEYSINSLOT', String(slot))).toBe(0);
      await to.call('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', idOf(from));
      await from.call('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', idOf(to));
      await to.call('CLUSTER', 'SETSLOT', String(slot), 'NODE', idOf(to));
      await from.call('CLUSTER', 'SETSLOT', String(slot), 'NODE', idOf(to));
      for (const m of masters.slice(2)) await m.call('CLUSTER', 'SETSLOT', String(slot), 'NODE', idOf(to));
      const before = await backendInfo(s);
      const p = s.conns[0].pipeline();
      for (const k of keys) p.call('RL.ACQUIRE', k, '2', '60000', 'ID', 'second');
      const replies = ((await p.exec()) ?? []).map(([e, v]) => (e ? (e as Error).message : v)) as unknown[][];
      expect(replies.map((r) => r.slice(0, 3))).toEqual([[0, 2, 1], [0, 2, 0], [0, 2, 0], [0, 2, 0]]);
      expect(await to.call('EXISTS', moved)).toBe(1);
      expect(await s.conns[0].call('RL.RELEASE', keys[0], 'second')).toBe(1);
      expect(await to.call('EXISTS', moved)).toBe(0);
      const after = await backendInfo(s);
      expect(after.backend_policy_decisions, JSON.stringify([before, after])).toBe(before.backend_policy_decisions);
    } finally {
      await stopSidecars([s]);
      await c.destroy();
    }
  }, 120_000);
});
