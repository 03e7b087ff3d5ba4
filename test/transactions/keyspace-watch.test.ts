/**
 * The keyspace's WATCH hooks (src/keyspace/keyspace.ts): which changes mark a watch dirty, and
 * Redis's rule for a key that had already expired when it was watched (multi.c's wk->expired).
 */
import { describe, expect, it } from 'vitest';
import { Keyspace, type WatchOwner } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';

function keyWith(ks: Keyspace, key: string, expireAtMs: number): number {
  const slot = ks.create(key, KeyType.Gcra);
  ks.setState(slot, 1, 2);
  ks.setExpireAtMs(slot, expireAtMs);
  return slot;
}

describe('Keyspace watches', () => {
  it('a state write, a delete, a create, eviction and expiry each mark the owner; other keys do not', () => {
    const cases: [string, (ks: Keyspace) => void][] = [
      ['write', (ks) => ks.setState(ks.lookup('k', 0), 3, 4)],
      ['blob', (ks) => ks.setBlob(ks.lookup('k', 0), new Float64Array(2))],
      ['delete', (ks) => ks.delete('k', 0)],
      ['evict', (ks) => ks.evictSlot(ks.lookup('k', 0))],
      ['lazy expiry', (ks) => ks.lookup('k', 2000)],
      ['active expiry', (ks) => ks.expireStep(2000, 1000, () => false)],
      ['flush', (ks) => ks.clear()],
    ];
    for (const [what, change] of cases) {
      const ks = new Keyspace();
      keyWith(ks, 'k', 1000);
      keyWith(ks, 'other', 1000);
      const owner: WatchOwner = { dirty: false };
      const w = ks.watch(owner, 'k', 0)!;
      expect(w.expired).toBe(false);
      ks.setState(ks.lookup('other', 0), 9, 9);
      expect(owner.dirty, what).toBe(false);
      change(ks);
      expect(owner.dirty, what).toBe(true);
    }
  });

  it('a key created after WATCH marks it; deleting a missing key or FLUSH without it does not', () => {
    const ks = new Keyspace();
    const owner: WatchOwner = { dirty: false };
    ks.watch(owner, 'new', 0);
    ks.delete('new', 0);
    ks.clear();
    expect(owner.dirty).toBe(false);
    keyWith(ks, 'new', 1000);
    expect(owner.dirty).toBe(true);
  });

  it('expired when watched: its removal is no change, its re-creation is; expired later: EXEC sees it', () => {
    const ks = new Keyspace();
    keyWith(ks, 'k', 1000);
    const owner: WatchOwner = { dirty: false };
    const w = ks.watch(owner, 'k', 1500)!;
    expect(w.expired).toBe(true);
    expect(ks.watchedKeyExpired([w], 1500)).toBe(false);
    expect(ks.lookup('k', 1500)).toBe(-1); // removed: no logical change
    expect(owner.dirty).toBe(false);
    expect(w.expired).toBe(false);
    keyWith(ks, 'k', 5000);
    expect(owner.dirty).toBe(true);

    const later: WatchOwner = { dirty: false };
    const w2 = ks.watch(later, 'k', 1500)!;
    expect(ks.watchedKeyExpired([w2], 5000)).toBe(false);
    expect(ks.watchedKeyExpired([w2], 5001)).toBe(true);
  });

  it('unwatch removes the watch: later changes mark nothing', () => {
    const ks = new Keyspace();
    keyWith(ks, 'k', 1000);
    const owner: WatchOwner = { dirty: false };
    const w = ks.watch(owner, 'k', 0)!;
    expect(ks.watch(owner, 'k', 0)).toBeNull(); // the same key twice is one watch
    ks.unwatch([w]);
    ks.delete('k', 0);
    expect(owner.dirty).toBe(false);
  });

  it('one watcher per key is kept without a list; a second and a third make one, unwatching takes it back to one entry', () => {
    const ks = new Keyspace();
    keyWith(ks, 'k', 1000);
    const owners: WatchOwner[] = [{ dirty: false }, { dirty: false }, { dirty: false }];
    const watches = owners.map((o) => ks.watch(o, 'k', 0)!);
    expect(ks.watch(owners[1], 'k', 0)).toBeNull(); // twice for the same owner is one watch
    expect(ks.watchedKeyCount).toBe(1);
    ks.unwatchOne(watches[0]);
    ks.unwatch([watches[2]]);
    ks.setState(ks.lookup('k', 0), 3, 4);
    expect(owners.map((o) => o.dirty)).toEqual([false, true, false]);
    // Unwatching a watch twice (a slice after a sync release) changes nothing.
    ks.unwatchOne(watches[0]);
    expect(ks.watchedKeyCount).toBe(1);
    ks.unwatchOne(watches[1]);
    expect(ks.watchedKeyCount).toBe(0);
    owners[1].dirty = false;
    ks.setState(ks.lookup('k', 0), 5, 6);
    expect(owners[1].dirty).toBe(false);
  });
});
