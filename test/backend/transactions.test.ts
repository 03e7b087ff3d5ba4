/**
 * MULTI/EXEC with a shared backend (docs/backend.md, "Transactions"): the queued limiter calls go to
 * the backend as one unit, one script decided in order with nothing in between, each reply in its
 * place; on a Cluster the keys must share a slot (else EXEC answers CROSSSLOT and runs nothing, as
 * RL.ALL); when the backend does not answer, the policy answers every call of the unit. Observed on
 * the real redis-server: its INFO commandstats count the scripts run.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { keySlot, RedisCluster, RedisNode, stopAllRedis } from '../helpers/redis.js';
import { backendInfo, freezeClocks, frozenInstant, startSidecar, stopSidecars, waitBackendState, type Sidecar } from './helpers.js';

const PREFIX = 'cellgate:';
const T0 = frozenInstant();
const CROSSSLOT_TEXT = "CROSSSLOT Keys in request don't hash to the same slot (use a hash tag such as {user:42}:s and {user:42}:h)";

afterAll(async () => {
  await stopAllRedis();
});

/** Scripts run by a Redis node since its last CONFIG RESETSTAT (EVALSHA, and EVAL when the script had to be loaded). */
async function scriptRuns(node: RedisNode): Promise<number> {
  const text = String(await node.call('INFO', 'commandstats'));
  let n = 0;
  for (const m of text.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) n += Number(m[1]);
  return n;
}

/** EXEC of `calls` (each a command's argv) on `conn`: [error or reply] per call, or EXEC's own error. */
async function execOf(conn: Redis, calls: string[][]): Promise<unknown[] | Error> {
  const m = conn.multi();
  for (const argv of calls) m.call(argv[0], ...argv.slice(1));
  try {
    const out = await m.exec();
    return out!.map(([err, v]) => err ?? v);
  } catch (e) {
    return e as Error;
  }
}

/** Three limiter calls of the three families, and the first again: the last sees the first's spending. */
function threeCalls(tag: string): string[][] {
  return [
    ['RL.FIXEDWINDOW', `${tag}:fw`, '1', '10000'],
    ['CL.THROTTLE', `${tag}:cl`, '1', '10', '60'],
    ['GCRA', `${tag}:g`, '1', '10', '60'],
    ['RL.FIXEDWINDOW', `${tag}:fw`, '1', '10000'],
  ];
}

describe('MULTI/EXEC on one Redis', () => {
  let node: RedisNode;
  let sidecar: Sidecar;
  /** Another sidecar on the same Redis: its calls reach Redis on a connection of its own. */
  let other: Sidecar;
  let local: Sidecar;

  beforeAll(async () => {
    node = await RedisNode.start();
    [sidecar, other, local] = await Promise.all([startSidecar(node.url, { conns: 1 }), startSidecar(node.url, { conns: 1 }), startSidecar('', { conns: 1 })]);
    await freezeClocks([sidecar, other, local], T0);
    // The script loaded once (EVAL on its first use), so every run below is one EVALSHA.
    await sidecar.admin.call('RL.FIXEDWINDOW', 'warmup', '1', '1000');
  }, 60_000);

  afterAll(async () => {
    await stopSidecars([sidecar, other, local]);
    await node?.destroy();
  });

  it('the queued limiter calls are one script on the backend, decided in order, replies as without a backend', async () => {
    await node.call('CONFIG', 'RESETSTAT');
    const before = Number((await backendInfo(sidecar)).backend_calls);
    const replies = await execOf(sidecar.conns[0], threeCalls('one'));
    expect(await scriptRuns(node)).toBe(1);
    expect(Number((await backendInfo(sidecar)).backend_calls) - before).toBe(1);
    // The same transaction on a server without a backend answers the same, reply for reply.
    expect(replies).toEqual(await execOf(local.conns[0], threeCalls('one')));
    expect((replies as number[][]).map((r) => r[0])).toEqual([0, 0, 0, 1]);
  });

  it('a transaction of more than 512 limiter calls goes as scripts of 512, in order', async () => {
    await node.call('CONFIG', 'RESETSTAT');
    const calls = Array.from({ length: 600 }, () => ['RL.FIXEDWINDOW', 'big:k', '550', '10000']);
    const replies = (await execOf(sidecar.conns[0], calls)) as number[][];
    expect(await scriptRuns(node)).toBe(2);
    expect(replies.map((r) => r[2])).toEqual(Array.from({ length: 600 }, (_, i) => Math.max(0, 549 - i)));
  });

  it('a call answering WRONGTYPE does not stop the calls after it', async () => {
    await sidecar.admin.call('RL.TOKENBUCKET', 'wt:k', '5', '1000');
    await node.call('CONFIG', 'RESETSTAT');
    const replies = (await execOf(sidecar.conns[0], [
      ['RL.FIXEDWINDOW', 'wt:a', '1', '10000'],
      ['RL.FIXEDWINDOW', 'wt:k', '1', '10000'],
      ['RL.FIXEDWINDOW', 'wt:a', '1', '10000'],
    ])) as unknown[];
    expect(await scriptRuns(node)).toBe(1);
    expect((replies[0] as number[])[0]).toBe(0);
    expect(replies[1]).toBeInstanceOf(Error);
    expect((replies[1] as Error).message).toBe('WRONGTYPE Operation against a key holding the wrong kind of value');
    expect((replies[2] as number[])[0]).toBe(1);
  });

  it('a keyspace command in the transaction keeps its place: the calls before it go first', async () => {
    const replies = (await execOf(sidecar.conns[0], [
      ['RL.FIXEDWINDOW', 'del:a', '1', '10000'],
      ['DEL', 'del:a'],
      ['RL.FIXEDWINDOW', 'del:a', '1', '10000'],
      ['RL.FIXEDWINDOW', 'del:a', '1', '10000'],
    ])) as unknown[];
    expect(replies[1]).toBe(1);
    expect([(replies[0] as number[])[0], (replies[2] as number[])[0], (replies[3] as number[])[0]]).toEqual([0, 0, 1]);
  });

  it('a concurrent client cannot come between the calls of a transaction', async () => {
    // 20 transactions of (spend, peek) on one key with limit 100 through one sidecar, and 20 plain
    // spends through another, all at once: in each transaction the peek sees exactly its own spend.
    const key = 'race:k';
    const txs = Array.from({ length: 20 }, () => execOf(sidecar.conns[0], [
      ['RL.FIXEDWINDOW', key, '100', '10000'],
      ['RL.FIXEDWINDOW', key, '100', '10000', 'COST', '0'],
    ]));
    const others = Array.from({ length: 20 }, () => other.conns[0].call('RL.FIXEDWINDOW', key, '100', '10000'));
    const results = (await Promise.all(txs)) as number[][][];
    await Promise.all(others);
    for (const [spend, peek] of results) expect(peek[2]).toBe(spend[2]);
    const after = (await sidecar.admin.call('RL.FIXEDWINDOW', key, '100', '10000', 'COST', '0')) as number[];
    expect(after[2]).toBe(100 - 40);
  });

  it('when the backend does not answer in time, the policy answers every call of the unit (one script timed out)', async () => {
    const deny = await startSidecar(node.url, { conns: 1, args: ['--backend-unavailable', 'deny', '--backend-timeout', '300'] });
    try {
      await deny.admin.call('RL.FIXEDWINDOW', 'warm', '1', '1000');
      const before = await backendInfo(deny);
      node.pause();
      let replies: unknown[];
      try {
        replies = (await execOf(deny.conns[0], threeCalls('down'))) as unknown[];
      } finally {
        node.resume();
      }
      const after = await backendInfo(deny);
      expect(Number(after.backend_timeouts) - Number(before.backend_timeouts)).toBe(1);
      expect(Number(after.backend_policy_decisions) - Number(before.backend_policy_decisions)).toBe(4);
      expect(replies).toEqual([[1, 1, 0, 1000, 1000, 0], [1, 2, 0, 1, 1], [1, 2, 0, 1, 1], [1, 1, 0, 1000, 1000, 0]]);
      await waitBackendState(deny, 'up');
    } finally {
      await stopSidecars([deny]);
    }
  });
});

describe('MULTI/EXEC with the backend down', () => {
  it('the policy answers the whole transaction: local as without a backend, allow as fresh keys, deny refused', async () => {
    const down = await startSidecar('redis://127.0.0.1:1', { conns: 1, waitUp: false, args: ['--backend-unavailable', 'local'] });
    const local = await startSidecar('', { conns: 1 });
    try {
      await freezeClocks([down, local], T0);
      const before = Number((await backendInfo(down)).backend_policy_decisions);
      const replies = await execOf(down.conns[0], threeCalls('off'));
      expect(replies).toEqual(await execOf(local.conns[0], threeCalls('off')));
      expect(Number((await backendInfo(down)).backend_policy_decisions) - before).toBe(4);
      await down.admin.call('CONFIG', 'SET', 'backend-unavailable', 'allow');
      // allow: each call as on a fresh key, the second spend on `fw` included (nothing kept).
      expect(((await execOf(down.conns[0], threeCalls('fresh'))) as number[][]).map((r) => r[0])).toEqual([0, 0, 0, 0]);
      await down.admin.call('CONFIG', 'SET', 'backend-unavailable', 'deny');
      expect(((await execOf(down.conns[0], threeCalls('no'))) as number[][]).map((r) => r[0])).toEqual([1, 1, 1, 1]);
    } finally {
      await stopSidecars([down, local]);
    }
  });
});

describe('MULTI/EXEC on a Redis Cluster', () => {
  let cluster: RedisCluster;
  let sidecar: Sidecar;

  beforeAll(async () => {
    cluster = await RedisCluster.start();
    sidecar = await startSidecar(cluster.url, { conns: 1 });
    await freezeClocks([sidecar], T0);
  }, 120_000);

  afterAll(async () => {
    await stopSidecars([sidecar]);
    await cluster?.destroy();
  });

  it('keys of two slots: EXEC answers CROSSSLOT (as RL.ALL), nothing runs, the transaction is over', async () => {
    const a = 'x:a';
    let b = 'x:b';
    for (let i = 0; keySlot(PREFIX + a) === keySlot(PREFIX + b); i++) b = `x:b${i}`;
    const out = await execOf(sidecar.conns[0], [['RL.FIXEDWINDOW', a, '3', '10000'], ['PING'], ['RL.FIXEDWINDOW', b, '3', '10000']]);
    expect(out).toBeInstanceOf(Error);
    expect((out as Error).message).toBe(CROSSSLOT_TEXT);
    // RL.ALL's refusal is the same text.
    const all = await sidecar.admin.call('RL.ALL', '2', a, 'FIXEDWINDOW', '3', '10000', b, 'FIXEDWINDOW', '3', '10000').catch((e: Error) => e);
    expect((all as Error).message).toBe(CROSSSLOT_TEXT);
    expect(await sidecar.admin.exists(a, b)).toBe(0);
    expect(await sidecar.conns[0].ping()).toBe('PONG');
  });

  it('keys of one slot (a hash tag): one script on that slot\'s master, replies in order', async () => {
    const master = await cluster.masterFor(`${PREFIX}{u:1}:fw`);
    await sidecar.admin.call('RL.FIXEDWINDOW', '{u:1}:warm', '1', '1000');
    await master.call('CONFIG', 'RESETSTAT');
    const replies = (await execOf(sidecar.conns[0], threeCalls('{u:1}'))) as number[][];
    expect(await scriptRuns(master)).toBe(1);
    expect(replies.map((r) => r[0])).toEqual([0, 0, 0, 1]);
  });
});
