/**
 * The key table's tags (the hash's top bits in each table entry, so a probe reads a record only where
 * the tag matches) and its bound on slots: keys crafted to share a tag and a home position, keys whose
 * whole 32-bit hashes are equal, a fast-check property against a Map oracle with the table growing
 * one position per write, the entries' invariant checked after every step, and a keyspace that refuses
 * a key beyond its bound without changing anything.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { KeyTable, KeyspaceFullError, MAX_SLOTS, PAGE_SLOTS } from '../../src/keyspace/key-table.js';
import { hashKey } from '../../src/keyspace/key-hash.js';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';

const TAG_SHIFT = 25;
const SLOT_MASK = 0xffffff;

function hashOf(key: string): number {
  const b = Buffer.from(key, 'latin1');
  return hashKey(b, 0, b.length);
}

function find(t: KeyTable, key: string): number {
  const b = Buffer.from(key, 'latin1');
  return t.find(b, 0, b.length, hashKey(b, 0, b.length));
}

function insert(t: KeyTable, key: string, slot: number): void {
  const b = Buffer.from(key, 'latin1');
  t.insert(b, 0, b.length, hashKey(b, 0, b.length), slot);
}

function tableFor(slots: number, step?: number): KeyTable {
  const t = new KeyTable(step);
  while (t.capacity < slots) t.addPage();
  return t;
}

/**
 * `count` keys that share one tag and whose homes in a table of 1024 positions (the first size) fall
 * in [0, 16): their entries make one run, in which every probe meets equal tags. The secret hash is
 * this process's, so the search is made here (about 8,192 keys hashed per key found).
 */
function sameTagKeys(count: number, prefix: string): string[] {
  const byTag = new Map<number, string[]>();
  for (let i = 0; ; i++) {
    const key = `${prefix}${i}`;
    const h = hashOf(key);
    if ((h & 1023) >= 16) continue;
    const tag = h >>> TAG_SHIFT;
    const group = byTag.get(tag) ?? [];
    group.push(key);
    byTag.set(tag, group);
    if (group.length === count) return group;
  }
}

/** Pairs of different keys with equal 32-bit hashes (so equal tags and homes at every size). */
function equalHashPairs(pairs: number): Array<[string, string]> {
  const seen = new Map<number, string>();
  const found: Array<[string, string]> = [];
  for (let i = 0; found.length < pairs; i++) {
    const key = `c:${i}`;
    const h = hashOf(key);
    const other = seen.get(h);
    if (other !== undefined) found.push([other, key]);
    else seen.set(h, key);
  }
  return found;
}

/** Every entry of the table (and of the old one while it grows) holds its key's tag and a live slot. */
function checkEntries(t: KeyTable, live: Map<number, string>): void {
  const inner = t as unknown as { table: Int32Array; old: Int32Array | null };
  let entries = 0;
  for (const table of inner.old === null ? [inner.table] : [inner.table, inner.old]) {
    for (const entry of table) {
      if (entry === 0) continue;
      entries++;
      expect(entry).toBeGreaterThan(0);
      const slot = (entry & SLOT_MASK) - 1;
      const key = live.get(slot);
      expect(key).toBeDefined();
      expect(entry >>> 24).toBe(hashOf(key!) >>> TAG_SHIFT);
      expect(t.hashOf(slot)).toBe(hashOf(key!));
    }
  }
  expect(entries).toBe(live.size);
}

describe('KeyTable tags', () => {
  it('keeps keys that share a tag and a home apart, through growth and back-shifts', () => {
    const keys = sameTagKeys(40, 't:');
    const t = tableFor(4096, 1);
    const live = new Map<number, string>();
    keys.forEach((key, slot) => {
      insert(t, key, slot);
      live.set(slot, key);
    });
    // Other keys, so the table grows while the tagged run is in it (a position moved per write).
    for (let i = 0; i < 1200; i++) {
      insert(t, `o:${i}`, 100 + i);
      live.set(100 + i, `o:${i}`);
    }
    checkEntries(t, live);
    keys.forEach((key, slot) => expect(find(t, key)).toBe(slot));
    // Absent keys with the same tag and home: every probe of them meets equal tags, none is found.
    for (const absent of sameTagKeys(40, 'absent:')) expect(find(t, absent)).toBe(-1);
    // Remove every other tagged key (back-shifts inside the run), then find the rest.
    for (let slot = 0; slot < keys.length; slot += 2) {
      t.remove(slot);
      live.delete(slot);
    }
    checkEntries(t, live);
    keys.forEach((key, slot) => expect(find(t, key)).toBe(slot % 2 === 0 ? -1 : slot));
  });

  it('tells apart keys whose whole hashes are equal, by their bytes', () => {
    const pairs = equalHashPairs(3);
    const t = tableFor(PAGE_SLOTS, 1);
    const live = new Map<number, string>();
    // The pairs go in while the table grows (filler keys past its first growth point).
    for (let i = 0; i < 720; i++) {
      insert(t, `f:${i}`, 100 + i);
      live.set(100 + i, `f:${i}`);
    }
    pairs.forEach(([a, b], i) => {
      expect(a).not.toBe(b);
      insert(t, a, 2 * i);
      live.set(2 * i, a);
      expect(find(t, b)).toBe(-1);
      insert(t, b, 2 * i + 1);
      live.set(2 * i + 1, b);
    });
    checkEntries(t, live);
    pairs.forEach(([a, b], i) => {
      expect(find(t, a)).toBe(2 * i);
      expect(find(t, b)).toBe(2 * i + 1);
    });
    // Removing one of a pair leaves the other found, whichever was inserted first.
    t.remove(0);
    t.remove(3);
    live.delete(0);
    live.delete(3);
    checkEntries(t, live);
    expect(find(t, pairs[0][0])).toBe(-1);
    expect(find(t, pairs[0][1])).toBe(1);
    expect(find(t, pairs[1][0])).toBe(2);
    expect(find(t, pairs[1][1])).toBe(-1);
  });

  it('matches a Map oracle over any sequence of inserts, removals and finds (fast-check)', () => {
    const tagged = sameTagKeys(24, 'p:');
    const [[hashA, hashB]] = equalHashPairs(1);
    // A universe mixing crafted collisions with plain keys, small enough that operations meet.
    const universe = [...tagged, hashA, hashB, ...Array.from({ length: 40 }, (_, i) => `u:${i}`)];
    const op = fc.record({ kind: fc.constantFrom('insert', 'insert', 'remove', 'find'), key: fc.nat(universe.length - 1) });
    fc.assert(
      // Filler keys first, just under the first table's growth point (716 of 1024 positions), so the
      // operations' inserts start the growth and the rest runs while entries move.
      fc.property(fc.constantFrom(1, 2, 3, 128), fc.integer({ min: 680, max: 716 }), fc.array(op, { maxLength: 400 }), (step, fillers, ops) => {
        const t = tableFor(PAGE_SLOTS, step);
        const model = new Map<string, number>();
        const live = new Map<number, string>();
        const free: number[] = [];
        let next = 0;
        for (; next < fillers; next++) {
          insert(t, `f:${next}`, next);
          live.set(next, `f:${next}`);
        }
        for (const { kind, key: k } of ops) {
          const key = universe[k];
          const slot = model.get(key);
          if (kind === 'find') {
            expect(find(t, key)).toBe(slot ?? -1);
          } else if (kind === 'insert' && slot === undefined) {
            const s = free.pop() ?? next++;
            insert(t, key, s);
            model.set(key, s);
            live.set(s, key);
          } else if (kind === 'remove' && slot !== undefined) {
            t.remove(slot);
            model.delete(key);
            live.delete(slot);
            free.push(slot);
          }
          expect(t.size).toBe(model.size + fillers);
        }
        checkEntries(t, live);
        for (const key of universe) expect(find(t, key)).toBe(model.get(key) ?? -1);
      }),
      { numRuns: 100 },
    );
  });
});

describe('the bound on slots', () => {
  it('leaves every slot + 1 below the tag bits, in whole pages', () => {
    expect(MAX_SLOTS % PAGE_SLOTS).toBe(0);
    expect(MAX_SLOTS).toBeLessThanOrEqual(SLOT_MASK);
    expect(MAX_SLOTS + PAGE_SLOTS).toBeGreaterThan(SLOT_MASK);
    // The table's positions (at most MAX_SLOTS / 0.7, a power of two) stay below the tag's bits.
    expect(MAX_SLOTS / 0.7).toBeLessThan(2 ** TAG_SHIFT);
  });

  it('a table refuses a page past its bound', () => {
    const t = new KeyTable(undefined, 2 * PAGE_SLOTS);
    t.addPage();
    t.addPage();
    expect(() => t.addPage()).toThrow(KeyspaceFullError);
    expect(t.capacity).toBe(2 * PAGE_SLOTS);
  });

  it('a full keyspace refuses a new key with a clear error and changes nothing; a freed slot is taken again', () => {
    const ks = new Keyspace(PAGE_SLOTS);
    const far = 1e15;
    for (let i = 0; i < PAGE_SLOTS; i++) {
      const slot = ks.create(`k:${i}`, KeyType.Gcra);
      ks.setState(slot, 1, 2);
      ks.setExpireAtMs(slot, far);
    }
    const dirty = ks.dirty;
    expect(() => ks.create('one:more', KeyType.Gcra)).toThrow(KeyspaceFullError);
    expect(() => ks.create('one:more', KeyType.Gcra)).toThrow(/keyspace full: it holds 4096 keys/);
    expect(ks.size).toBe(PAGE_SLOTS);
    expect(ks.dirty).toBe(dirty);
    expect(ks.lookup('one:more', 0)).toBe(-1);
    expect(ks.countOfType(KeyType.Gcra)).toBe(PAGE_SLOTS);
    for (let i = 0; i < PAGE_SLOTS; i += 97) expect(ks.getA(ks.lookup(`k:${i}`, 0))).toBe(1);
    // A key deleted frees its slot for the next one; FLUSH keeps the bound.
    expect(ks.delete('k:7', 0)).toBe(true);
    const slot = ks.create('one:more', KeyType.Gcra);
    ks.setExpireAtMs(slot, far);
    expect(ks.lookup('one:more', 0)).toBe(slot);
    ks.clear();
    for (let i = 0; i < PAGE_SLOTS; i++) ks.create(`again:${i}`, KeyType.Gcra);
    expect(() => ks.create('again:x', KeyType.Gcra)).toThrow(KeyspaceFullError);
  });
});
