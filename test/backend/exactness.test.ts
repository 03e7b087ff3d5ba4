/**
 * Exactness of the shared backend: three cellgate sidecars on one Redis (and on one Redis Cluster of
 * 3 masters + 3 replicas) allow together exactly what one server allows. Every sidecar's clock is
 * frozen at the same instant (DEBUG CLOCK SET), so nothing refills while a burst runs and the same
 * sequence can be replayed on a single local-mode cellgate for the count to compare with.
 *
 * For every limiter command: many keys spread over all masters, 3 sidecars × 3 connections × 10
 * pipelined calls per key, all at once; then the clocks move 5 s on and the same again. RL.ALL's
 * all-or-nothing across sidecars (nothing spent by a refused call; CROSSSLOT without a hash tag on
 * a cluster). The keyspace commands through any sidecar: DEL resets a key for every sidecar (a
 * cached refusal too), EXISTS/TTL/PTTL/TYPE/SCAN/KEYS/DBSIZE/FLUSHDB see only the prefixed keys.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { keySlot, RedisCluster, RedisNode, stopAllRedis } from '../helpers/redis.js';
import {
  ALGOS, backendInfo, burst, countAllowed, freezeClocks, frozenInstant, limited, pollUntil, startSidecar,
  startSidecars, stopSidecars, type Reply, type Sidecar,
} from './helpers.js';

const PREFIX = 'cellgate:';
const T0 = frozenInstant();
/** 3 sidecars × 3 connections × 10 pipelined calls on each key. */
const PER_CONN = 10;
const KEYS_PER_MASTER = 2;
const BURST_TIMEOUT_MS = 10_000;

/** The single local-mode cellgate every count is compared with. */
let local: Sidecar;

beforeAll(async () => {
  local = await startSidecar('', { conns: 1 });
}, 60_000);

afterAll(async () => {
  await stopSidecars([local]);
  await stopAllRedis();
});

/** The local server's replies to `n` calls of `argv(key)` in one pipeline, at its current clock. */
async function oneServer(argv: string[], n: number): Promise<Reply[]> {
  const pipe = local.conns[0].pipeline();
  for (let i = 0; i < n; i++) pipe.call(argv[0], ...argv.slice(1));
  return (await pipe.exec())!.map(([err, v]) => err ?? v);
}

const sortedJson = (replies: Reply[]): string[] => replies.map((r) => JSON.stringify(r)).sort();
const distinct = (replies: Reply[]): string[] => [...new Set(replies.map((r) => JSON.stringify(r)))].sort();

interface Backend {
  kind: 'standalone' | 'cluster';
  url: string;
  /** Key names spread over all masters (one group per master; one group on a standalone). */
  keyGroups(base: string, prefix?: string, perMaster?: number): Promise<string[][]>;
  /** A direct client to the node that holds `backendKey`. */
  nodeFor(backendKey: string): Promise<RedisNode>;
  destroy(): Promise<void>;
}

async function standaloneBackend(): Promise<Backend> {
  const node = await RedisNode.start();
  return {
    kind: 'standalone',
    url: node.url,
    keyGroups: async (base, _prefix, perMaster = KEYS_PER_MASTER) => [Array.from({ length: 3 * perMaster }, (_, i) => `${base}${i}`)],
    nodeFor: async () => node,
    destroy: () => node.destroy(),
  };
}

async function clusterBackend(): Promise<Backend> {
  const cluster = await RedisCluster.start();
  return {
    kind: 'cluster',
    url: cluster.url,
    keyGroups: async (base, prefix = PREFIX, perMaster = KEYS_PER_MASTER) => (await cluster.keysPerMaster(base, perMaster, prefix)).map((g) => g.keys),
    nodeFor: (k) => cluster.masterFor(k),
    destroy: () => cluster.destroy(),
  };
}

for (const make of [standaloneBackend, clusterBackend]) {
  const kind = make === standaloneBackend ? 'standalone' : 'cluster';
  describe(`exactness on a ${kind} backend, three sidecars`, () => {
    let backend: Backend;
    let sidecars: Sidecar[] = [];
    const all = (): Sidecar[] => [...sidecars, local];

    beforeAll(async () => {
      backend = await make();
      // A generous timeout: these tests are about the decisions, not about a loaded machine's latency
      // (a call past the timeout would be decided by the local policy; the counters are checked).
      sidecars = await startSidecars(3, backend.url, { conns: 3, args: ['--backend-timeout', String(BURST_TIMEOUT_MS)] });
      for (const s of sidecars) expect((await backendInfo(s)).backend_mode).toBe(kind);
    }, 90_000);

    afterAll(async () => {
      // Every decision was the backend's: no call timed out or was answered by the policy.
      for (const s of sidecars) {
        const info = await backendInfo(s);
        console.log(`exactness ${kind} sidecar :${s.server.port}: calls ${info.backend_calls}, timeouts ${info.backend_timeouts}, errors ${info.backend_errors}, policy decisions ${info.backend_policy_decisions}, cache hits ${info.backend_cache_hits}, invalidations ${info.backend_invalidations_received}`);
      }
      await stopSidecars(sidecars);
      await backend?.destroy();
    });

    it('the seeds\' scenario: three gateways, 10 requests per 10 s, 30 attempts → exactly 10 allowed', async () => {
      await freezeClocks(all(), T0);
      const replies = await Promise.all(sidecars.map(async (s) => {
        const pipe = s.conns[0].pipeline();
        for (let i = 0; i < 10; i++) pipe.call('RL.FIXEDWINDOW', 'seeds:api', '10', '10000');
        return (await pipe.exec())!.map(([err, v]) => err ?? v);
      }));
      expect(countAllowed(replies.flat())).toBe(10);
    });

    for (const algo of ALGOS) {
      it(`${algo.name}: a burst through 3 sidecars allows exactly what one server allows, twice (at T and T + 5 s)`, async () => {
        const groups = await backend.keyGroups(`ex:${algo.name}:`);
        const keys = groups.flat();
        const attemptsPerKey = sidecars.length * sidecars[0].conns.length * PER_CONN;
        let allowedTotal = 0;
        let oneServerTotal = 0;
        for (const at of [T0, T0 + 5000]) {
          await freezeClocks(all(), at);
          const results = await Promise.all(keys.map((k) => burst(sidecars, algo.argv, k, PER_CONN)));
          for (let i = 0; i < keys.length; i++) {
            const replies = results[i].map((r) => r.reply);
            for (const r of replies) if (r instanceof Error) throw new Error(`${algo.name} ${keys[i]}: ${r.message}`);
            // The same sequence on one server: a fresh key of its own, at the same instant.
            const expected = await oneServer(algo.argv(`one:${backend.kind}:${keys[i]}`), attemptsPerKey);
            const allowed = replies.filter((r) => limited(r) === 0);
            const expectedAllowed = expected.filter((r) => limited(r) === 0);
            expect(allowed.length, `${algo.name} ${keys[i]} at +${at - T0} ms`).toBe(expectedAllowed.length);
            // Each unit handed out once: the allowed replies are the one server's, as a multiset
            // (remaining 9, 8, …, 0 each once), and every refusal is one the one server gives.
            expect(sortedJson(allowed)).toEqual(sortedJson(expectedAllowed));
            expect(distinct(replies.filter((r) => limited(r) === 1))).toEqual(distinct(expected.filter((r) => limited(r) === 1)));
            allowedTotal += allowed.length;
            oneServerTotal += expectedAllowed.length;
          }
        }
        expect(allowedTotal).toBe(oneServerTotal);
        expect(allowedTotal).toBeGreaterThanOrEqual(algo.limit * keys.length);
        console.log(`exactness ${backend.kind} ${algo.name}: allowed ${allowedTotal} of ${2 * attemptsPerKey * keys.length} (one server: ${oneServerTotal})`);

        // The counts are the backend's: no call was answered by the policy.
        for (const s of sidecars) expect(Number((await backendInfo(s)).backend_policy_decisions)).toBe(0);

        // The key's expiry on the backend: set, and not beyond what the one server sets.
        const pttl = Number(await sidecars[0].admin.call('PTTL', keys[0]));
        const onePttl = Number(await local.admin.call('PTTL', `one:${backend.kind}:${keys[0]}`));
        expect(pttl).toBeGreaterThan(0);
        expect(onePttl).toBeGreaterThan(0);
        expect(pttl).toBeLessThanOrEqual(onePttl + Math.max(0, T0 + 5000 - Date.now()) + 1000);
      });
    }

    it('RESP3: every limiter\'s replies through the backend are the local server\'s, call for call', async () => {
      await freezeClocks(all(), T0);
      const viaBackend = new Redis({ port: sidecars[1].server.port, host: '127.0.0.1', protocol: 3, maxRetriesPerRequest: 0 });
      const viaLocal = new Redis({ port: local.server.port, host: '127.0.0.1', protocol: 3, maxRetriesPerRequest: 0 });
      try {
        for (const algo of ALGOS) {
          const run = async (c: Redis, key: string): Promise<unknown[]> => {
            const out: unknown[] = [];
            for (let i = 0; i < 12; i++) out.push(await c.call(algo.argv(key)[0], ...algo.argv(key).slice(1)));
            return out;
          };
          const got = await run(viaBackend, `resp3:${algo.name}`);
          expect(got, algo.name).toEqual(await run(viaLocal, `one:${backend.kind}:resp3:${algo.name}`));
        }
        const all2 = (k: string): string[] => ['RL.ALL', '2', `{${k}}:s`, 'FIXEDWINDOW', '3', '10000', `{${k}}:h`, 'TOKENBUCKET', '5', '10000'];
        for (let i = 0; i < 5; i++) {
          expect(await viaBackend.call(all2('resp3')[0], ...all2('resp3').slice(1))).toEqual(await viaLocal.call(all2(`one:${backend.kind}:resp3`)[0], ...all2(`one:${backend.kind}:resp3`).slice(1)));
        }
      } finally {
        viaBackend.disconnect();
        viaLocal.disconnect();
      }
    });

    it('RL.ALL across sidecars is all-or-nothing: exactly the tighter limit passes, a refused call spends nothing', async () => {
      await freezeClocks(all(), T0);
      // One user per master: a tagged key's slot is its tag's, so the tags are spread, not the keys.
      const tags = (await backend.keyGroups('user:', '')).map((g) => g[0]);
      while (tags.length < 3) tags.push(`user:x${tags.length}`);
      const cases = [
        // [s limit, h limit, h spent first] → allowed = min(s, h − spent)
        { sLimit: 3, hLimit: 5, hSpent: 0 },
        { sLimit: 10, hLimit: 4, hSpent: 0 },
        { sLimit: 5, hLimit: 5, hSpent: 4 },
      ];
      for (const [i, c] of cases.entries()) {
        const tag = tags[i];
        const s = `{${tag}}:s`;
        const h = `{${tag}}:h`;
        const argv = (): string[] => ['RL.ALL', '2', s, 'FIXEDWINDOW', String(c.sLimit), '10000', h, 'TOKENBUCKET', String(c.hLimit), '10000'];
        if (c.hSpent > 0) {
          expect(limited(await sidecars[2].admin.call('RL.TOKENBUCKET', h, String(c.hLimit), '10000', 'COST', String(c.hSpent)))).toBe(0);
        }
        const replies = (await burst(sidecars, argv, s, PER_CONN)).map((r) => r.reply);
        const want = Math.min(c.sLimit, c.hLimit - c.hSpent);
        expect(countAllowed(replies), JSON.stringify(c)).toBe(want);
        // Nothing spent by the refused ones: each limit has spent exactly `want` (plus h's pre-spend).
        const sPeek = (await sidecars[1].admin.call('RL.FIXEDWINDOW', s, String(c.sLimit), '10000', 'COST', '0')) as number[];
        const hPeek = (await sidecars[0].admin.call('RL.TOKENBUCKET', h, String(c.hLimit), '10000', 'COST', '0')) as number[];
        expect(sPeek[2], `${s} remaining`).toBe(c.sLimit - want);
        expect(hPeek[2], `${h} remaining`).toBe(c.hLimit - c.hSpent - want);
        // And one server agrees reply for reply (as a multiset).
        const oneS = `{one:${backend.kind}:${i}}:s`;
        const oneH = `{one:${backend.kind}:${i}}:h`;
        if (c.hSpent > 0) await local.admin.call('RL.TOKENBUCKET', oneH, String(c.hLimit), '10000', 'COST', String(c.hSpent));
        const expected = await oneServer(['RL.ALL', '2', oneS, 'FIXEDWINDOW', String(c.sLimit), '10000', oneH, 'TOKENBUCKET', String(c.hLimit), '10000'], replies.length);
        expect(sortedJson(replies)).toEqual(sortedJson(expected));
        console.log(`exactness ${backend.kind} RL.ALL(s=${c.sLimit},h=${c.hLimit},h spent ${c.hSpent}): allowed ${countAllowed(replies)} of ${replies.length} (one server: ${countAllowed(expected)})`);
      }
    });

    if (kind === 'cluster') {
      it('RL.ALL with keys in different slots: -CROSSSLOT, and neither key is touched', async () => {
        const a = 'cross:a';
        let b = 'cross:b';
        for (let i = 0; keySlot(PREFIX + a) === keySlot(PREFIX + b); i++) b = `cross:b${i}`;
        const err = await sidecars[0].admin.call('RL.ALL', '2', a, 'FIXEDWINDOW', '3', '10000', b, 'FIXEDWINDOW', '3', '10000').catch((e: Error) => e);
        expect(err).toBeInstanceOf(Error);
        expect((err as Error).message).toMatch(/^CROSSSLOT /);
        expect((err as Error).message).toContain('hash tag');
        expect(await sidecars[1].admin.exists(a, b)).toBe(0);
      });
    } else {
      it('RL.ALL with untagged keys on a standalone backend works (one node holds every slot)', async () => {
        await freezeClocks(all(), T0);
        const r = (await sidecars[0].admin.call('RL.ALL', '2', 'plain:a', 'FIXEDWINDOW', '3', '10000', 'plain:b', 'FIXEDWINDOW', '3', '10000')) as unknown[];
        expect(r[0]).toBe(0);
      });
    }

    it('DEL (and FLUSHDB) through one sidecar resets the key for all three, a sidecar that cached the refusal included', async () => {
      await freezeClocks(all(), T0);
      const [groupA] = await backend.keyGroups('del:');
      const key = groupA[0];
      const argv = ['RL.FIXEDWINDOW', key, '1', '60000'];
      const [a, b, c] = sidecars;
      // A sidecar caches refusals only while its invalidation subscription is in place.
      for (const s of sidecars) await pollUntil(async () => (await backendInfo(s)).backend_cache_enabled === '1', 'refusal cache enabled');
      expect(limited(await a.admin.call(argv[0], ...argv.slice(1)))).toBe(0);
      expect(limited(await c.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
      const hitsBefore = Number((await backendInfo(c)).backend_cache_hits);
      // Refused again: answered from c's cache (no backend call).
      expect(limited(await c.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
      expect(Number((await backendInfo(c)).backend_cache_hits)).toBeGreaterThan(hitsBefore);
      // The key deleted behind cellgate's back (no invalidation published): c keeps refusing from
      // its cache, which is what the invalidation is for.
      const raw = await backend.nodeFor(PREFIX + key);
      expect(await raw.call('DEL', PREFIX + key)).toBe(1);
      expect(limited(await c.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
      expect(await raw.call('EXISTS', PREFIX + key)).toBe(0);
      // Put the spent state back through a sidecar without a cached refusal, then DEL through b.
      expect(limited(await a.admin.call(argv[0], ...argv.slice(1)))).toBe(0);
      expect(await b.admin.del(key)).toBe(1);
      // c drops its cached refusal when the invalidation arrives: poll a bounded number of times.
      // (Each refused poll comes from the cache and spends nothing; the first allowed one spends.)
      const polls = await pollUntil(async () => limited(await c.admin.call(argv[0], ...argv.slice(1))) === 0, 'allowed again on the caching sidecar');
      expect(Number((await backendInfo(c)).backend_invalidations_received)).toBeGreaterThanOrEqual(1);
      // c's allowed call spent the one unit: the others are refused again.
      expect(limited(await a.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
      expect(limited(await b.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
      console.log(`exactness ${backend.kind} DEL invalidation: allowed again on the caching sidecar after ${polls} refused polls`);

      // FLUSHDB through a: every sidecar drops every cached refusal ("*").
      const invalidationsBefore = Number((await backendInfo(b)).backend_invalidations_received);
      expect(limited(await b.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
      expect(await a.admin.flushdb()).toBe('OK');
      await pollUntil(async () => limited(await b.admin.call(argv[0], ...argv.slice(1))) === 0, 'allowed again after FLUSHDB');
      expect(Number((await backendInfo(b)).backend_invalidations_received)).toBeGreaterThan(invalidationsBefore);
      expect(limited(await c.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
    });

    it('EXISTS, TTL, PTTL, TYPE, SCAN, KEYS, DBSIZE, FLUSHDB through any sidecar act on the prefixed keys only', async () => {
      await freezeClocks(all(), T0);
      const [a, b, c] = sidecars;
      // Keys of other applications on the same Redis, outside the prefix.
      const foreign = ['plain', 'other:x', 'cellgat'];
      for (const k of foreign) await (await backend.nodeFor(k)).call('SET', k, '1');
      expect(await a.admin.flushdb()).toBe('OK');
      for (const k of foreign) expect(await (await backend.nodeFor(k)).call('EXISTS', k)).toBe(1);
      expect(await b.admin.dbsize()).toBe(0);

      const groups = await backend.keyGroups('ks:', PREFIX, 3);
      const names = groups.flat().slice(0, ALGOS.length);
      expect(names).toHaveLength(ALGOS.length);
      const types: Record<string, string> = {
        'CL.THROTTLE': 'gcra', GCRA: 'gcra', 'RL.GCRA': 'gcra', 'RL.TOKENBUCKET': 'tokenbucket', 'RL.LEAKYBUCKET': 'leakybucket',
        'RL.FIXEDWINDOW': 'fixedwindow', 'RL.SLIDINGWINDOW': 'slidingwindow', 'RL.SLIDINGLOG': 'slidinglog',
      };
      for (const [i, algo] of ALGOS.entries()) {
        const argv = algo.argv(names[i]);
        expect(limited(await sidecars[i % 3].admin.call(argv[0], ...argv.slice(1)))).toBe(0);
      }
      expect(await c.admin.dbsize()).toBe(names.length);
      for (const [i, algo] of ALGOS.entries()) {
        const via = sidecars[(i + 1) % 3].admin;
        expect(await via.exists(names[i]), names[i]).toBe(1);
        expect(await via.type(names[i]), algo.name).toBe(types[algo.name]);
        expect(await via.ttl(names[i])).toBeGreaterThan(0);
        expect(await via.pttl(names[i])).toBeGreaterThan(0);
        // On the backend, under the prefix.
        expect(await (await backend.nodeFor(PREFIX + names[i])).call('EXISTS', PREFIX + names[i])).toBe(1);
      }
      for (const k of foreign) {
        expect(await a.admin.exists(k)).toBe(0);
        expect(await a.admin.type(k)).toBe('none');
        expect(await a.admin.ttl(k)).toBe(-2);
      }
      // SCAN to the end (bounded), and KEYS: the client's names, without the prefix.
      const seen = new Set<string>();
      let cursor = '0';
      for (let i = 0; i < 1000; i++) {
        const [next, batch] = (await b.admin.call('SCAN', cursor, 'COUNT', '3')) as [string, string[]];
        for (const k of batch) seen.add(k);
        cursor = next;
        if (cursor === '0') break;
      }
      expect(cursor).toBe('0');
      expect([...seen].sort()).toEqual([...names].sort());
      expect(((await c.admin.call('KEYS', '*')) as string[]).sort()).toEqual([...names].sort());
      expect(((await c.admin.call('KEYS', 'ks:*')) as string[]).sort()).toEqual([...names].sort());

      // FLUSHDB again through another sidecar: the limiter keys go, the foreign keys stay.
      expect(await c.admin.flushdb()).toBe('OK');
      expect(await a.admin.dbsize()).toBe(0);
      for (const k of foreign) expect(await (await backend.nodeFor(k)).call('EXISTS', k)).toBe(1);
      expect(await b.admin.exists(...names)).toBe(0);
    });
  });
}
