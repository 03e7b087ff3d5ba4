/**
 * The backend mode stays bounded whatever the backend holds or does, on a real redis-server:
 * calls pending on a stuck node are capped (the overflow gets the policy at once), a huge foreign
 * value or an oversized sliding log at a limiter key is never loaded into the script, FLUSHALL
 * walks the prefix in batches with its own budget (no timeouts, no backend down) and always
 * invalidates the other sidecars' caches, and a DEL through one sidecar replies only after every
 * other sidecar dropped its cached refusals of the key.
 *
 * Sizes run short by default; CELLGATE_SOAK=1 runs the long variants (300k keys, 3,000 trials).
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { RedisNode, stopAllRedis } from '../helpers/redis.js';
import { BACKEND_LOG_LIMIT_ERROR, MAX_BACKEND_SLIDING_LOG_LIMIT } from '../../src/backend/limiter-script.js';
import { MAX_PENDING_PER_NODE } from '../../src/backend/redis-backend.js';
import {
  ALGOS, backendInfo, freezeClocks, frozenInstant, startSidecar, stopSidecars, waitBackendState, type Sidecar,
} from './helpers.js';

const SOAK = process.env.CELLGATE_SOAK === '1';
const T0 = frozenInstant();
const WRONG = 'WRONGTYPE Operation against a key holding the wrong kind of value';

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

let node: RedisNode;
let redis: Redis;

beforeAll(async () => {
  node = await RedisNode.start();
  redis = node.client();
}, 60_000);

afterAll(async () => {
  redis?.disconnect();
  await stopAllRedis();
});

describe('calls pending on one backend node are capped', () => {
  let s: Sidecar | undefined;
  afterAll(async () => {
    node.resume();
    await stopSidecars([s]);
  });

  it(`a paused Redis: at most ${MAX_PENDING_PER_NODE} calls wait for it, the overflow gets the policy at once (counted), memory flat`, async () => {
    // A long timeout: everything sent before the backend is declared down waits on the paused node.
    s = await startSidecar(node.url, { conns: 4, args: ['--backend-timeout', '3000', '--backend-unavailable', 'deny'] });
    const pid = s.server.proc.pid!;
    const rssStart = rssMb(pid);
    node.pause();
    const perConn = 1000; // within the 1,024 replies a connection may have waiting
    const sent = perConn * s.conns.length;
    const results = await Promise.all(s.conns.map(async (c, ci) => {
      const pipe = c.pipeline();
      for (let i = 0; i < perConn; i++) pipe.call('RL.FIXEDWINDOW', `cap:${ci}:${i % 50}`, '1000000', '10000');
      return (await pipe.exec())!.map(([err, v]) => err ?? v);
    }));
    const info = await backendInfo(s);
    const rssEnd = rssMb(pid);
    console.log(`[attack] pending cap: ${sent} calls to a paused Redis; backend_overflows ${info.backend_overflows}, backend_pending_peak ${info.backend_pending_peak}, backend_timeouts ${info.backend_timeouts}, state ${info.backend_state}; RSS ${rssStart.toFixed(1)} -> ${rssEnd.toFixed(1)} MB`);
    for (const r of results.flat()) expect(r, 'every call answered by the deny policy').toEqual([1, 1000000, 0, 1000, 1000, 0]);
    expect(Number(info.backend_pending_peak)).toBe(MAX_PENDING_PER_NODE);
    expect(Number(info.backend_overflows)).toBe(sent - MAX_PENDING_PER_NODE);
    expect(info.backend_state).toBe('down');
    expect(rssEnd).toBeLessThan(2 * rssStart + 100);
    node.resume();
    // The paused node answers what was queued; the probe brings the backend back.
    await waitBackendState(s, 'up');
    const after = await backendInfo(s);
    expect(Number(after.backend_pending)).toBeLessThanOrEqual(1);
    // Decided by the backend again (the window follows the real clock: its reset is not fixed).
    expect((await s.admin.call('RL.FIXEDWINDOW', 'cap:after', '10', '10000') as number[]).slice(0, 4)).toEqual([0, 10, 9, -1]);
    expect(Number((await backendInfo(s)).backend_policy_decisions)).toBe(Number(after.backend_policy_decisions));
  }, 60_000);
});

describe('a foreign or oversized value at a limiter key is never loaded into the script', () => {
  let s: Sidecar | undefined;
  afterAll(() => stopSidecars([s]));

  it('a 200k-entry sliding log and a 50 MiB string: other calls answer WRONGTYPE at a header read\'s cost; the backend is never marked down', async () => {
    // A timeout no busy machine reaches: what is measured is Redis's own time per call.
    s = await startSidecar(node.url, { conns: 4, args: ['--backend-timeout', '2000'] });
    await freezeClocks([s], T0);
    // A well-formed log of 200,000 entries (one unit each, 1 ms apart), expiring an hour after T0.
    const entries = 200_000;
    const log = Buffer.alloc(34 + 16 * entries);
    log[0] = 0xc6;
    log[1] = 5;
    log.writeDoubleLE(T0 + 3_600_000, 2);
    log.writeDoubleLE(0, 10);
    log.writeDoubleLE(entries, 18);
    log.writeDoubleLE(entries, 26);
    for (let i = 0; i < entries; i++) {
      log.writeDoubleLE(T0 - entries + i, 34 + 16 * i);
      log.writeDoubleLE(i + 1, 34 + 16 * i + 8);
    }
    await redis.set('cellgate:huge:log', log);
    await redis.set('cellgate:huge:str', Buffer.alloc(50 << 20, 0x78));
    const infoBefore = await backendInfo(s);
    await redis.config('RESETSTAT');
    const calls: [string, string[]][] = [];
    for (const key of ['huge:log', 'huge:str']) {
      for (const algo of ALGOS) {
        if (key === 'huge:str' || algo.name !== 'RL.SLIDINGLOG') calls.push([key, algo.argv(key)]);
      }
    }
    // A log above the backend's cap is not cellgate's either.
    calls.push(['huge:log', ['RL.SLIDINGLOG', 'huge:log', '10', '10000']]);
    // 20 pipelined rounds of every call, on every connection at once.
    const replies = (await Promise.all(s.conns.map(async (c) => {
      const pipe = c.pipeline();
      for (let round = 0; round < 20; round++) for (const [, argv] of calls) pipe.call(argv[0], ...argv.slice(1));
      return (await pipe.exec())!.map(([err, v]) => err ?? v);
    }))).flat();
    for (const r of replies) expect(r instanceof Error ? r.message : JSON.stringify(r), `${JSON.stringify(await backendInfo(s))}\n${s.server.logs.slice(-5).join('\n')}`).toBe(WRONG);
    const stats = String(await redis.info('commandstats'));
    const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/.exec(stats);
    expect(m, stats).not.toBeNull();
    const info = await backendInfo(s);
    console.log(`[attack] oversized values: ${replies.length} calls, Redis EVALSHA calls=${m![1]} usec_per_call=${m![3]}; getrange ${/cmdstat_getrange:calls=(\d+)/.exec(stats)?.[1]}, get ${/cmdstat_get:calls=(\d+)/.exec(stats)?.[1] ?? 0}; state changes ${Number(info.backend_state_changes) - Number(infoBefore.backend_state_changes)}, timeouts ${Number(info.backend_timeouts) - Number(infoBefore.backend_timeouts)}`);
    // The mechanism, not a duration: the scripts read these keys only through GETRANGE of a header
    // (bounded bytes), never GET, which would copy the 50 MiB value into Lua on every call.
    expect(Number(/cmdstat_getrange:calls=(\d+)/.exec(stats)?.[1] ?? 0)).toBeGreaterThan(0);
    expect(stats).not.toMatch(/cmdstat_get:/);
    expect(info.backend_state).toBe('up');
    expect(info.backend_state_changes).toBe(infoBefore.backend_state_changes);
    expect(info.backend_policy_decisions).toBe(infoBefore.backend_policy_decisions);
    expect(s.server.logs.filter((l) => l.includes('backend down'))).toEqual([]);
  }, 120_000);

  it(`RL.SLIDINGLOG limits above ${MAX_BACKEND_SLIDING_LOG_LIMIT} are refused before anything is sent; WRONGTYPE still comes first`, async () => {
    const s2 = s!;
    const big = String(MAX_BACKEND_SLIDING_LOG_LIMIT + 1);
    await expect(s2.admin.call('RL.SLIDINGLOG', 'cap:log', big, '10000')).rejects.toThrow(BACKEND_LOG_LIMIT_ERROR);
    await expect(s2.admin.call('RL.ALL', '2', '{u}a', 'TOKENBUCKET', '3', '1000', '{u}b', 'SLIDINGLOG', big, '1000')).rejects.toThrow(BACKEND_LOG_LIMIT_ERROR);
    expect(await redis.exists('cellgate:cap:log', 'cellgate:{u}a', 'cellgate:{u}b')).toBe(0);
    await s2.admin.call('RL.TOKENBUCKET', 'cap:tb', '3', '1000');
    await expect(s2.admin.call('RL.SLIDINGLOG', 'cap:tb', big, '10000')).rejects.toThrow(WRONG);
    // At the cap itself: accepted.
    expect(await s2.admin.call('RL.SLIDINGLOG', 'cap:log', String(MAX_BACKEND_SLIDING_LOG_LIMIT), '10000')).toEqual([0, MAX_BACKEND_SLIDING_LOG_LIMIT, MAX_BACKEND_SLIDING_LOG_LIMIT - 1, -1, 10000, 0]);
  });
});

describe('FLUSHALL and DEL through one sidecar reach every sidecar', () => {
  let sidecarA: Sidecar | undefined;
  let sidecarB: Sidecar | undefined;
  beforeAll(async () => {
    // A timeout no busy machine reaches (the flush does not use it; the limiter calls and the
    // invalidation's acknowledgements do).
    sidecarA = await startSidecar(node.url, { conns: 1, args: ['--backend-timeout', '2000'] });
    sidecarB = await startSidecar(node.url, { conns: 1, args: ['--backend-timeout', '2000'] });
    await freezeClocks([sidecarA, sidecarB], T0);
  }, 60_000);
  afterAll(() => stopSidecars([sidecarA, sidecarB]));

  /** Makes `key` refused on `s` and checks the next refusal came from its cache. */
  async function cacheRefusal(s: Sidecar, key: string): Promise<void> {
    const argv = ['RL.FIXEDWINDOW', key, '1', '60000'];
    expect((await s.admin.call(argv[0], ...argv.slice(1)) as number[])[0]).toBe(0);
    expect((await s.admin.call(argv[0], ...argv.slice(1)) as number[])[0]).toBe(1);
    const hits = Number((await backendInfo(s)).backend_cache_hits);
    expect((await s.admin.call(argv[0], ...argv.slice(1)) as number[])[0]).toBe(1);
    expect(Number((await backendInfo(s)).backend_cache_hits)).toBe(hits + 1);
  }

  it(`FLUSHALL over ${SOAK ? '300k' : '30k'} keys: OK, none left under the prefix, no timeout, no backend down, the other sidecar's cached refusal gone`, async () => {
    const [a, b] = [sidecarA!, sidecarB!];
    await redis.flushall();
    const n = SOAK ? 300_000 : 30_000;
    for (let from = 0; from < n; from += 10_000) {
      const pipe = redis.pipeline();
      for (let i = from; i < Math.min(n, from + 10_000); i++) pipe.set(`cellgate:flush:${i}`, 'x');
      await pipe.exec();
    }
    await redis.set('other:key', 'kept');
    await cacheRefusal(b, 'flush:refused');
    const before = await backendInfo(a);
    const t0 = performance.now();
    expect(await a.admin.call('FLUSHALL')).toBe('OK');
    const ms = performance.now() - t0;
    const after = await backendInfo(a);
    console.log(`[attack] FLUSHALL over ${n + 1} keys: ${ms.toFixed(0)} ms; timeouts +${Number(after.backend_timeouts) - Number(before.backend_timeouts)}, state changes +${Number(after.backend_state_changes) - Number(before.backend_state_changes)}`);
    expect(await redis.dbsize()).toBe(1);
    expect(await redis.get('other:key')).toBe('kept');
    expect(after.backend_timeouts).toBe(before.backend_timeouts);
    expect(after.backend_state_changes).toBe(before.backend_state_changes);
    expect(after.backend_state).toBe('up');
    // The reply came after b acknowledged the invalidation: its cache is empty, the key is fresh.
    expect((await backendInfo(b)).backend_cache_entries).toBe('0');
    expect((await b.admin.call('RL.FIXEDWINDOW', 'flush:refused', '1', '60000') as number[])[0]).toBe(0);
  }, 300_000);

  it(`after DEL through one sidecar returned, the other never answers a refusal it cached before (${SOAK ? 3000 : 300} trials)`, async () => {
    const [a, b] = [sidecarA!, sidecarB!];
    const trials = SOAK ? 3000 : 300;
    const argv = (k: string): [string, ...string[]] => ['RL.FIXEDWINDOW', k, '1', '60000'];
    let stale = 0;
    const hitsBefore = Number((await backendInfo(b)).backend_cache_hits);
    for (let i = 0; i < trials; i++) {
      const key = `race:${i}`;
      const bc = b.admin;
      await bc.call(...argv(key));
      await bc.call(...argv(key)); // refused: cached on b
      await bc.call(...argv(key)); // answered by b's cache
      expect(await a.admin.call('DEL', key)).toBe(1);
      const r = (await bc.call(...argv(key))) as number[];
      if (r[0] !== 0) stale++;
    }
    const info = await backendInfo(b);
    console.log(`[attack] DEL race: ${trials} trials, ${stale} stale cached refusals; b's cache hits +${Number(info.backend_cache_hits) - hitsBefore}; a's acknowledgement timeouts ${(await backendInfo(a)).backend_invalidation_ack_timeouts}`);
    expect(Number(info.backend_cache_hits) - hitsBefore).toBe(trials);
    expect(stale).toBe(0);
  }, 120_000);
});
