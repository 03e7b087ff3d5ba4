/**
 * The service's calls ride in the backend's batches (src/backend/limiter-batches.ts): a request of
 * one descriptor is a plain call in the turn's batch; a request of several is one unit, one entry of
 * that batch (never cut between two, decided with nothing in between). Many requests in flight at
 * once are then a few scripts on Redis, not one each; beside RESP calls on the same keys, across
 * three instances, the decisions stay exact and each on its own state. Hostile: a request of the
 * most descriptors, beside a batch near its byte bound, and one past that bound.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisNode } from '../helpers/redis.js';
import { startRls, until, type Descriptor, type Rls } from './helpers.js';

const CONFIG = {
  'app.yaml': `domain: app
descriptors:
  - key: one
    rate_limit: { unit: minute, requests_per_unit: 1000 }
  - key: fw
    rate_limit: { unit: minute, requests_per_unit: 12 }
  - key: tb
    rate_limit: { unit: minute, requests_per_unit: 30, algorithm: token_bucket }
  - key: sw
    rate_limit: { unit: minute, requests_per_unit: 12, algorithm: sliding_window }
  - key: big
    rate_limit: { unit: minute, requests_per_unit: 5 }
`,
};

/** INFO backend as a field → number map. */
async function backend(r: Rls): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const line of String(await r.redis.info('backend')).split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

/** An RL.* reply's six integers, from the array (RESP2) or the map (RESP3, flattened by ioredis). */
function six(reply: unknown): number[] {
  const r = reply as (number | string)[];
  return (typeof r[0] === 'string' ? r.filter((_, i) => i % 2 === 1) : r) as number[];
}

/** EVALSHA and EVAL runs Redis counted since its last CONFIG RESETSTAT. */
async function scriptRuns(node: RedisNode): Promise<number> {
  let n = 0;
  for (const m of String(await node.call('INFO', 'commandstats')).matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) n += Number(m[1]);
  return n;
}

describe('the service in the backend\'s batches, three instances on one Redis', () => {
  let node: RedisNode;
  const instances: Rls[] = [];

  beforeAll(async () => {
    node = await RedisNode.start();
    // A generous backend-timeout: a loaded machine must not turn a 1 MB batch into policy answers.
    const args = ['--backend', `redis://127.0.0.1:${node.port}`, '--backend-timeout', '5000', '--rls-max-message-bytes', '4mb'];
    await Promise.all([0, 1, 2].map(async () => {
      instances.push(await startRls(CONFIG, args));
    }));
    for (const r of instances) {
      await until(async () => /backend_state:up/.test(String(await r.redis.info('backend'))), 'the backend up', 60_000);
      // The script loaded (EVAL once), and the gRPC channel connected, before anything is counted.
      await r.should('app', [{ entries: [{ key: 'one', value: 'warm' }] }]);
    }
  }, 60_000);

  afterAll(async () => {
    for (const r of instances) await r.stop();
    await node?.destroy();
  });

  it('64 one-descriptor requests in flight at once: plain calls in the batches, a few scripts for all', async () => {
    const r = instances[0];
    const before = await backend(r);
    await node.call('CONFIG', 'RESETSTAT');
    const replies = await Promise.all(Array.from({ length: 64 }, (_, i) => r.should('app', [{ entries: [{ key: 'one', value: `a${i}` }] }])));
    const after = await backend(r);
    expect(replies.every((x) => x.overall_code === 'OK' && x.statuses[0].limit_remaining === 999)).toBe(true);
    // Every call in a batch, and far fewer scripts than requests.
    expect(after.backend_batched_calls - before.backend_batched_calls).toBe(64);
    const scripts = after.backend_calls - before.backend_calls;
    expect(scripts).toBeLessThanOrEqual(16);
    expect(await scriptRuns(node)).toBe(scripts);
  });

  it('32 four-descriptor requests in flight at once: each one entry of a batch, not a script each', async () => {
    const r = instances[0];
    const before = await backend(r);
    await node.call('CONFIG', 'RESETSTAT');
    const request = (i: number): Descriptor[] => ['one', 'fw', 'tb', 'sw'].map((key) => ({ entries: [{ key, value: `b${i}` }] }));
    const replies = await Promise.all(Array.from({ length: 32 }, (_, i) => r.should('app', request(i))));
    const after = await backend(r);
    for (const x of replies) expect(x.statuses.map((s) => s.limit_remaining)).toEqual([999, 11, 29, 11]);
    expect(after.backend_batched_calls - before.backend_batched_calls).toBe(128);
    const scripts = after.backend_calls - before.backend_calls;
    expect(scripts).toBeLessThanOrEqual(16);
    expect(await scriptRuns(node)).toBe(scripts);
    expect(after.backend_policy_decisions).toBe(before.backend_policy_decisions);
  });

  it('requests of three descriptors on three instances beside RESP calls on the same key, all at once: exact, each decided on its own state', async () => {
    const value = 'mix';
    const request: Descriptor[] = ['fw', 'tb', 'sw'].map((key) => ({ entries: [{ key, value }] }));
    // The service's token bucket key for `tb: mix` (envoyproxy/ratelimit's, no window for this algorithm).
    const tbKey = `app_tb_${value}_`;
    const befores = await Promise.all(instances.map(backend));
    const [grpcReplies, respReplies] = await Promise.all([
      Promise.all(instances.flatMap((r) => Array.from({ length: 10 }, () => r.should('app', request)))),
      Promise.all(instances.map(async (r) => {
        const p = r.redis.pipeline();
        for (let i = 0; i < 10; i++) p.call('RL.TOKENBUCKET', tbKey, '30', '60000');
        return ((await p.exec()) ?? []).map(([e, v]) => {
          if (e) throw e;
          return six(v);
        });
      })),
    ]);
    const afters = await Promise.all(instances.map(backend));
    const ok = (n: number) => grpcReplies.filter((x) => x.statuses[n].code === 'OK');
    // The fixed window and the sliding window: 12 of 30 requests, remaining 11 down to 0, each once.
    for (const n of [0, 2]) {
      expect(ok(n).length).toBe(12);
      expect(ok(n).map((x) => x.statuses[n].limit_remaining).sort((a, b) => a - b)).toEqual(Array.from({ length: 12 }, (_, i) => i));
    }
    // The token bucket, spent by 30 requests and 30 RESP calls: 30 allowed in all, remaining 29 down to 0, each once.
    const remaining = [
      ...ok(1).map((x) => x.statuses[1].limit_remaining),
      ...respReplies.flat().filter((v) => v[0] === 0).map((v) => v[2]),
    ].sort((a, b) => a - b);
    expect(remaining).toEqual(Array.from({ length: 30 }, (_, i) => i));
    // Batched: fewer scripts than calls over the three instances, and no policy answers.
    const delta = (f: string) => afters.reduce((s, a, i) => s + a[f] - befores[i][f], 0);
    expect(delta('backend_calls')).toBeLessThan(delta('backend_batched_calls'));
    expect(delta('backend_policy_decisions')).toBe(0);
  });

  it('a refused limit does not keep the others of its request from counting (each decided on its own, as before)', async () => {
    const r = instances[2];
    const request: Descriptor[] = ['fw', 'tb'].map((key) => ({ entries: [{ key, value: 'own' }] }));
    const seen: [string, number][] = [];
    for (let i = 0; i < 16; i++) {
      const x = await r.should('app', request);
      seen.push([x.statuses[0].code, x.statuses[1].limit_remaining]);
    }
    // The fixed window allows 12; the token bucket counts all 16 requests.
    expect(seen.map(([code]) => code)).toEqual([...Array(12).fill('OK'), ...Array(4).fill('OVER_LIMIT')]);
    expect(seen.map(([, remaining]) => remaining)).toEqual(Array.from({ length: 16 }, (_, i) => 29 - i));
  });

  it('hostile: a request of 256 descriptors (~1 MB of keys) beside RESP calls of 60 KB keys (~900 KB) on every instance: each batch within its bound, every answer exact', async () => {
    const big = (n: number): Descriptor[] => Array.from({ length: 256 }, (_, i) => ({ entries: [{ key: 'big', value: `${n}:${i}:${'v'.repeat(3_800)}` }] }));
    const befores = await Promise.all(instances.map(backend));
    for (const round of [0, 1]) {
      const [grpcReplies, respReplies] = await Promise.all([
        Promise.all(instances.map((r, n) => r.should('app', big(n)))),
        Promise.all(instances.map(async (r, n) => {
          const p = r.redis.pipeline();
          for (let i = 0; i < 15; i++) p.call('RL.FIXEDWINDOW', `resp:${n}:${i}:${'x'.repeat(60_000)}`, '5', '60000');
          return ((await p.exec()) ?? []).map(([e, v]) => {
            if (e) throw e;
            return six(v);
          });
        })),
      ]);
      for (const x of grpcReplies) {
        expect(x.statuses.length).toBe(256);
        expect(x.statuses.every((s) => s.code === 'OK' && s.limit_remaining === 4 - round)).toBe(true);
      }
      for (const v of respReplies.flat()) expect(v.slice(0, 3)).toEqual([0, 5, 4 - round]);
    }
    const afters = await Promise.all(instances.map(backend));
    for (let i = 0; i < 3; i++) {
      expect(afters[i].backend_policy_decisions).toBe(befores[i].backend_policy_decisions);
      // 2 x (256 + 15) calls, all in batches (the unit fits in one).
      expect(afters[i].backend_batched_calls - befores[i].backend_batched_calls).toBe(2 * 271);
    }
  });

  it('hostile: 256 descriptors of 7 KB keys (~1.8 MB, past a batch\'s bound) go as one script of their own, exact, the process unharmed', async () => {
    const r = instances[1];
    const request: Descriptor[] = Array.from({ length: 256 }, (_, i) => ({ entries: [{ key: 'big', value: `huge:${i}:${'w'.repeat(7_000)}` }] }));
    const before = await backend(r);
    const [first, second] = await Promise.all([r.should('app', request), r.should('app', request)]);
    const after = await backend(r);
    const remaining = [first, second].map((x) => x.statuses.map((s) => s.limit_remaining));
    // Both requests decided whole, one after the other: 4 for every limit in one, 3 in the other.
    expect(remaining.map((rs) => new Set(rs).size)).toEqual([1, 1]);
    expect(remaining.map((rs) => rs[0]).sort()).toEqual([3, 4]);
    expect(after.backend_calls - before.backend_calls).toBe(2);
    expect(after.backend_batched_calls).toBe(before.backend_batched_calls);
    expect(after.backend_policy_decisions).toBe(before.backend_policy_decisions);
    expect(await r.redis.ping()).toBe('PONG');
  });
});
