/**
 * RL.BLOCK with a shared backend: two cellgate sidecars on one real redis-server and one local-mode
 * cellgate, clocks frozen at the same instants (DEBUG CLOCK SET). The same steps (a block over a
 * spent key, every limiter command on it while blocked, its end, a block replaced by a shorter one,
 * DEL, RL.ALL with a blocked member, REFUND, MULTI/EXEC) give the same replies, TYPE and PTTL through
 * the backend as locally; a block through one sidecar lifts the refusal another sidecar cached when
 * the block ends sooner; with the backend down RL.BLOCK is an error and the local policy still sees
 * the block.
 */
import { describe, expect, it } from 'vitest';
import { freePort } from '../helpers/server.js';
import { errorOf } from '../helpers/replies.js';
import { backendInfo, freezeClocks, frozenInstant, limited, pollUntil, startSidecar, stopSidecars, useLocalAndPair, type Sidecar } from './helpers.js';

const T0 = frozenInstant();
const env = useLocalAndPair();

/** [ms after T0, command]; `K` is the step's key. */
const STEPS: [number, string[]][] = [
  [0, ['RL.TOKENBUCKET', 'K', '4', '10000', 'BURST', '6', 'COST', '3']],
  [0, ['RL.BLOCK', 'K', '2500']],
  [0, ['TYPE', 'K']],
  [100, ['RL.TOKENBUCKET', 'K', '4', '10000', 'BURST', '6']],
  [100, ['RL.LEAKYBUCKET', 'K', '4', '10000', 'BURST', '6', 'COST', '0']],
  [200, ['RL.FIXEDWINDOW', 'K', '6', '10000']],
  [300, ['RL.SLIDINGLOG', 'K', '6', '10000', 'COST', '2']],
  [400, ['RL.SLIDINGWINDOW', 'K', '6', '10000', 'REFUND', '1']],
  [500, ['RL.GCRA', 'K', '4', '10000', 'BURST', '6']],
  [500, ['RL.GCRA', 'K', '4', '10000', 'REFUND', '2']],
  [600, ['CL.THROTTLE', 'K', '5', '10', '60']],
  [1600, ['CL.THROTTLE', 'K', '5', '10', '60', '0']],
  [1700, ['GCRA', 'K', '5', '10', '60', 'TOKENS', '2']],
  [1800, ['RL.ALL', '2', 'K2', 'FIXEDWINDOW', '3', '10000', 'K', 'SLIDINGLOG', '6', '10000']],
  [1800, ['EXISTS', 'K2']],
  [2499, ['RL.SLIDINGLOG', 'K', '6', '10000']],
  // The block's end: the key is fresh (its spend before the block is gone).
  [2500, ['RL.SLIDINGLOG', 'K', '6', '10000']],
  [2500, ['TYPE', 'K']],
  // A long block replaced by a shorter one, then lifted by DEL.
  [3000, ['RL.BLOCK', 'K', '60000']],
  [3000, ['RL.BLOCK', 'K', '50']],
  [3049, ['RL.FIXEDWINDOW', 'K', '6', '10000', 'COST', '0']],
  [3050, ['RL.FIXEDWINDOW', 'K', '6', '10000']],
  [4000, ['RL.BLOCK', 'K', '60000']],
  [4000, ['DEL', 'K']],
  [4000, ['RL.GCRA', 'K', '4', '10000']],
];

describe('RL.BLOCK through a backend', () => {
  it('every step: replies, TYPE and PTTL equal the local server\'s', async () => {
    const replies: unknown[] = [];
    for (let i = 0; i < STEPS.length; i++) {
      const [dt, argv] = STEPS[i];
      const cmd = argv.map((a) => (a === 'K' ? 'bk:steps' : a === 'K2' ? 'bk:steps2' : a));
      await freezeClocks([env.local, ...env.sidecars], T0 + dt);
      const via = env.sidecars[i % 2];
      const [b, l] = await Promise.all([via.admin.call(cmd[0], ...cmd.slice(1)), env.local.admin.call(cmd[0], ...cmd.slice(1))]);
      const [bt, lt] = await Promise.all([via.admin.pttl('bk:steps'), env.local.admin.pttl('bk:steps')]);
      const [bty, lty] = await Promise.all([via.admin.type('bk:steps'), env.local.admin.type('bk:steps')]);
      expect([dt, cmd, b, bt, bty], `step ${i}`).toEqual([dt, cmd, l, lt, lty]);
      replies.push(b);
    }
    // The answers themselves (both sides agreed on them).
    expect(replies.slice(1, 4)).toEqual(['OK', 'block', [1, 6, 0, 2400, 2400, 0]]);
    expect(replies[10]).toEqual([1, 6, 0, 2, 2]);
    expect(replies[13]).toEqual([1, [0, 3, 2, -1, 8200, 0], [1, 6, 0, 700, 700, 0]]);
    expect(replies[15]).toEqual([1, 6, 0, 1, 1, 0]);
    expect(replies[16]).toEqual([0, 6, 5, -1, 10000, 0]);
    expect(replies[20]).toEqual([1, 6, 0, 1, 1, 0]);
    for (const s of env.sidecars) expect((await backendInfo(s)).backend_policy_decisions).toBe('0');
  });

  it('in MULTI/EXEC: in order with the limiter calls around it, as locally', async () => {
    await freezeClocks([env.local, ...env.sidecars], T0 + 10_000);
    const run = (s: Sidecar) => s.admin.multi()
      .call('RL.FIXEDWINDOW', 'bk:tx', '5', '10000')
      .call('RL.BLOCK', 'bk:tx', '300')
      .call('RL.FIXEDWINDOW', 'bk:tx', '5', '10000')
      .call('RL.ALL', '2', 'bk:tx', 'GCRA', '5', '1000', 'bk:tx2', 'FIXEDWINDOW', '5', '1000')
      .exec();
    const [b, l] = await Promise.all([run(env.sidecars[0]), run(env.local)]);
    expect(b).toEqual(l);
    expect(l![2]).toEqual([null, [1, 5, 0, 300, 300, 0]]);
  });

  it('pipelined, no MULTI: after the calls before it in the turn\'s batch, before those after it, as locally', async () => {
    await freezeClocks([env.local, ...env.sidecars], T0 + 20_000);
    const run = async (s: Sidecar) => {
      const p = s.admin.pipeline()
        .call('RL.FIXEDWINDOW', 'bk:pipe', '5', '10000')
        .call('RL.BLOCK', 'bk:pipe', '300')
        .call('RL.FIXEDWINDOW', 'bk:pipe', '5', '10000');
      return ((await p.exec()) ?? []).map(([e, v]) => (e ? (e as Error).message : v));
    };
    const [b, l] = await Promise.all([run(env.sidecars[0]), run(env.local)]);
    expect(b).toEqual(l);
    expect(l).toEqual([[0, 5, 4, -1, 10000, 0], 'OK', [1, 5, 0, 300, 300, 0]]);
  });

  it('a block through one sidecar lifts a longer refusal another sidecar cached, once the block ends', async () => {
    await freezeClocks(env.sidecars, T0 + 60_000);
    const [a, c] = env.sidecars;
    const argv = ['RL.FIXEDWINDOW', 'bk:cached', '1', '60000'];
    for (const s of env.sidecars) await pollUntil(async () => (await backendInfo(s)).backend_cache_enabled === '1', 'refusal cache enabled');
    expect(limited(await a.admin.call(argv[0], ...argv.slice(1)))).toBe(0);
    expect(limited(await c.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
    const hits = Number((await backendInfo(c)).backend_cache_hits);
    expect(limited(await c.admin.call(argv[0], ...argv.slice(1)))).toBe(1);
    expect(Number((await backendInfo(c)).backend_cache_hits)).toBe(hits + 1); // c answers from its cache
    const received = Number((await backendInfo(c)).backend_invalidations_received);
    expect(await a.admin.call('RL.BLOCK', 'bk:cached', '100')).toBe('OK');
    // The block's reply came after c dropped its cached refusal (valid for a minute more).
    expect(Number((await backendInfo(c)).backend_invalidations_received)).toBe(received + 1);
    expect(await c.admin.call(argv[0], ...argv.slice(1))).toEqual([1, 1, 0, 100, 100, 0]);
    await freezeClocks(env.sidecars, T0 + 60_100);
    expect(limited(await c.admin.call(argv[0], ...argv.slice(1)))).toBe(0);
  });

  it('with the backend down RL.BLOCK is an error; the block still holds for the local policy', async () => {
    const down = await startSidecar(`redis://127.0.0.1:${await freePort()}`, { conns: 0, waitUp: false, args: ['--backend-unavailable', 'local'] });
    try {
      await freezeClocks([down], T0);
      expect(await errorOf(down.admin.call('RL.BLOCK', 'bk:down', '1000'))).toMatch(/^ERR backend unavailable \(/);
      expect(await down.admin.call('RL.FIXEDWINDOW', 'bk:down', '5', '1000')).toEqual([1, 5, 0, 1000, 1000, 0]);
      expect(await errorOf(down.admin.call('RL.BLOCK', 'bk:down', 'x'))).toBe("ERR invalid ms 'x': not an integer");
      const longKey = 'k'.repeat(64 * 1024 + 1);
      expect(await errorOf(down.admin.call('RL.BLOCK', longKey, '1000'))).toMatch(/^ERR key too long for the backend/);
    } finally {
      await stopSidecars([down]);
    }
  });

  it('the stored value is the limiter header with the block\'s type tag, expiring at the block\'s end', async () => {
    await freezeClocks(env.sidecars, T0 + 70_000);
    expect(await env.sidecars[0].admin.call('RL.BLOCK', 'bk:value', '5000')).toBe('OK');
    const r = env.redis.client();
    try {
      const v = (await r.getBuffer('cellgate:bk:value'))!;
      expect(v.length).toBe(34);
      expect([v[0], v[1], v.readDoubleLE(2), v.readDoubleLE(10), v.readDoubleLE(18), v.readDoubleLE(26)]).toEqual([198, 7, T0 + 75_000, 0, 0, 0]);
      expect(Number(await r.call('PEXPIRETIME', 'cellgate:bk:value'))).toBe(T0 + 75_000);
    } finally {
      r.disconnect();
    }
  });
});
