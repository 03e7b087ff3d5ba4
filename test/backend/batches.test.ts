/**
 * Batches (src/backend/limiter-batches.ts): the limiter calls of one event-loop turn go to each
 * backend node as one script run, decided in order, each answered as a call sent alone would be.
 * Checked against a sidecar without a backend on the same frozen clock: a pipeline mixing every
 * algorithm, peeks (COST 0), RL.ALL, a refund and one key repeated many times; on a Cluster one
 * script per master for keys of many slots, and a key whose slot moved to another master since the
 * sidecar read the slot map is sent again on its own (the other calls of its batch decided once).
 * Hostile: huge keys and long pipelines are cut into bounded batches, every call answered.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisCluster, RedisNode, keySlot } from '../helpers/redis.js';
import { backendInfo, freezeClocks, startSidecar, stopSidecars, type Sidecar } from './helpers.js';

const T0 = 1_900_000_000_000;
const PREFIX = 'cellgate:';

/** Script runs (EVAL, EVALSHA) a Redis node has counted since its last CONFIG RESETSTAT. */
async function scriptRuns(node: RedisNode): Promise<number> {
  const text = String(await node.call('INFO', 'commandstats'));
  let n = 0;
  for (const m of text.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) n += Number(m[1]);
  return n;
}

/** One pipeline (one write) of `calls` on a connection of `s`: each reply or its error message. */
async function pipelined(s: Sidecar, calls: string[][]): Promise<unknown[]> {
  const p = s.conns[0].pipeline();
  for (const c of calls) p.call(c[0], ...c.slice(1));
  const out = (await p.exec()) ?? [];
  return out.map(([e, v]) => (e ? (e as Error).message : v));
}

/** Every kind of call on a few keys, `hot` repeated: decisions, peeks, RL.ALL, a refund, an error. */
function mixedCalls(tag: string): string[][] {
  const k = (n: string) => `${tag}:${n}`;
  const calls: string[][] = [];
  for (let i = 0; i < 30; i++) calls.push(['CL.THROTTLE', k('hot'), '9', '10', '60']);
  calls.push(
    ['GCRA', k('g'), '4', '5', '10'],
    ['GCRA', k('g'), '4', '5', '10', 'TOKENS', '3'],
    ['RL.TOKENBUCKET', k('tb'), '5', '10000'],
    ['RL.TOKENBUCKET', k('tb'), '5', '10000', 'COST', '0'],
    ['RL.TOKENBUCKET', k('tb'), '5', '10000', 'COST', '4'],
    ['RL.TOKENBUCKET', k('tb'), '5', '10000', 'REFUND', '2'],
    ['RL.FIXEDWINDOW', k('fw'), '3', '1000', 'COST', '2'],
    ['RL.SLIDINGLOG', k('sl'), '3', '1000'],
    ['RL.SLIDINGLOG', k('sl'), '3', '1000'],
    ['RL.SLIDINGWINDOW', k('sw'), '3', '1000', 'COST', '3'],
    ['RL.LEAKYBUCKET', k('lb'), '3', '1000'],
    ['RL.GCRA', k('rg'), '3', '1000'],
    ['RL.ALL', '2', k('{a}1'), 'TOKENBUCKET', '3', '1000', k('{a}2'), 'FIXEDWINDOW', '2', '1000', 'COST', '1'],
    ['RL.ALL', '2', k('{a}1'), 'TOKENBUCKET', '3', '1000', k('{a}2'), 'FIXEDWINDOW', '2', '1000', 'COST', '2'],
    ['CL.THROTTLE', k('tb'), '1', '1', '1'], // WRONGTYPE, the calls after it decided all the same
    ['RL.FIXEDWINDOW', k('fw'), '3', '1000', 'COST', '0'],
  );
  for (let i = 0; i < 30; i++) calls.push(['RL.TOKENBUCKET', k('hot2'), '20', '60000', 'COST', String(i % 3)]);
  return calls;
}

describe('batches on one Redis', () => {
  let node: RedisNode;
  let sidecar: Sidecar;
  let local: Sidecar;

  beforeAll(async () => {
    node = await RedisNode.start();
    // A generous backend-timeout: a loaded machine must not turn a 2 MB batch into policy answers.
    [sidecar, local] = await Promise.all([startSidecar(node.url, { conns: 1, args: ['--backend-timeout', '5000'] }), startSidecar('', { conns: 1 })]);
    await freezeClocks([sidecar, local], T0);
    await sidecar.admin.call('RL.FIXEDWINDOW', 'warmup', '1', '1000'); // the script loaded
  }, 60_000);

  afterAll(async () => {
    await stopSidecars([sidecar, local]);
    await node?.destroy();
  });

  it('a pipeline of every kind of call, a key repeated 30 times: a few scripts, each reply as without a backend', async () => {
    await node.call('CONFIG', 'RESETSTAT');
    const before = await backendInfo(sidecar);
    const calls = mixedCalls('mix');
    const replies = await pipelined(sidecar, calls);
    const runs = await scriptRuns(node);
    const after = await backendInfo(sidecar);
    expect(replies).toEqual(await pipelined(local, calls));
    // One write of ~76 commands: read in one or a few turns, one script each (not one per call).
    expect(runs).toBeLessThanOrEqual(4);
    expect(Number(after.backend_batched_calls) - Number(before.backend_batched_calls)).toBe(calls.length);
    expect(Number(after.backend_batches) - Number(before.backend_batches)).toBe(runs);
    expect(after.backend_batch_sizes).toMatch(/^1=\d+,2-3=\d+,4-7=\d+,8-15=\d+,16-31=\d+,32-63=\d+,64-127=\d+,128-255=\d+,256=\d+$/);
    // Each limiter key: the local expiry.
    for (const key of ['mix:hot', 'mix:tb', 'mix:sl', 'mix:{a}1']) {
      expect(await sidecar.admin.call('PTTL', key), key).toBe(await local.admin.call('PTTL', key));
    }
  });

  it('calls on one key from several connections in one turn are decided in order in one script', async () => {
    const conns = [sidecar.conns[0], sidecar.admin];
    await node.call('CONFIG', 'RESETSTAT');
    const all = await Promise.all(conns.map(async (c) => {
      const p = c.pipeline();
      for (let i = 0; i < 20; i++) p.call('RL.FIXEDWINDOW', 'shared', '25', '60000');
      return ((await p.exec()) ?? []).map(([, v]) => v as number[]);
    }));
    const allowed = all.flat().filter((r) => r[0] === 0).length;
    const remaining = all.flat().map((r) => r[2]).sort((a, b) => b - a);
    expect(allowed).toBe(25);
    // Each remaining value seen once: no two calls decided on the same state.
    expect(new Set(remaining.filter((_, i) => i < 25)).size).toBe(25);
    expect(await scriptRuns(node)).toBeLessThanOrEqual(4);
  });

  it('hostile: 64 KiB keys and 600 calls in one pipeline are cut into bounded batches, every call answered', async () => {
    const before = await backendInfo(sidecar);
    const big = (i: number) => `big:${i}:${'x'.repeat(60_000)}`;
    const calls: string[][] = [];
    for (let i = 0; i < 40; i++) calls.push(['RL.FIXEDWINDOW', big(i), '5', '60000']);
    for (let i = 0; i < 600; i++) calls.push(['CL.THROTTLE', 'long:one', '1000', '10', '60']);
    const replies = await pipelined(sidecar, calls);
    expect(replies.slice(0, 40).every((r) => (r as number[])[0] === 0 && (r as number[])[2] === 4)).toBe(true);
    const remaining = replies.slice(40).map((r) => (r as number[])[2]);
    expect(remaining).toEqual(Array.from({ length: 600 }, (_, i) => 1000 - i));
    const after = await backendInfo(sidecar);
    const sizes = (info: Record<string, string>) => Object.fromEntries(info.backend_batch_sizes.split(',').map((p) => p.split('=')).map(([k, v]) => [k, Number(v)]));
    // 40 keys of 60 KB pass the 1 MiB bound: at least two batches for them; 600 calls: at least three.
    expect(Number(after.backend_batches) - Number(before.backend_batches)).toBeGreaterThanOrEqual(5);
    expect(sizes(after)['256'] - sizes(before)['256']).toBeGreaterThanOrEqual(2);
    expect(after.backend_policy_decisions).toBe(before.backend_policy_decisions);
    expect(await sidecar.admin.call('PING')).toBe('PONG');
  });
});

describe('batches on a Cluster', () => {
  let cluster: RedisCluster;
  let sidecar: Sidecar;
  let local: Sidecar;

  beforeAll(async () => {
    cluster = await RedisCluster.start();
    [sidecar, local] = await Promise.all([startSidecar(cluster.url, { conns: 1 }), startSidecar('', { conns: 1 })]);
    await freezeClocks([sidecar, local], T0);
  }, 120_000);

  afterAll(async () => {
    await stopSidecars([sidecar, local]);
    await cluster?.destroy();
  });

  it('keys of many slots: one script per master per turn, replies as without a backend', async () => {
    const spread = await cluster.keysPerMaster('spread', 10);
    const keys = spread.flatMap((m) => m.keys);
    const calls = keys.flatMap((k) => [['CL.THROTTLE', k, '2', '1', '60'], ['RL.TOKENBUCKET', `${k}:tb`, '3', '1000']]);
    await pipelined(sidecar, [['CL.THROTTLE', 'warm', '1', '1', '1']]);
    const masters = await cluster.masters();
    for (const m of masters) await m.call('CONFIG', 'RESETSTAT');
    const replies = await pipelined(sidecar, calls);
    expect(replies).toEqual(await pipelined(local, calls));
    const runs = await Promise.all(masters.map(scriptRuns));
    for (const r of runs) expect(r).toBeLessThanOrEqual(3);
    expect(runs.reduce((a, b) => a + b, 0)).toBeLessThan(calls.length / 4);
  });

  it('a key whose slot moved to another master: sent again on its own by its slot, the rest of its batch decided once', async () => {
    const masters = await cluster.masters();
    const topology = await cluster.topology();
    const idOf = (n: RedisNode) => topology.find((t) => t.port === n.port)!.id;
    // Keys on the first master; the moved key's slot must hold no key yet.
    const [{ master: from, keys }] = (await cluster.keysPerMaster('moving', 6)).filter((m) => m.master.port === masters[0].port);
    // The client's keys; the backend's are PREFIX + key (keysPerMaster spread those).
    const moved = PREFIX + keys[0];
    const to = masters[1];
    const clientKeys = keys;
    // Each key once, so the sidecar's slot map is current for them.
    const call = (k: string) => ['RL.FIXEDWINDOW', k, '5', '60000'];
    expect(await pipelined(sidecar, clientKeys.slice(1).map(call))).toEqual(await pipelined(local, clientKeys.slice(1).map(call)));
    const slot = keySlot(moved);
    expect(await from.call('CLUSTER', 'COUNTKEYSINSLOT', String(slot))).toBe(0);
    // The slot moves as redis-cli --cluster reshard moves it (empty: no keys to migrate); every master
    // is told, the sidecar is not.
    await to.call('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', idOf(from));
    await from.call('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', idOf(to));
    await to.call('CLUSTER', 'SETSLOT', String(slot), 'NODE', idOf(to));
    await from.call('CLUSTER', 'SETSLOT', String(slot), 'NODE', idOf(to));
    for (const m of masters.slice(2)) await m.call('CLUSTER', 'SETSLOT', String(slot), 'NODE', idOf(to));
    const before = await backendInfo(sidecar);
    const batch = clientKeys.map(call);
    const replies = await pipelined(sidecar, batch);
    expect(replies).toEqual(await pipelined(local, batch));
    // Decided once each: the moved key on its new master, the others (remaining 3 after two calls).
    expect(await to.call('EXISTS', moved)).toBe(1);
    expect(await from.call('CLUSTER', 'COUNTKEYSINSLOT', String(slot))).toBe(0);
    expect(replies.slice(1).map((r) => (r as number[])[2])).toEqual(clientKeys.slice(1).map(() => 3));
    const after = await backendInfo(sidecar);
    expect(Number(after.backend_policy_decisions)).toBe(Number(before.backend_policy_decisions));
  });
});
