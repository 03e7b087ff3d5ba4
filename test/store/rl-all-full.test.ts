/**
 * RL.ALL is all or nothing at the keyspace's bound too: when the keys it would create do not fit,
 * it is refused before any of them is written (the dispatcher answers KeyspaceFullError with OOM).
 */
import { describe, expect, it } from 'vitest';
import { lookupCommand } from '../../src/commands/table.js';
import type { CommandContext } from '../../src/commands/types.js';
import { Keyspace, KeyspaceFullError } from '../../src/keyspace/keyspace.js';
import { PAGE_SLOTS } from '../../src/keyspace/key-table.js';
import { commandArgs as args } from '../helpers/command-args.js';
import { ReplyWriter } from '../../src/protocol/reply-writer.js';
import { Stats } from '../../src/server/stats.js';
import { LocalLimiterStore } from '../../src/store/local-limiter.js';
import { KeyType } from '../helpers/key-types.js';

describe('RL.ALL at the keyspace bound', () => {
  it('writes none of its keys when the new ones do not all fit, all of them when they do', () => {
    const ks = new Keyspace(PAGE_SLOTS);
    for (let i = 0; i < PAGE_SLOTS - 1; i++) ks.setExpireAtMs(ks.create(`k:${i}`, KeyType.Gcra), 1e15);
    const reply = new ReplyWriter();
    const ctx = { limiter: new LocalLimiterStore(ks, new Stats()), reply, client: null, nowUs: 1_000_000, nowMs: 1000 } as unknown as CommandContext;
    const spec = lookupCommand('rl.all')!;
    const two = args('RL.ALL', '2', 'a', 'FIXEDWINDOW', '10', '1000', 'b', 'FIXEDWINDOW', '10', '1000');
    expect(() => spec.run!(ctx, two)).toThrow(KeyspaceFullError);
    expect(ks.lookup('a', 1000)).toBe(-1);
    expect(ks.lookup('b', 1000)).toBe(-1);
    expect(ks.size).toBe(PAGE_SLOTS - 1);
    // One new key fits: RL.ALL runs and writes it.
    spec.run!(ctx, args('RL.ALL', '2', 'a', 'FIXEDWINDOW', '10', '1000', 'k:1', 'GCRA', '10', '1000'));
    expect(reply.take().toString('latin1')).toMatch(/^\*3\r\n:0\r\n/);
    expect(ks.lookup('a', 1000)).not.toBe(-1);
    expect(ks.size).toBe(PAGE_SLOTS);
  });
});
