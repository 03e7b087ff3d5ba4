/**
 * `REFUND n` with a shared backend: two cellgate sidecars on one real redis-server and one
 * local-mode cellgate, clocks frozen at the same instants (DEBUG CLOCK SET). For every RL.*
 * algorithm the same sequence of spends and refunds gives the same replies and the same PTTL
 * through the backend as locally; and a refund through one sidecar lifts a refusal another sidecar
 * has cached (the reply waits for every sidecar to drop it, as DEL's does).
 */
import { describe, expect, it } from 'vitest';
import { freePort } from '../helpers/server.js';
import { errorOf } from '../helpers/replies.js';
import { LIMITER_SCRIPT, MAX_BACKEND_SLIDING_LOG_LIMIT, limiterScriptArgv, parseLimiterReply, type ScriptLimit } from '../../src/backend/limiter-script.js';
import { newGcraMsParams } from '../../src/limiters/gcra-ms.js';
import { KeyType } from '../helpers/key-types.js';
import { backendInfo, freezeClocks, frozenInstant, limited, pollUntil, startSidecar, stopSidecars, useLocalAndPair } from './helpers.js';

const T0 = frozenInstant();
const env = useLocalAndPair();

const FAMILY: [string, string[]][] = [
  ['RL.TOKENBUCKET', ['4', '10000', 'BURST', '6']],
  ['RL.LEAKYBUCKET', ['4', '10000', 'BURST', '6']],
  ['RL.FIXEDWINDOW', ['6', '10000']],
  ['RL.SLIDINGLOG', ['6', '10000']],
  ['RL.SLIDINGWINDOW', ['6', '10000']],
  ['RL.GCRA', ['4', '10000', 'BURST', '6']],
];

/** [ms after T0, extra arguments]: spends, refunds partial and beyond what was spent, a refund of an absent key. */
const SCRIPT: [number, string[]][] = [
  [0, ['REFUND', '2']],
  [0, ['COST', '3']],
  [700, ['COST', '2']],
  [1300, ['REFUND', '1']],
  [1300, ['COST', '4']],
  [2100, ['REFUND', '2']],
  [2100, ['COST', '0']],
  [9999, ['REFUND', '1']],
  [10500, ['COST', '1']],
  [10800, ['REFUND', '9']],
  [10800, ['COST', '0']],
];

describe('REFUND through a backend', () => {
  for (const [cmd, args] of FAMILY) {
    it(`${cmd}: replies and PTTL equal the local server's, step by step`, async () => {
      const key = `refund:${cmd}`;
      const steps: unknown[] = [];
      for (const [dt, extra] of SCRIPT) {
        await freezeClocks([env.local, ...env.sidecars], T0 + dt);
        const via = env.sidecars[steps.length % 2];
        const [b, l] = await Promise.all([via.admin.call(cmd, key, ...args, ...extra), env.local.admin.call(cmd, key, ...args, ...extra)]);
        const [bt, lt] = await Promise.all([via.admin.pttl(key), env.local.admin.pttl(key)]);
        expect([dt, extra, b, bt], `${cmd} at +${dt} ${extra.join(' ')}`).toEqual([dt, extra, l, lt]);
        steps.push(b);
      }
      // Every decision was the backend's.
      for (const s of env.sidecars) expect((await backendInfo(s)).backend_policy_decisions).toBe('0');
    });
  }

  it('with the backend down a refund is an error, never answered by the backend-unavailable policy', async () => {
    const down = await startSidecar(`redis://127.0.0.1:${await freePort()}`, { conns: 0, waitUp: false, args: ['--backend-unavailable', 'allow'] });
    try {
      expect(await errorOf(down.admin.call('RL.TOKENBUCKET', 'refund:down', '5', '1000', 'REFUND', '1'))).toMatch(/^ERR backend unavailable \(/);
      // A decision is still answered by the policy, and the refund was not counted as one.
      expect(await down.admin.call('RL.TOKENBUCKET', 'refund:down', '5', '1000')).toEqual([0, 5, 4, -1, 200, 0]);
      expect((await backendInfo(down)).backend_policy_decisions).toBe('1');
    } finally {
      await stopSidecars([down]);
    }
  });

  it('a refund through one sidecar lifts the refusal another sidecar cached', async () => {
    await freezeClocks(env.sidecars, T0 + 60_000);
    const [a, c] = env.sidecars;
    const argv = ['RL.FIXEDWINDOW', 'refund:cached', '1', '60000'];
    for (const s of env.sidecars) await pollUntil(async () => (await backendInfo(s)).backend_cache_enabled === '1', 'refusal cache enabled');
    expect(limited(await a.admin.call(argv[0], ...argv.slice(1)))).toBe(0);
    expect(limited(await c.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
    const hits = Number((await backendInfo(c)).backend_cache_hits);
    expect(limited(await c.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
    expect(Number((await backendInfo(c)).backend_cache_hits)).toBe(hits + 1); // c now answers from its cache
    const received = Number((await backendInfo(c)).backend_invalidations_received);
    expect(await a.admin.call(argv[0], ...argv.slice(1), 'REFUND', '1')).toEqual([0, 1, 1, -1, 0, 0]);
    // The refund's reply came after c acknowledged: its next call goes to the backend and is allowed.
    expect(Number((await backendInfo(c)).backend_invalidations_received)).toBe(received + 1);
    expect(limited(await c.admin.call(argv[0], ...argv.slice(1)))).toBe(0);
    expect(limited(await a.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
  });

  it('a refund on the longest backend sliding log (65,536 entries) is one bounded script call', async () => {
    const r = env.redis.client();
    try {
      const sha = (await r.script('LOAD', LIMITER_SCRIPT)) as string;
      const limit = MAX_BACKEND_SLIDING_LOG_LIMIT;
      const base: ScriptLimit = { kind: 'rl', type: KeyType.SlidingLog, limit, periodMs: 3_600_000, burst: limit, gcra: newGcraMsParams(), cost: 1 };
      const t0 = T0 * 1000;
      // One entry per ms, in pipelines of 4,096.
      for (let from = 0; from < limit; from += 4096) {
        const pipe = r.pipeline();
        for (let i = from; i < from + 4096; i++) pipe.evalsha(sha, 1, 'biglog', ...(limiterScriptArgv([base], false, t0 + i * 1000) as Buffer[]));
        await pipe.exec();
      }
      const now = t0 + limit * 1000;
      await r.call('CONFIG', 'RESETSTAT');
      const refund = { ...base, refund: 100 } as ScriptLimit;
      const outs: number[][] = [];
      for (let i = 0; i < 10; i++) outs.push(parseLimiterReply(await r.evalsha(sha, 1, 'biglog', ...(limiterScriptArgv([refund], false, now) as Buffer[])), [refund]).limits[0].values);
      // 10 refunds of 100: 1,000 units back, the newest entries dropped; the log expires with its newest kept entry.
      expect(outs[9]).toEqual([0, limit, 1000, -1, 3_600_000 - 1001, 0]);
      const stats = String(await r.call('INFO', 'commandstats'));
      const usec = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats);
      console.log(`[attack] backend REFUND on a ${limit}-entry sliding log: ${usec?.[1]} calls, ${usec?.[3]} usec per call (Redis INFO commandstats)`);
    } finally {
      r.disconnect();
    }
  }, 60_000);
});
