/**
 * Replay gives exactly the state the server had: driven in-process (Keyspace + the journal's recorder
 * and parser, no server), random timelines over every algorithm's state (creates, re-creates with
 * another type, updates, sliding-log rings changed in place, DEL, eviction, expiry by lookup and by
 * the active cycle, time passing, FLUSH) are recorded turn by turn as the server records them; the
 * file, replayed into an empty keyspace, must equal the keyspace: key, type, expiry, A, B, C, blob.
 * Then every cut of the file is a torn tail the parser stops at a record boundary, and every changed
 * byte before the last record is found as corruption.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';
import { JournalRecorder } from '../../src/persistence/journal-encode.js';
import { encodeJournalHeader, JournalError, JOURNAL_HEADER_BYTES, OP_SET } from '../../src/persistence/journal-format.js';
import { JournalParser } from '../../src/persistence/journal-parse.js';
import { JournalReplay } from '../../src/persistence/journal-replay.js';
import { mulberry32 } from '../helpers/random.js';
import { contentOf, keyName, POLICIES, TYPES } from './keyspace-content.js';

/** Records `turns` turns of random traffic; returns the journal file, the keyspace and the time at the end, and each record's end offset. */
function timeline(seed: number, keys: number, turns: number, opsPerTurn: number, flushPermille: number) {
  const rnd = mulberry32(seed);
  const int = (n: number): number => Math.floor(rnd() * n);
  let now = 1_800_000_000_000;
  const ks = new Keyspace();
  const recorder = new JournalRecorder(ks);
  ks.journal = recorder;
  const names = Math.max(16, keys * 2);
  const stateFor = (type: KeyType): [number, number, number] => {
    if (type === KeyType.Gcra) {
      // Now and then a TAT past 2^53 µs (Redis's GCRA far in the future): A a double, C the remainder.
      if (int(20) === 0) return [2 ** 60 + int(1000) * 2 ** 8, 0, int(2049) - 1024];
      return [now * 1000 + int(1e9), int(1000), 0];
    }
    if (type === KeyType.SlidingWindow) return [now - int(1000), int(2 ** 40), int(1000)];
    if (type === KeyType.SlidingLog) return [now - int(1000), 1, 1 + int(10)];
    return [now - int(1000), int(2) === 0 ? int(1e6) : 2 ** 52 - int(10), 0];
  };
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
  /** A limiter's write, in the order the commands make it: blob, state, expiry. */
  const put = (name: string): void => {
    let slot = ks.lookup(name, now);
    let type = slot === -1 ? TYPES[int(TYPES.length)] : ks.typeOf(slot);
    if (slot !== -1 && int(10) === 0) {
      // Deleted and made again with another algorithm in the same turn.
      ks.delete(name, now);
      slot = -1;
      type = TYPES[int(TYPES.length)];
    }
    if (slot === -1) slot = ks.create(name, type);
    const expireAtMs = (s: number): number => Math.max(s, now + (int(2) === 0 ? 1 + int(3000) : 1e7));
    if (type === KeyType.SlidingLog && int(2) === 0) {
      const ring = ks.getBlob(slot) ?? new Float64Array(2 * (2 + int(4)));
      const state = fillRing(ring);
      ks.setBlob(slot, ring);
      ks.setState(slot, ...state);
      ks.setExpireAtMs(slot, expireAtMs(now));
    } else {
      const state = stateFor(type);
      if (type === KeyType.SlidingLog) ks.setBlob(slot, undefined);
      ks.setState(slot, ...state);
      ks.setExpireAtMs(slot, type === KeyType.Gcra ? Math.max(now + 1, Math.ceil(Math.min(state[0], 2 ** 53) / 1000)) : expireAtMs(state[0]));
    }
  };
  const chunks: Buffer[] = [encodeJournalHeader()];
  for (let t = 0; t < turns; t++) {
    for (let i = 0; i < opsPerTurn; i++) {
      const op = int(1000);
      const name = keyName(int(names));
      if (op < flushPermille) ks.clear();
      else if (op < 450) put(name);
      else if (op < 600) ks.delete(name, now);
      else if (op < 680) {
        const victim = ks.sampleVictim(POLICIES[int(POLICIES.length)], 5, rnd);
        if (victim !== -1) ks.evictSlot(victim);
      } else if (op < 780) now += int(400);
      else if (op < 830) ks.expireStep(now, 1 + int(2000), () => false);
      else if (op < 860) ks.scan(int(keys + 1), 1 + int(50), now, () => {});
      else ks.lookup(name, now);
    }
    // The end of the turn: what Server.flushPending makes the journal write.
    recorder.encodePending();
    chunks.push(Buffer.from(recorder.buf.subarray(0, recorder.pos)));
    recorder.consumed(recorder.pos);
  }
  return { file: Buffer.concat(chunks), ks, now, records: recorder.records };
}

function replay(file: Buffer, nowMs: number): { ks: Keyspace; validBytes: number; torn: string | null; ends: number[] } {
  const ks = new Keyspace();
  const r = new JournalReplay(ks, nowMs);
  const parser = new JournalParser(file, 'test.aof');
  const ends: number[] = [];
  const scan = parser.next((rec, buf) => {
    r.apply(rec, buf);
    ends.push(parser.offset);
  }, Number.MAX_SAFE_INTEGER)!;
  return { ks, validBytes: scan.validBytes, torn: scan.torn, ends };
}

/** Record boundaries of a valid file (where each record starts, and the end). */
function boundaries(file: Buffer): number[] {
  const out = [JOURNAL_HEADER_BYTES];
  const parser = new JournalParser(file, 'b.aof');
  let prev = JOURNAL_HEADER_BYTES;
  parser.next(() => {}, Number.MAX_SAFE_INTEGER);
  // Walk again, one record at a time, to learn each end.
  const p2 = new JournalParser(file, 'b.aof');
  for (;;) {
    const scan = p2.next(() => {}, 1);
    if (p2.offset !== prev) {
      prev = p2.offset;
      out.push(prev);
    }
    if (scan !== null) break;
  }
  return out;
}

describe('journal replay (in-process)', () => {
  it('replaying the records gives exactly the keyspace that wrote them, for every algorithm', () => {
    let records = 0;
    let bytes = 0;
    fc.assert(
      fc.property(
        fc.record({
          seed: fc.integer(),
          keys: fc.integer({ min: 0, max: 400 }),
          turns: fc.integer({ min: 1, max: 30 }),
          opsPerTurn: fc.integer({ min: 0, max: 60 }),
          flushPermille: fc.integer({ min: 0, max: 10 }),
        }),
        ({ seed, keys, turns, opsPerTurn, flushPermille }) => {
          const { file, ks, now, records: n } = timeline(seed, keys, turns, opsPerTurn, flushPermille);
          records += n;
          bytes += file.length - JOURNAL_HEADER_BYTES;
          const got = replay(file, now);
          expect(got.torn).toBe(null);
          expect(got.validBytes).toBe(file.length);
          expect(contentOf(got.ks, now)).toEqual(contentOf(ks, now));
        },
      ),
      { numRuns: 300 },
    );
    console.log(`[journal] replay property: ${records} records, ${(bytes / Math.max(1, records)).toFixed(1)} bytes per record on average (random key names and states)`);
  }, 120_000);

  it('a turn of thousands of changes over a few keys: each key recorded once per turn, and replay still exact', () => {
    // Repeats are dropped when the turn ends or its pending list fills (JournalRecorder.settle): turns
    // far longer than that list, over keys changed again and again in between other keys.
    fc.assert(
      fc.property(fc.integer(), fc.integer({ min: 1, max: 8 }), fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1000, max: 6000 }), (seed, keys, turns, opsPerTurn) => {
        const { file, ks, now } = timeline(seed, keys, turns, opsPerTurn, 0);
        const got = replay(file, now);
        expect(got.torn).toBe(null);
        expect(contentOf(got.ks, now)).toEqual(contentOf(ks, now));
        let sets = 0;
        new JournalParser(file, 'few.aof').next((rec) => {
          if (rec.op === OP_SET) sets++;
        }, Number.MAX_SAFE_INTEGER);
        // timeline() names at most max(16, 2 × keys) keys: at most that many live at a turn's end.
        expect(sets).toBeLessThanOrEqual(turns * Math.max(16, keys * 2));
      }),
      { numRuns: 40 },
    );
  }, 120_000);

  it('every cut of a file is a torn tail stopped at the last whole record; every changed byte before the last record is corruption', () => {
    fc.assert(
      fc.property(fc.integer(), fc.integer({ min: 0, max: 1_000_000 }), fc.integer({ min: 1, max: 255 }), (seed, pick, xor) => {
        const { file, now } = timeline(seed, 40, 6, 30, 5);
        const ends = boundaries(file);
        if (ends.length < 3) return;
        // A cut anywhere: never an exception, stopped at the last record boundary at or before the cut.
        const cut = JOURNAL_HEADER_BYTES + (pick % (file.length - JOURNAL_HEADER_BYTES));
        const torn = replay(file.subarray(0, cut), now);
        const expectedEnd = ends.filter((e) => e <= cut).pop()!;
        expect(torn.validBytes).toBe(expectedEnd);
        expect(torn.torn === null).toBe(cut === expectedEnd);
        // The same cut followed by zero bytes (a file extended without its data): still a torn tail there.
        // Where the cut record's missing bytes were themselves zeros, the zeros complete it: it is
        // then the whole record, byte for byte, and is kept.
        const zeroed = Buffer.concat([file.subarray(0, cut), Buffer.alloc(1 + (pick % 64))]);
        const completedEnd = ends.filter((e) => e > cut && e <= zeroed.length && file.subarray(cut, e).every((b) => b === 0)).pop();
        expect(replay(zeroed, now).validBytes).toBe(completedEnd ?? expectedEnd);
        // A changed byte in any record but the last: refused, whatever field it falls in.
        const lastStart = ends[ends.length - 2];
        const at = JOURNAL_HEADER_BYTES + (pick % (lastStart - JOURNAL_HEADER_BYTES));
        const bad = Buffer.from(file);
        bad[at] ^= xor;
        expect(() => replay(bad, now)).toThrow(JournalError);
      }),
      { numRuns: 300 },
    );
  }, 120_000);
});
