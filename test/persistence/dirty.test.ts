/**
 * The keyspace's write counter behind the save policy and rdb_changes_since_last_save: every write
 * path counts, reads and expiry do not.
 */
import { describe, expect, it } from 'vitest';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';

describe('keyspace dirty counter', () => {
  it('counts state writes, blob writes, deletes and flushed keys', () => {
    const ks = new Keyspace();
    const a = ks.create('a', KeyType.Gcra);
    ks.setState(a, 1, 2);
    ks.setExpireAtMs(a, 10_000);
    expect(ks.dirty).toBe(1);
    ks.setBlob(a, new Float64Array([1]));
    expect(ks.dirty).toBe(2);
    ks.lookup('a', 0);
    ks.getA(a);
    expect(ks.dirty).toBe(2);
    for (const k of ['b', 'c']) ks.setState(ks.create(k, KeyType.Gcra), 0, 0);
    ks.setExpireAtMs(ks.lookup('b', 0), 10_000);
    ks.setExpireAtMs(ks.lookup('c', 0), 10_000);
    expect(ks.dirty).toBe(4);
    expect(ks.delete('a', 0)).toBe(true);
    expect(ks.delete('zzz', 0)).toBe(false);
    expect(ks.dirty).toBe(5);
    ks.clear();
    expect(ks.dirty).toBe(7);
  });
});
