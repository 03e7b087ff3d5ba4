/**
 * The keyspace on its own: slots, lazy expiry at the millisecond edge, bounded active expiry, SCAN
 * cursors that stay valid while keys come and go, and per-type counts.
 */
import { describe, expect, it } from 'vitest';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';
import { globMatch } from '../../src/glob.js';

function put(ks: Keyspace, key: string, expireAtMs: number): number {
  const slot = ks.create(key, KeyType.Gcra);
  ks.setExpireAtMs(slot, expireAtMs);
  ks.setState(slot, expireAtMs * 1000, 0);
  return slot;
}

describe('Keyspace', () => {
  it('a key lives while now <= expireAt and is gone after', () => {
    const ks = new Keyspace();
    put(ks, 'k', 1000);
    expect(ks.lookup('k', 999)).not.toBe(-1);
    expect(ks.lookup('k', 1000)).not.toBe(-1);
    expect(ks.lookup('k', 1001)).toBe(-1);
    expect(ks.size).toBe(0);
    expect(ks.expiredCount).toBe(1);
  });

  it('an expired key found by lookup is gone, and re-creating it at once reuses its slot', () => {
    const ks = new Keyspace();
    const a = put(ks, 'a', 100);
    put(ks, 'b', 1e12);
    expect(ks.lookup('a', 101)).toBe(-1);
    expect(ks.size).toBe(1);
    expect(ks.countOfType(KeyType.Gcra)).toBe(1);
    expect(ks.create('a', KeyType.Gcra)).toBe(a);
    expect(ks.size).toBe(2);
    expect(ks.countOfType(KeyType.Gcra)).toBe(2);
    // Found expired, then not re-created: every other operation sees it gone.
    expect(ks.lookup('a', 1e9)).toBe(-1);
    const seen: string[] = [];
    ks.scan(0, 100, 1e9, (slot) => seen.push(ks.keyOf(slot)));
    expect(seen).toEqual(['b']);
    expect(ks.size).toBe(1);
    // Found expired, then another key created: the new key does not take over the old entry.
    put(ks, 'c', 50);
    expect(ks.lookup('c', 51)).toBe(-1);
    const d = put(ks, 'd', 1e12);
    expect(ks.lookup('c', 51)).toBe(-1);
    expect(ks.lookup('d', 51)).toBe(d);
    expect(ks.size).toBe(2);
    expect(ks.delete('b', 51)).toBe(true);
    expect(ks.size).toBe(1);
  });

  it('reuses freed slots and keeps state per slot', () => {
    const ks = new Keyspace();
    const a = put(ks, 'a', 10);
    const b = put(ks, 'b', 20);
    expect(ks.getA(b)).toBe(20_000);
    expect(ks.delete('a', 0)).toBe(true);
    expect(ks.delete('a', 0)).toBe(false);
    const c = put(ks, 'c', 30);
    expect(c).toBe(a);
    expect(ks.getA(c)).toBe(30_000);
    expect(ks.countOfType(KeyType.Gcra)).toBe(2);
  });

  it('grows past its initial capacity', () => {
    const ks = new Keyspace();
    for (let i = 0; i < 5000; i++) put(ks, `k${i}`, 1e12);
    expect(ks.size).toBe(5000);
    for (let i = 0; i < 5000; i++) expect(ks.getA(ks.lookup(`k${i}`, 0))).toBe(1e15);
  });

  it('the active expiry step is bounded and eventually reclaims everything', () => {
    const ks = new Keyspace();
    for (let i = 0; i < 10_000; i++) put(ks, `k${i}`, i < 6000 ? 100 : 1e12);
    let removed = 0;
    let steps = 0;
    while (removed < 6000) {
      const n = ks.expireStep(101, 1000, () => false);
      expect(n).toBeLessThanOrEqual(1000);
      removed += n;
      steps++;
    }
    expect(steps).toBeGreaterThanOrEqual(6);
    expect(ks.size).toBe(4000);
    // A step stops early when its time is up (checked every 256 slots).
    for (let i = 0; i < 10_000; i++) put(ks, `e${i}`, 5);
    expect(ks.expireStep(6, 1 << 20, () => true)).toBeLessThanOrEqual(256);
  });

  it('SCAN returns every key present for the whole walk exactly once', () => {
    const ks = new Keyspace();
    for (let i = 0; i < 3000; i++) put(ks, `k${i}`, 1e12);
    const seen = new Map<string, number>();
    let cursor = 0;
    let round = 0;
    do {
      cursor = ks.scan(cursor, 100, 0, (slot) => seen.set(ks.keyOf(slot), (seen.get(ks.keyOf(slot)) ?? 0) + 1));
      // Churn during the walk: delete some keys, add others.
      ks.delete(`k${2999 - round}`, 0);
      put(ks, `new${round}`, 1e12);
      round++;
    } while (cursor !== 0);
    for (let i = 0; i < 3000 - round; i++) expect(seen.get(`k${i}`)).toBe(1);
    for (const n of seen.values()) expect(n).toBe(1);
  });
});

describe('globMatch (Redis stringmatch)', () => {
  const cases: [string, string, boolean][] = [
    ['*', '', true],
    ['*', 'anything', true],
    ['a?c', 'abc', true],
    ['a?c', 'ac', false],
    ['user:*', 'user:1', true],
    ['user:*:x', 'user:1:2:x', true],
    ['[abc]x', 'bx', true],
    ['[^abc]x', 'bx', false],
    ['[a-c]x', 'cx', true],
    ['[c-a]x', 'bx', true],
    ['a\\*b', 'a*b', true],
    ['a\\*b', 'aXb', false],
    ['*a*a*a*a*a*a*a*a*b', 'a'.repeat(60), false],
    ['h\xe9*', 'h\xe9llo', true],
  ];
  for (const [pattern, text, expected] of cases) {
    it(`${JSON.stringify(pattern)} ~ ${JSON.stringify(text)} → ${expected}`, () => {
      expect(globMatch(pattern, text)).toBe(expected);
    });
  }
});
