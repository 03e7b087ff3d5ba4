/**
 * A block (RL.BLOCK) is kept like any key: a snapshot (SAVE, then a restart) and the journal
 * (`appendonly yes`, then kill -9 and replay) give it back with the same expiry, so the same call
 * at the same instant is refused the same way; a key blocked over another type, a block replaced and
 * a block deleted come back as they were. The loaders' check refuses a block entry with state or a
 * blob.
 */
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { entryProblem } from '../../src/persistence/format.js';
import { BLOCK_TYPE } from '../../src/limiters/block.js';
import { startOn, T0_AHEAD_MS, tempDirsForFile } from './helpers.js';

const newDir = tempDirsForFile();
const T0 = T0_AHEAD_MS;

/** What the tests compare before and after: each key's TYPE, PTTL and a call's reply at the same instant. */
async function observe(r: Redis): Promise<unknown[]> {
  await r.call('DEBUG', 'CLOCK', 'SET', String(T0 + 1000));
  const out: unknown[] = [];
  for (const key of ['b:plain', 'b:over', 'b:replaced', 'b:deleted', 'b:spent']) {
    out.push(key, await r.type(key), await r.pttl(key), await r.call('RL.SLIDINGWINDOW', key, '5', '60000', 'COST', '0'));
  }
  out.push(await r.call('CL.THROTTLE', 'b:over', '5', '10', '60'));
  return out;
}

/** Blocks and spends at T0: a plain block, one over a spent key, one replaced by a shorter one, one deleted. */
async function writeBlocks(r: Redis): Promise<void> {
  await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
  expect(await r.call('RL.BLOCK', 'b:plain', '120000')).toBe('OK');
  await r.call('RL.TOKENBUCKET', 'b:over', '5', '60000', 'COST', '4');
  await r.call('RL.BLOCK', 'b:over', '90000');
  await r.call('RL.BLOCK', 'b:replaced', '600000');
  await r.call('RL.BLOCK', 'b:replaced', '30000');
  await r.call('RL.BLOCK', 'b:deleted', '30000');
  await r.del('b:deleted');
  await r.call('RL.SLIDINGWINDOW', 'b:spent', '5', '60000', 'COST', '2');
}

describe('a block across restarts', () => {
  it('SAVE, then a restart: every block comes back with its expiry, refusing the same way', async () => {
    const dir = newDir();
    let s = await startOn(dir, ['--save', '']);
    let r = new Redis({ port: s.port, protocol: 2 });
    await writeBlocks(r);
    const before = await observe(r);
    expect(before.slice(0, 4)).toEqual(['b:plain', 'block', 119000, [1, 5, 0, 119000, 119000, 0]]);
    expect(before.slice(12, 16)).toEqual(['b:deleted', 'none', -2, [0, 5, 5, -1, 0, 0]]);
    await r.save();
    r.disconnect();
    // kill -9 after SAVE: only the snapshot is there to load.
    expect(await s.stop('SIGKILL')).toBe(null);
    s = await startOn(dir, ['--save', '']);
    r = new Redis({ port: s.port, protocol: 2 });
    try {
      expect(await observe(r)).toEqual(before);
      // Its end is where it was: fresh at T0 + 120 s.
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0 + 120_000));
      expect(await r.call('RL.SLIDINGWINDOW', 'b:plain', '5', '60000')).toEqual([0, 5, 4, -1, 120000, 0]);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  for (const fsync of ['always', 'everysec']) {
    it(`appendonly yes (${fsync}), kill -9: the journal's replay gives every block back as it was`, async () => {
      const dir = newDir();
      let s = await startOn(dir, ['--save', '', '--appendonly', 'yes', '--appendfsync', fsync]);
      let r = new Redis({ port: s.port, protocol: 2 });
      await writeBlocks(r);
      // A block that ended at its last instant and the key's new state after it, in one turn.
      await r.call('RL.BLOCK', 'b:ended', '10');
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0 + 10));
      await r.call('RL.FIXEDWINDOW', 'b:ended', '5', '600000');
      const before = await observe(r);
      const ended = [await r.type('b:ended'), await r.pttl('b:ended')];
      expect(ended[0]).toBe('fixedwindow');
      // everysec writes a turn's records a millisecond after the previous write at the latest.
      await r.call('DEBUG', 'SLEEP', '0.002');
      r.disconnect();
      expect(await s.stop('SIGKILL')).toBe(null);
      s = await startOn(dir, ['--save', '', '--appendonly', 'yes']);
      r = new Redis({ port: s.port, protocol: 2 });
      try {
        expect(s.logs.some((l) => l.includes('journal loaded from'))).toBe(true);
        expect(await observe(r)).toEqual(before);
        expect([await r.type('b:ended'), await r.pttl('b:ended')]).toEqual(ended);
      } finally {
        r.disconnect();
        await s.stop();
      }
    });
  }

  it('the loaders refuse a block entry holding state or a blob', () => {
    expect(entryProblem(BLOCK_TYPE, T0, 0, 0, 0, undefined)).toBeNull();
    expect(entryProblem(BLOCK_TYPE, T0, 1, 0, 0, undefined)).toMatch(/block state 1, 0, 0, expected 0, 0, 0/);
    expect(entryProblem(BLOCK_TYPE, T0, 0, 0, Number.NaN, undefined)).toMatch(/block state/);
    expect(entryProblem(BLOCK_TYPE, T0, 0, 0, 0, new Float64Array(2))).toMatch(/a block key carries a blob/);
    expect(entryProblem(BLOCK_TYPE, 1.5, 0, 0, 0, undefined)).toMatch(/expiry 1.5 is not an integer/);
  });
});
