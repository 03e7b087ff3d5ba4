/**
 * What the in-process persistence property tests compare: a keyspace's live content (key, type,
 * expiry, A, B, C, blob), and the key names and types they draw from.
 */
import { Keyspace, type EvictionPolicy } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';

export interface Entry {
  type: number;
  expireAtMs: number;
  a: number;
  b: number;
  c: number;
  blob: number[] | null;
}

export const TYPES = [KeyType.Gcra, KeyType.TokenBucket, KeyType.LeakyBucket, KeyType.FixedWindow, KeyType.SlidingLog, KeyType.SlidingWindow];
export const POLICIES: EvictionPolicy[] = ['allkeys-random', 'volatile-ttl', 'allkeys-lru'];

/** Key names: short (in the record) and long (in the key arena, whose chunks are reused). */
export function keyName(i: number): string {
  return i % 7 === 0 ? `a-long-key-name-kept-in-the-arena:${i}` : `k${i}`;
}

export function contentOf(ks: Keyspace, nowMs: number): Map<string, Entry> {
  const out = new Map<string, Entry>();
  ks.forEachLive(nowMs, (slot) => {
    const blob = ks.getBlob(slot);
    out.set(ks.keyOf(slot), {
      type: ks.typeOf(slot), expireAtMs: ks.expireAtMs(slot), a: ks.getA(slot), b: ks.getB(slot), c: ks.getC(slot), blob: blob === undefined ? null : [...blob],
    });
  });
  return out;
}
