/**
 * The format in-process: every KeyType (iterated from the enum, so types added later are covered),
 * binary keys, blobs and odd numbers survive write → read exactly; a background save of a keyspace
 * that changes under it writes each key whole.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType, TYPE_NAMES } from '../helpers/key-types.js';
import { readSnapshotFile } from '../../src/persistence/reader.js';
import { BackgroundSave, writeSnapshotSync } from '../../src/persistence/writer.js';
import { FORMAT_VERSION, MAGIC } from '../../src/persistence/format.js';
import { tempDir } from './helpers.js';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

type Entry = { type: number; expireAtMs: number; a: number; b: number; c: number; blob?: number[] };

function readAll(file: string): Map<string, Entry> {
  const out = new Map<string, Entry>();
  readSnapshotFile(file, (bytes, keyStart, keyEnd, type, expireAtMs, a, b, c, blob) => {
    out.set(bytes.toString('latin1', keyStart, keyEnd), { type, expireAtMs, a, b, c, ...(blob ? { blob: [...blob] } : {}) });
  });
  return out;
}

/**
 * A state the loader accepts for `type`, with edge numbers (the largest TAT, 2^52 counts, a ring
 * log wrapping round its end): the reader refuses numbers no limiter stores (snapshot-fuzz.test.ts).
 */
function validState(type: number, n: number): Omit<Entry, 'type'> {
  const expireAtMs = 1_800_000_000_000 + n;
  switch (type) {
    case KeyType.Gcra:
      return { expireAtMs, a: [0, Number.MAX_SAFE_INTEGER, 1_800_000_000_000_123][n % 3], b: n % 1000, c: 0 };
    case KeyType.SlidingLog:
      return n % 2 === 0
        ? { expireAtMs, a: expireAtMs - 5, b: 1, c: 1_000_000 }
        : { expireAtMs, a: 2, b: 3, c: 7, blob: [expireAtMs - 1, 4, 0, 0, expireAtMs - 9, 1, expireAtMs - 8, 2] };
    case KeyType.SlidingWindow:
      return { expireAtMs, a: expireAtMs - 120_000, b: 2 ** 52, c: n };
    default:
      return { expireAtMs, a: [0, expireAtMs][n % 2], b: [0, 2 ** 52, 7][n % 3], c: 0 };
  }
}

describe('snapshot format', () => {
  it('round-trips every key type, binary keys, blobs and edge numbers exactly', () => {
    const types = Object.values(KeyType).filter((v): v is number => typeof v === 'number' && v !== KeyType.Free);
    expect(types.length).toBe(Object.keys(TYPE_NAMES).length);
    const ks = new Keyspace();
    const want = new Map<string, Entry>();
    const keys = ['plain', '', 'bin\x00\xff\r\n', 'ü', 'x'.repeat(70_000)];
    let n = 0;
    for (const type of types) {
      for (const key0 of keys) {
        const key = `${key0}#${type}`;
        const e: Entry = { type, ...validState(type, n) };
        const slot = ks.create(key, type);
        ks.setState(slot, e.a, e.b, e.c);
        ks.setExpireAtMs(slot, e.expireAtMs);
        if (e.blob) ks.setBlob(slot, Float64Array.from(e.blob));
        want.set(key, e);
        n++;
      }
    }
    const dir = tempDir();
    dirs.push(dir);
    const result = writeSnapshotSync(ks, 1_700_000_000_000, dir, 'x.snap');
    expect(result.keys).toBe(want.size);
    const bytes = readFileSync(join(dir, 'x.snap'));
    expect(bytes.subarray(0, 8).equals(MAGIC)).toBe(true);
    expect(bytes.readUInt32LE(8)).toBe(FORMAT_VERSION);
    expect(bytes.readDoubleLE(16)).toBe(1_700_000_000_000);
    expect(bytes.length).toBe(result.bytes);
    const got = readAll(join(dir, 'x.snap'));
    expect(got).toEqual(want);
    const summary = readSnapshotFile(join(dir, 'x.snap'));
    expect(summary.keyCount).toBe(want.size);
    for (const type of types) expect(summary.perType.get(type)).toBe(keys.length);
  });

  it('skips keys already expired at save time', () => {
    const ks = new Keyspace();
    ks.setExpireAtMs(ks.create('dead', KeyType.Gcra), 999);
    ks.setExpireAtMs(ks.create('edge', KeyType.Gcra), 1000);
    const dir = tempDir();
    dirs.push(dir);
    writeSnapshotSync(ks, 1000, dir, 'x.snap');
    expect([...readAll(join(dir, 'x.snap')).keys()]).toEqual(['edge']);
  });

  it('a background save writes the keyspace as it was at its start while it changes under it', async () => {
    const ks = new Keyspace();
    const N = 200_000;
    for (let i = 0; i < N; i++) {
      const slot = ks.create(`k${i}`, KeyType.SlidingWindow);
      ks.setState(slot, i, i, i);
      ks.setExpireAtMs(slot, 2e12);
    }
    const dir = tempDir();
    dirs.push(dir);
    const job = new BackgroundSave(ks, () => 1e12, dir, 'bg.snap');
    const done = job.run();
    // Meanwhile, between slices: rewrite keys (A = B = C = N + i), delete some, add some (in the freed slots).
    let turns = 0;
    let rewrites = 0;
    let finished = false;
    void done.then(() => (finished = true), () => (finished = true));
    while (!finished) {
      await new Promise((res) => setImmediate(res));
      turns++;
      const i = (turns * 7919) % N;
      const slot = ks.lookup(`k${i}`, 1e12);
      if (slot !== -1) {
        ks.setState(slot, N + i, N + i, N + i);
        rewrites++;
      }
      if (turns % 10 === 0) ks.delete(`k${(i + 1) % N}`, 1e12);
      if (turns % 10 === 5) ks.setExpireAtMs(ks.create(`new${turns}`, KeyType.SlidingWindow), 2e12);
    }
    const result = await done;
    expect(turns).toBeGreaterThan(10); // it did yield to the event loop
    expect(rewrites).toBeGreaterThan(0);
    const got = readAll(join(dir, 'bg.snap'));
    expect(got.size).toBe(result.keys);
    // Every key of the start, with its state of the start; nothing created later.
    expect(result.keys).toBe(N);
    const wrong: string[] = [];
    for (const [key, e] of got) {
      const i = Number(key.slice(1));
      if (!key.startsWith('k') || e.a !== i || e.b !== i || e.c !== i) wrong.push(key);
    }
    expect(wrong).toEqual([]);
  });
});

describe('gcra state past 2^53 µs (GCRA over Redis\'s 64-bit range)', () => {
  it('the validator takes the nearest double plus an exact remainder, up to 2^63 − 1, and nothing else', async () => {
    const { entryProblem } = await import('../../src/persistence/format.js');
    const top = 2 ** 63; // the nearest double of 2^63 − 1
    expect(entryProblem(KeyType.Gcra, 1000, 12345, 999, 0, undefined)).toBeNull();
    expect(entryProblem(KeyType.Gcra, Number.MAX_SAFE_INTEGER, top, 0, -1, undefined)).toBeNull();
    expect(entryProblem(KeyType.Gcra, Number.MAX_SAFE_INTEGER, 2 ** 60, 0, 100, undefined)).toBeNull();
    expect(entryProblem(KeyType.Gcra, Number.MAX_SAFE_INTEGER, top, 0, 0, undefined)).toMatch(/above 2\^63 - 1/);
    expect(entryProblem(KeyType.Gcra, Number.MAX_SAFE_INTEGER, 2 ** 60, 5, 0, undefined)).toMatch(/extra nanoseconds/);
    expect(entryProblem(KeyType.Gcra, Number.MAX_SAFE_INTEGER, 2 ** 60, 0, 2000, undefined)).toMatch(/remainder/);
    expect(entryProblem(KeyType.Gcra, Number.MAX_SAFE_INTEGER, 2 ** 60, 0, 0.5, undefined)).toMatch(/remainder/);
    // Below 2^53 the remainder must be 0 (CL.THROTTLE and RL.GCRA write their ns in B).
    expect(entryProblem(KeyType.Gcra, 1000, 12345, 0, 1, undefined)).toMatch(/expected 0/);
    expect(entryProblem(KeyType.Gcra, 1000, Infinity, 0, 0, undefined)).not.toBeNull();
  });
});
