/**
 * Eviction victims on the keyspace alone (src/keyspace/keyspace.ts sampleVictim/evictSlot): each
 * policy picks what it should among the sampled keys, the LRU clock follows lookups, and evicting
 * counts as a write and as an eviction, never as an expiry.
 */
import { describe, expect, it } from 'vitest';
import { Keyspace, type EvictionPolicy } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';

function seeded(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 4294967296;
  };
}

function fill(ks: Keyspace, n: number, expireAt: (i: number) => number): void {
  for (let i = 0; i < n; i++) {
    const slot = ks.create(`k${i}`, KeyType.TokenBucket);
    ks.setExpireAtMs(slot, expireAt(i));
  }
}

function evict(ks: Keyspace, policy: EvictionPolicy, n: number, random: () => number): void {
  for (let i = 0; i < n; i++) {
    const slot = ks.sampleVictim(policy, 5, random);
    expect(slot).not.toBe(-1);
    ks.evictSlot(slot);
  }
}

describe('eviction victims', () => {
  it('volatile-ttl evicts keys closest to their expiry (back to fresh soonest) first', () => {
    const ks = new Keyspace();
    fill(ks, 10_000, (i) => 1e12 + (i % 2 === 0 ? 1000 : 1e9) + i);
    const dirty = ks.dirty;
    evict(ks, 'volatile-ttl', 4000, seeded(1));
    let longLost = 0;
    for (let i = 1; i < 10_000; i += 2) if (ks.lookup(`k${i}`, 0) === -1) longLost++;
    // With 5 samples a long-TTL key is chosen only when all 5 are long-TTL keys.
    expect(longLost).toBeLessThan(100);
    expect(ks.size).toBe(6000);
    expect(ks.evictedCount).toBe(4000);
    expect(ks.expiredCount).toBe(0);
    expect(ks.dirty).toBe(dirty + 4000);
  });

  it('allkeys-lru evicts the least recently looked up, in server-clock seconds', () => {
    const ks = new Keyspace();
    ks.lookup('nothing', 1_000_000); // the clock the next creations are stamped with: 1000 s
    fill(ks, 5000, () => 1e13);
    for (let i = 0; i < 500; i++) expect(ks.lookup(`k${i}`, 2_000_000)).not.toBe(-1); // touched at 2000 s
    expect(ks.lastAccessSec(ks.lookup('k0', 2_000_000))).toBe(2000);
    evict(ks, 'allkeys-lru', 4000, seeded(2));
    let hotLost = 0;
    for (let i = 0; i < 500; i++) if (ks.lookup(`k${i}`, 2_000_000) === -1) hotLost++;
    expect(hotLost).toBeLessThan(10);
  });

  it('allkeys-random evicts from everywhere; an empty keyspace has no victim', () => {
    const ks = new Keyspace();
    fill(ks, 2000, (i) => 1e12 + i);
    evict(ks, 'allkeys-random', 1000, seeded(3));
    let lowLost = 0;
    for (let i = 0; i < 1000; i++) if (ks.lookup(`k${i}`, 0) === -1) lowLost++;
    expect(lowLost).toBeGreaterThan(350);
    expect(lowLost).toBeLessThan(650);
    evict(ks, 'allkeys-random', 1000, seeded(4));
    expect(ks.size).toBe(0);
    expect(ks.sampleVictim('volatile-ttl', 5, seeded(5))).toBe(-1);
  });

  it('finds the last keys of a sparse slot range', () => {
    const ks = new Keyspace();
    fill(ks, 100_000, () => 1e13);
    for (let i = 0; i < 100_000; i++) if (i !== 77_777) ks.delete(`k${i}`, 0);
    const slot = ks.sampleVictim('allkeys-lru', 5, seeded(6));
    expect(slot).not.toBe(-1);
    ks.evictSlot(slot);
    expect(ks.size).toBe(0);
  });
});
