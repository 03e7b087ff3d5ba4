/**
 * RL.BLOCK with a Redis Cluster backend (real redis-server nodes): the block script runs on the
 * master of the key's slot, so keys in different slots are blocked and refused alike; RL.ALL over
 * hash-tagged keys refuses the whole call when one member is blocked; DEL lifts a block.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useCluster } from '../helpers/redis.js';
import { freezeClocks, frozenInstant, startSidecar, stopSidecars, type Sidecar } from './helpers.js';

const env = useCluster();
const T0 = frozenInstant();
let s: Sidecar;

beforeAll(async () => {
  s = await startSidecar(env.cluster.url, { conns: 0 });
}, 60_000);

afterAll(async () => {
  await stopSidecars([s]);
});

describe('RL.BLOCK on a Cluster backend', () => {
  it('blocks keys of any slot; RL.ALL with a blocked member is refused; DEL lifts it', async () => {
    await freezeClocks([s], T0);
    // Keys spread over many slots, so every master gets some.
    const keys = Array.from({ length: 12 }, (_, i) => `cb:${i}`);
    for (const key of keys) expect(await s.admin.call('RL.BLOCK', key, '2000')).toBe('OK');
    await freezeClocks([s], T0 + 500);
    for (const key of keys) {
      expect(await s.admin.call('RL.SLIDINGWINDOW', key, '5', '1000'), key).toEqual([1, 5, 0, 1500, 1500, 0]);
      expect(await s.admin.type(key)).toBe('block');
    }
    expect(await s.admin.call('RL.BLOCK', '{u:1}:h', '1000')).toBe('OK');
    expect(await s.admin.call('RL.ALL', '2', '{u:1}:s', 'TOKENBUCKET', '3', '1000', '{u:1}:h', 'GCRA', '5', '1000'))
      .toEqual([1, [0, 3, 2, -1, 334, 0], [1, 5, 0, 1000, 1000, 0]]);
    expect(await s.admin.exists('{u:1}:s')).toBe(0);
    expect(await s.admin.del(keys[0])).toBe(1);
    expect(((await s.admin.call('RL.SLIDINGWINDOW', keys[0], '5', '1000')) as number[]).slice(0, 4)).toEqual([0, 5, 4, -1]);
    await freezeClocks([s], T0 + 2000);
    expect(((await s.admin.call('RL.SLIDINGWINDOW', keys[1], '5', '1000')) as number[]).slice(0, 4)).toEqual([0, 5, 4, -1]);
  });
});
