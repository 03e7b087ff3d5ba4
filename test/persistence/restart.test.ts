/**
 * A restart continues every limiter from its saved state: not refilled, not lost. Real processes,
 * real files: state is written by SIGTERM's final snapshot and read back by the next process.
 */
import { describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { TYPE_NAMES } from '../helpers/key-types.js';
import { info, startOn, T0_AHEAD_MS, tempDirsForFile } from './helpers.js';

const newDir = tempDirsForFile();

const T0 = T0_AHEAD_MS;

describe('restart', () => {
  it('CL.THROTTLE and GCRA keys keep their remaining count across SIGTERM and restart', async () => {
    const dir = newDir();
    let s = await startOn(dir);
    let r = new Redis(s.port);
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    for (let i = 0; i < 3; i++) await r.call('CL.THROTTLE', 'cell', 5, 10, 60);
    expect(await r.call('CL.THROTTLE', 'cell', 5, 10, 60, 0)).toEqual([0, 6, 3, -1, 18]);
    await r.call('GCRA', 'native', 9, 10, 60, 'TOKENS', 4);
    const gcraBefore = await r.call('GCRA', 'native', 9, 10, 60, 'TOKENS', 1);
    const pttlBefore = await r.pttl('cell');
    r.disconnect();
    expect(await s.stop('SIGTERM')).toBe(0);
    expect(existsSync(join(dir, 'cellgate.snap'))).toBe(true);

    s = await startOn(dir);
    r = new Redis(s.port);
    try {
      const loaded = s.logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => String(l.msg).startsWith('snapshot loaded'))!;
      expect(loaded).toMatchObject({ keys: 2, expired: 0, file: join(dir, 'cellgate.snap') });
      expect(typeof loaded.ms).toBe('number');
      expect((await info(r)).rdb_last_load_keys_loaded).toBe('2');
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      expect(await r.pttl('cell')).toBe(pttlBefore);
      expect(await r.type('cell')).toBe('gcra');
      // Same instant: exactly the saved state.
      expect(await r.call('CL.THROTTLE', 'cell', 5, 10, 60, 0)).toEqual([0, 6, 3, -1, 18]);
      // 6 s later (one emission interval): one token back, as if the server had never stopped.
      await r.call('DEBUG', 'CLOCK', 'ADVANCE', '6000');
      expect(await r.call('CL.THROTTLE', 'cell', 5, 10, 60, 0)).toEqual([0, 6, 4, -1, 12]);
      await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
      const gcraAfter = (await r.call('GCRA', 'native', 9, 10, 60, 'TOKENS', 1)) as number[];
      // The second TOKENS 1 call spends one more than before the restart.
      expect(gcraAfter[2]).toBe((gcraBefore as number[])[2] - 1);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('every key type with a limiter command comes back identical (iterates the KeyType names)', async () => {
    const dir = newDir();
    let s = await startOn(dir);
    let r = new Redis(s.port);
    const commands = new Set((await r.call('COMMAND', 'LIST')) as string[]);
    // gcra is CL.THROTTLE's type; every other type is RL.<NAME>, when this build has it.
    const probes: { type: string; key: string; spend: (string | number)[]; peek: (string | number)[] }[] = [];
    for (const name of Object.values(TYPE_NAMES)) {
      const key = `t:${name}`;
      if (name === 'gcra') {
        probes.push({ type: name, key, spend: ['CL.THROTTLE', key, 9, 10, 60], peek: ['CL.THROTTLE', key, 9, 10, 60, 0] });
      } else if (commands.has(`rl.${name}`)) {
        const cmd = `RL.${name.toUpperCase()}`;
        probes.push({ type: name, key, spend: [cmd, key, 10, 60_000], peek: [cmd, key, 10, 60_000, 'COST', 0] });
      }
    }
    expect(probes.length).toBeGreaterThanOrEqual(1);
    console.log(`restart: key types covered: ${probes.map((p) => p.type).join(', ')}`);
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    const before = new Map<string, unknown>();
    for (const p of probes) {
      for (let i = 0; i < 3; i++) {
        await r.call('DEBUG', 'CLOCK', 'ADVANCE', '250');
        await r.call(p.spend[0] as string, ...p.spend.slice(1));
      }
      expect(await r.type(p.key)).toBe(p.type);
    }
    for (const p of probes) before.set(p.key, [await r.call(p.peek[0] as string, ...p.peek.slice(1)), await r.pttl(p.key)]);
    const clockAt = (await r.call('TIME')) as string[];
    r.disconnect();
    expect(await s.stop('SIGINT')).toBe(0);

    s = await startOn(dir);
    r = new Redis(s.port);
    try {
      await r.call('DEBUG', 'CLOCK', 'SET', `${clockAt[0]}${String(Math.floor(Number(clockAt[1]) / 1000)).padStart(3, '0')}.${String(Number(clockAt[1]) % 1000).padStart(3, '0')}`);
      for (const p of probes) {
        expect(await r.type(p.key), p.type).toBe(p.type);
        expect([await r.call(p.peek[0] as string, ...p.peek.slice(1)), await r.pttl(p.key)], p.type).toEqual(before.get(p.key));
      }
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('drops keys that expired while the server was down', async () => {
    const dir = newDir();
    let s = await startOn(dir);
    let r = new Redis(s.port);
    await r.call('DEBUG', 'CLOCK', 'SET', String(T0));
    await r.call('CL.THROTTLE', 'fresh', 5, 10, 60);
    // Saved at a server time an hour ago, when 'old' (a minute's state) was live: by real time it is
    // long expired when the next process loads it.
    await r.call('DEBUG', 'CLOCK', 'SET', String(Date.now() - 3_600_000));
    await r.call('CL.THROTTLE', 'old', 5, 10, 60);
    expect(await r.save()).toBe('OK');
    expect(await r.dbsize()).toBe(2);
    r.disconnect();
    await s.stop('SIGKILL');

    s = await startOn(dir);
    r = new Redis(s.port);
    try {
      expect(await r.dbsize()).toBe(1);
      expect(await r.exists('fresh')).toBe(1);
      const i = await info(r);
      expect(i.rdb_last_load_keys_expired).toBe('1');
      expect(i.rdb_last_load_keys_loaded).toBe('1');
      expect(i.loading).toBe('0');
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  it('creates a missing dir (nested) and starts empty', async () => {
    const dir = join(newDir(), 'a', 'b');
    const s = await startOn(dir);
    try {
      expect(existsSync(dir)).toBe(true);
      expect(s.logs.some((l) => l.includes('no snapshot at'))).toBe(true);
    } finally {
      await s.stop();
    }
  });
});
