/**
 * The keyspace's own hash table and key arena, against a Map model: random inserts, finds and
 * removals (backward-shift deletion across wrap-around and growth), keys of every size class and
 * binary bytes, and the hash's spread.
 */
import { describe, expect, it } from 'vitest';
import { KeyTable } from '../../src/keyspace/key-table.js';
import { hashKey } from '../../src/keyspace/key-hash.js';

/** A small deterministic PRNG (mulberry32), so a failure replays. */
function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function bytesOf(key: string): Buffer {
  return Buffer.from(key, 'latin1');
}

function find(t: KeyTable, key: string): number {
  const b = bytesOf(key);
  return t.find(b, 0, b.length, hashKey(b, 0, b.length));
}

/** A table with records for slots [0, slots), moving `step` old positions per write while it grows. */
function tableFor(slots: number, step?: number): KeyTable {
  const t = new KeyTable(step);
  while (t.capacity < slots) t.addPage();
  return t;
}

function insert(t: KeyTable, key: string, slot: number): void {
  // At an offset inside a larger buffer, as keys arrive inside a request.
  const b = Buffer.concat([Buffer.from('*3\r\n$'), bytesOf(key), Buffer.from('\r\n')]);
  t.insert(b, 5, 5 + key.length, hashKey(b, 5, 5 + key.length), slot);
}

describe('KeyTable', () => {
  it('matches a Map model over random inserts, finds and removals', () => {
    const random = rng(7);
    // Three positions per write: the table spends most of its growth moving entries, with lookups,
    // inserts and removals going on meanwhile.
    const t = tableFor(1 << 16, 3);
    const model = new Map<string, number>();
    const freeSlots: number[] = [];
    let nextSlot = 0;
    for (let step = 0; step < 60_000; step++) {
      // A small key universe, so finds hit and inserts collide with removals.
      const key = `k:${Math.floor(random() * 5000)}`;
      const op = random();
      const slot = model.get(key);
      if (op < 0.45) {
        expect(find(t, key)).toBe(slot ?? -1);
      } else if (op < 0.75) {
        if (slot === undefined) {
          const s = freeSlots.pop() ?? nextSlot++;
          insert(t, key, s);
          model.set(key, s);
        }
      } else if (slot !== undefined) {
        t.remove(slot);
        model.delete(key);
        freeSlots.push(slot);
      }
      expect(t.size).toBe(model.size);
    }
    for (const [key, slot] of model) {
      expect(find(t, key)).toBe(slot);
      expect(t.keyOf(slot)).toBe(key);
    }
  });

  it('keeps every key reachable after every write while the table grows one position at a time', () => {
    const t = tableFor(4096, 1);
    const live: string[] = [];
    for (let i = 0; i < 1600; i++) {
      insert(t, `g:${i}`, i);
      live.push(`g:${i}`);
      if (i % 5 === 4) {
        // Removals mid-move too (backward shifts in whichever table holds the key).
        const victim = live.splice((i * 7) % live.length, 1)[0];
        t.remove(Number(victim.slice(2)));
      }
      const lost = live.filter((key) => find(t, key) !== Number(key.slice(2)));
      if (lost.length > 0) expect({ afterInsert: i, lost }).toEqual({ afterInsert: i, lost: [] });
    }
    expect(t.size).toBe(live.length);
  });

  it('stays correct when the table fills to its load limit and empties again', () => {
    const t = tableFor(1 << 16);
    const n = 50_000;
    for (let i = 0; i < n; i++) insert(t, `user:${i}`, i);
    for (let i = 0; i < n; i += 2) t.remove(i);
    for (let i = 0; i < n; i++) expect(find(t, `user:${i}`)).toBe(i % 2 === 0 ? -1 : i);
    for (let i = 1; i < n; i += 2) t.remove(i);
    expect(t.size).toBe(0);
    for (let i = 0; i < 100; i++) expect(find(t, `user:${i}`)).toBe(-1);
  });

  it('keeps keys of every size class and binary bytes exactly', () => {
    const lengths = [0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 19, 20, 21, 24, 25, 63, 64, 65, 80, 81, 1000, 4095, 4096, 4097, 70_000];
    const t = tableFor(64);
    const keys = lengths.map((len, i) => Array.from({ length: len }, (_, j) => String.fromCharCode((i * 31 + j * 7) & 255)).join(''));
    keys.forEach((key, slot) => insert(t, key, slot));
    keys.forEach((key, slot) => {
      expect(find(t, key)).toBe(slot);
      expect(t.keyOf(slot)).toBe(key);
      expect(t.keyLength(slot)).toBe(key.length);
      const copy = Buffer.alloc(key.length + 2);
      expect(t.copyKey(slot, copy, new DataView(copy.buffer, copy.byteOffset, copy.byteLength), 1)).toBe(key.length);
      expect(copy.toString('latin1', 1, 1 + key.length)).toBe(key);
      // Same length, one byte different: not found.
      if (key.length > 0) expect(find(t, key.slice(0, -1) + String.fromCharCode((key.charCodeAt(key.length - 1) + 1) & 255))).toBe(-1);
    });
    // Freed chunks are reused and hold the new key's bytes.
    t.remove(9);
    insert(t, 'y'.repeat(16), 9);
    expect(t.keyOf(9)).toBe('y'.repeat(16));
    expect(find(t, keys[9])).toBe(-1);
    expect(find(t, keys[10])).toBe(10);
  });
});

describe('hashKey', () => {
  it('depends on every byte and on the length, and spreads sequential keys over the buckets', () => {
    const a = bytesOf('user:12345');
    const base = hashKey(a, 0, a.length);
    for (let i = 0; i < a.length; i++) {
      const b = Buffer.from(a);
      b[i] ^= 1;
      expect(hashKey(b, 0, b.length)).not.toBe(base);
    }
    expect(hashKey(bytesOf('ab\0'), 0, 3)).not.toBe(hashKey(bytesOf('ab'), 0, 2));
    // 2^16 sequential keys into 2^12 buckets: every bucket used, none far above the mean of 16.
    const buckets = new Int32Array(4096);
    for (let i = 0; i < 65_536; i++) {
      const k = bytesOf(`key:${i}`);
      buckets[hashKey(k, 0, k.length) & 4095]++;
    }
    expect(Math.min(...buckets)).toBeGreaterThan(0);
    expect(Math.max(...buckets)).toBeLessThan(48);
  });
});
