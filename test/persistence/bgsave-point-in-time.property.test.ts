/**
 * BGSAVE is a point-in-time snapshot: driven in-process (Keyspace + BackgroundSave, no server), random
 * traffic runs between the save's slices (creates, re-creates of deleted keys, state/expiry/blob
 * updates, sliding-log rings changed in place, DEL, eviction, expiry by lookup, SCAN and the active
 * cycle, FLUSH), and the file must be accepted by the checker's reader, hold every key at most once,
 * load, and equal the keyspace as it was when the save started: key, type, expiry, A, B, C, blob.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';
import { readSnapshotFile } from '../../src/persistence/reader.js';
import { BackgroundSave } from '../../src/persistence/writer.js';
import { tempDirsForFile } from './helpers.js';
import { mulberry32 } from '../helpers/random.js';
import { contentOf, keyName, POLICIES, TYPES, type Entry } from './keyspace-content.js';

const newDir = tempDirsForFile();

describe('BGSAVE point in time (in-process)', () => {
  it('the file equals the keyspace at the save start, whatever changes while it runs', async () => {
    const dir = newDir();
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          seed: fc.integer(),
          keys: fc.integer({ min: 0, max: 5000 }),
          slices: fc.integer({ min: 1, max: 40 }),
          opsPerSlice: fc.integer({ min: 0, max: 40 }),
          flushPermille: fc.integer({ min: 0, max: 20 }),
        }),
        async ({ seed, keys, slices, opsPerSlice, flushPermille }) => {
          const rnd = mulberry32(seed);
          const int = (n: number): number => Math.floor(rnd() * n);
          let now = 1_800_000_000_000;
          const ks = new Keyspace();
          const names = Math.max(16, keys * 2);
          /** A, B, C as the type's limiter writes them, at a time up to now. */
          const stateFor = (type: KeyType): [number, number, number] => {
            if (type === KeyType.Gcra) return [now * 1000 + int(1e6), int(1000), 0];
            if (type === KeyType.SlidingWindow) return [now - int(1000), int(1000), int(1000)];
            if (type === KeyType.SlidingLog) return [now - int(1000), 1, 1 + int(10)];
            return [now - int(1000), int(1e6), 0];
          };
          /** Fills `ring` with a valid sliding log (running totals, times up to now); returns its A, B, C. */
          const fillRing = (ring: Float64Array): [number, number, number] => {
            const capacity = ring.length / 2;
            const entries = 2 + int(capacity - 1);
            const head = int(capacity);
            const stepMs = 1 + int(1000);
            let total = 0;
            ring.fill(0);
            for (let k = 0; k < entries; k++) {
              total += 1 + int(5);
              ring[2 * ((head + k) % capacity)] = now - (entries - 1 - k) * stepMs;
              ring[2 * ((head + k) % capacity) + 1] = total;
            }
            return [head, entries, total];
          };
          const put = (name: string, existing: number): void => {
            let slot = existing;
            const type = slot === -1 ? TYPES[int(TYPES.length)] : ks.typeOf(slot);
            if (slot === -1) slot = ks.create(name, type);
            // A state the snapshot validator accepts for the type (the loader refuses any other).
            if (type === KeyType.SlidingLog && int(2) === 0) {
              const ring = new Float64Array(2 * (2 + int(4)));
              ks.setState(slot, ...fillRing(ring));
              ks.setBlob(slot, ring);
            } else {
              ks.setState(slot, ...stateFor(type));
              if (type === KeyType.SlidingLog) ks.setBlob(slot, undefined);
            }
            // Some keys expire within the save, some long after it.
            ks.setExpireAtMs(slot, now + (int(2) === 0 ? 1 + int(3000) : 1e7));
          };
          for (let i = 0; i < keys; i++) {
            const name = keyName(int(names));
            put(name, ks.lookup(name, now));
          }
          // Some deleted before the start: their slots are free and get reused during the save.
          for (let i = 0; i < keys / 10; i++) ks.delete(keyName(int(names)), now);
          now += int(500);

          const traffic = (): void => {
            for (let i = 0; i < opsPerSlice; i++) {
              const op = int(1000);
              const name = keyName(int(names));
              if (op < flushPermille) {
                ks.clear();
              } else if (op < 250) {
                // Create (or re-create a deleted key), or update an existing one.
                put(name, ks.lookup(name, now));
              } else if (op < 400) {
                ks.delete(name, now);
              } else if (op < 450) {
                // A sliding log's ring changed in place, as the limiter does before setBlob.
                const slot = ks.lookup(name, now);
                const blob = slot === -1 ? undefined : ks.getBlob(slot);
                if (blob !== undefined && blob.length > 0) {
                  const state = fillRing(blob);
                  ks.setState(slot, ...state);
                  ks.setBlob(slot, blob);
                }
              } else if (op < 550) {
                const victim = ks.sampleVictim(POLICIES[int(POLICIES.length)], 5, rnd);
                if (victim !== -1) ks.evictSlot(victim);
              } else if (op < 650) {
                now += int(400);
              } else if (op < 700) {
                ks.expireStep(now, 1 + int(2000), () => false);
              } else if (op < 750) {
                ks.scan(int(keys + 1), 1 + int(50), now, () => {});
              } else if (op < 850) {
                // An expiry changed alone (as a PEXPIRE would).
                const slot = ks.lookup(name, now);
                if (slot !== -1) ks.setExpireAtMs(slot, now + 1 + int(5000));
              } else {
                ks.lookup(name, now);
              }
            }
          };

          const startMs = now;
          const expected = contentOf(ks, startMs);
          const dbfilename = `pit-${++run}.snap`;
          const slotsPerSlice = Math.max(1, Math.ceil((keys + 16) / slices));
          const save = new BackgroundSave(ks, () => now, dir, dbfilename, traffic, { sliceBudgetMs: Infinity, sliceSlots: slotsPerSlice });
          const result = await save.run();
          // Traffic after the save is over changes nothing in it.
          traffic();

          const seen = new Set<string>();
          const loaded = new Keyspace();
          const got = new Map<string, Entry>();
          const summary = readSnapshotFile(join(dir, dbfilename), (bytes, ks0, ke, type, expireAtMs, a, b, c, blob) => {
            const key = bytes.toString('latin1', ks0, ke);
            if (seen.has(key)) return 'duplicate key';
            seen.add(key);
            // Loaded as the server loads a snapshot.
            const slot = loaded.createKey(bytes, ks0, ke, type);
            loaded.setState(slot, a, b, c);
            loaded.setExpireAtMs(slot, expireAtMs);
            if (blob !== undefined) loaded.setBlob(slot, blob);
            got.set(key, { type, expireAtMs, a, b, c, blob: blob === undefined ? null : [...blob] });
          });
          expect(summary.createdAtMs).toBe(startMs);
          expect(summary.keyCount).toBe(expected.size);
          expect(result.keys).toBe(expected.size);
          expect(loaded.size).toBe(expected.size);
          expect(got).toEqual(expected);
          expect(contentOf(loaded, startMs)).toEqual(expected);
        },
      ),
      { numRuns: 200 },
    );
  }, 120_000);
  it('an aborted save stops copying at once; the next save, started before the first has unwound, is exact', async () => {
    const dir = newDir();
    let now = 1_800_000_000_000;
    const ks = new Keyspace();
    for (let i = 0; i < 3000; i++) {
      const slot = ks.create(`k${i}`, KeyType.Gcra);
      ks.setState(slot, i, i % 1000, 0);
      ks.setExpireAtMs(slot, now + 1e7);
    }
    let slices = 0;
    const first = new BackgroundSave(ks, () => now, dir, 'a.snap', () => void slices++, { sliceBudgetMs: Infinity, sliceSlots: 100 });
    const firstDone = first.run();
    // Let the first save walk a little, then, while it waits for its next turn, abort it and start
    // the second at once: the first unwinds (and ends its view) only after the second has begun.
    while (slices < 3) await new Promise((res) => setImmediate(res));
    first.abort();
    const expected = contentOf(ks, now);
    const second = new BackgroundSave(ks, () => now, dir, 'b.snap', () => {
      // Traffic during the second save: every key rewritten, some deleted, some created.
      for (let i = 0; i < 3000; i += 7) {
        const slot = ks.lookup(`k${i}`, now);
        if (slot !== -1) ks.setState(slot, 1e9, 1, 0);
      }
      ks.delete(`k${slices * 13 % 3000}`, now);
      ks.setExpireAtMs(ks.create(`new${slices++}`, KeyType.Gcra), now + 1e7);
      now += 1;
    }, { sliceBudgetMs: Infinity, sliceSlots: 50 });
    const [a, b] = await Promise.allSettled([firstDone, second.run()]);
    expect(a.status).toBe('rejected');
    expect(existsSync(first.tempFile)).toBe(false);
    expect(existsSync(join(dir, 'a.snap'))).toBe(false);
    expect(b.status).toBe('fulfilled');
    const got = new Map<string, Entry>();
    readSnapshotFile(join(dir, 'b.snap'), (bytes, s0, e0, type, expireAtMs, a0, b0, c0, blob) => {
      const key = bytes.toString('latin1', s0, e0);
      if (got.has(key)) return 'duplicate key';
      got.set(key, { type, expireAtMs, a: a0, b: b0, c: c0, blob: blob === undefined ? null : [...blob] });
    });
    expect(got).toEqual(expected);
  });
});
