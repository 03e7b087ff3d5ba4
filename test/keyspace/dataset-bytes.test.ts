/**
 * Keyspace.datasetBytes, what maxmemory limits (src/server/memory.ts): counted exactly, so it comes
 * back down by a key's cost when the key goes, whatever the way (delete, expiry, eviction, flush).
 */
import { describe, expect, it } from 'vitest';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';

const RECORD = 64;
const TABLE = 1024 * 4; // the initial index table
const BLOB_OVERHEAD = 160;

describe('Keyspace.datasetBytes', () => {
  it('a short key costs its record; a long key its record and its arena chunk', () => {
    const ks = new Keyspace();
    expect(ks.datasetBytes).toBe(TABLE);
    const a = ks.create('a', KeyType.Gcra);
    ks.setExpireAtMs(a, 1e12);
    expect(ks.datasetBytes).toBe(TABLE + RECORD);
    const long = ks.create('x'.repeat(100), KeyType.Gcra); // 100 bytes: the 112-byte size class
    ks.setExpireAtMs(long, 1e12);
    expect(ks.datasetBytes).toBe(TABLE + 2 * RECORD + 112);
    expect(ks.delete('x'.repeat(100), 0)).toBe(true);
    expect(ks.datasetBytes).toBe(TABLE + RECORD);
    expect(ks.delete('a', 0)).toBe(true);
    expect(ks.datasetBytes).toBe(TABLE);
  });

  it('blobs count their bytes once, replaced or updated in place, and go with their key', () => {
    const ks = new Keyspace();
    const s = ks.create('log', KeyType.SlidingLog);
    ks.setExpireAtMs(s, 1000);
    const small = new Float64Array(8);
    ks.setBlob(s, small);
    expect(ks.datasetBytes).toBe(TABLE + RECORD + 64 + BLOB_OVERHEAD);
    ks.getBlob(s);
    ks.setBlob(s, small); // updated in place
    expect(ks.datasetBytes).toBe(TABLE + RECORD + 64 + BLOB_OVERHEAD);
    ks.setBlob(s, new Float64Array(32)); // grown: the old one no longer counts
    expect(ks.datasetBytes).toBe(TABLE + RECORD + 256 + BLOB_OVERHEAD);
    // Expired: found by lookup, gone, blob and all.
    expect(ks.lookup('log', 1001)).toBe(-1);
    ks.scan(0, 10, 1001, () => {});
    expect(ks.datasetBytes).toBe(TABLE);
    // Evicted, and flushed.
    const t = ks.create('log2', KeyType.SlidingLog);
    ks.setExpireAtMs(t, 1e12);
    ks.setBlob(t, new Float64Array(4));
    ks.evictSlot(t);
    expect(ks.datasetBytes).toBe(TABLE);
    const u = ks.create('log3', KeyType.SlidingLog);
    ks.setExpireAtMs(u, 1e12);
    ks.setBlob(u, new Float64Array(4));
    ks.clear();
    expect(ks.datasetBytes).toBe(TABLE);
  });

  it('10,000 keys created and all removed again: back to the same figure as the table after growing', () => {
    const ks = new Keyspace();
    const slots: number[] = [];
    for (let i = 0; i < 10_000; i++) {
      const slot = ks.create(`key:${i}`, KeyType.TokenBucket);
      ks.setExpireAtMs(slot, 1e12);
      slots.push(slot);
    }
    const full = ks.datasetBytes;
    for (let i = 0; i < 5000; i++) ks.evictSlot(slots[i]);
    expect(full - ks.datasetBytes).toBe(5000 * RECORD);
    for (let i = 5000; i < 10_000; i++) ks.evictSlot(slots[i]);
    expect(full - ks.datasetBytes).toBe(10_000 * RECORD);
  });
});
