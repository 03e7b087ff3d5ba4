/**
 * The load's read-ahead (the parser's peekKeys, the keyspace's warmKeys): a hint that changes
 * nothing. On a valid file the keys read ahead are exactly the keys next() then reads, from every
 * record boundary; on any bytes at all (cut, flipped, random, crafted lengths) it never throws and
 * never names bytes outside the file; warming changes no key, whatever the keys and whether the table
 * is growing.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';
import { JournalRecorder } from '../../src/persistence/journal-encode.js';
import { encodeJournalHeader, JOURNAL_HEADER_BYTES } from '../../src/persistence/journal-format.js';
import { JournalParser } from '../../src/persistence/journal-parse.js';

/** A journal of SETs (short and 300-byte keys, GCRA and a blob type), DELs and a FLUSH. */
function journal(): { file: Buffer; keys: string[] } {
  const ks = new Keyspace();
  const rec = new JournalRecorder(ks);
  ks.journal = rec;
  const nowMs = 1_700_000_000_000;
  const parts: Buffer[] = [encodeJournalHeader()];
  for (let turn = 0; turn < 6; turn++) {
    if (turn === 3) ks.clear();
    for (let i = 0; i < 40; i++) {
      const key = i % 13 === 0 ? `long:${i}:${'x'.repeat(300)}` : `k:${(i * 7 + turn) % 50}`;
      const kb = Buffer.from(key, 'latin1');
      let slot = ks.lookupKey(kb, 0, kb.length, nowMs);
      if (slot === -1) slot = ks.createKey(kb, 0, kb.length, KeyType.Gcra);
      ks.setState(slot, (nowMs + 5000) * 1000 + i, 0, 0);
      ks.setExpireAtMs(slot, nowMs + 60_000 + i);
      if (i % 11 === 5) ks.delete(key, nowMs);
    }
    rec.encodePending();
    parts.push(Buffer.from(rec.buf.subarray(0, rec.pos)));
    rec.consumed(rec.pos);
  }
  const file = Buffer.concat(parts);
  const keys: string[] = [];
  const parser = new JournalParser(file, 'test');
  let scan = null;
  while (scan === null) scan = parser.next((r, buf) => keys.push(r.op === 3 ? '<flush>' : buf.toString('latin1', r.keyStart, r.keyEnd)), 1024);
  expect(scan.torn).toBeNull();
  return { file, keys };
}

describe('journal load read-ahead', () => {
  it('reads ahead exactly the keys next() reads, from every record boundary, stopping at a FLUSH', () => {
    const { file, keys } = journal();
    expect(keys).toContain('<flush>');
    const parser = new JournalParser(file, 'test');
    const starts = new Int32Array(8);
    const ends = new Int32Array(8);
    let at = 0;
    let scan = null;
    while (scan === null) {
      const n = parser.peekKeys(8, starts, ends);
      const ahead = Array.from({ length: n }, (_, i) => file.toString('latin1', starts[i], ends[i]));
      const expected: string[] = [];
      for (let i = at; i < keys.length && expected.length < 8 && keys[i] !== '<flush>'; i++) expected.push(keys[i]);
      expect(ahead).toEqual(expected);
      // One record at a time, so every boundary is a starting point.
      scan = parser.next(() => at++, 1);
    }
    expect(at).toBe(keys.length);
  });

  it('never throws and never points outside the file, whatever the bytes', () => {
    const { file } = journal();
    const starts = new Int32Array(64);
    const ends = new Int32Array(64);
    const check = (bytes: Buffer): void => {
      if (bytes.length < JOURNAL_HEADER_BYTES) return;
      const header = encodeJournalHeader();
      header.copy(bytes, 0);
      const n = new JournalParser(bytes, 'test').peekKeys(64, starts, ends);
      for (let i = 0; i < n; i++) {
        expect(starts[i]).toBeGreaterThanOrEqual(JOURNAL_HEADER_BYTES);
        expect(ends[i]).toBeGreaterThanOrEqual(starts[i]);
        expect(ends[i]).toBeLessThanOrEqual(bytes.length);
      }
    };
    // Every cut of the real file.
    for (let cut = JOURNAL_HEADER_BYTES; cut <= file.length; cut += 13) check(Buffer.from(file.subarray(0, cut)));
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 0, maxLength: 200 }),
        fc.nat(file.length - 1),
        fc.integer({ min: 0, max: 255 }),
        (tail, flipAt, flipTo) => {
          // Random bytes after a header; and the real file with one byte changed.
          check(Buffer.concat([encodeJournalHeader(), Buffer.from(tail)]));
          const changed = Buffer.from(file);
          changed[Math.max(flipAt, JOURNAL_HEADER_BYTES)] = flipTo;
          check(changed);
        },
      ),
      { numRuns: 100 },
    );
    // Crafted: a 5-byte length of 2^35 - 1, a key length past its body, a key length varint that never ends.
    check(Buffer.concat([encodeJournalHeader(), Buffer.from([0xff, 0xff, 0xff, 0xff, 0x7f, 0, 1, 1, 5])]));
    check(Buffer.concat([encodeJournalHeader(), Buffer.from([4, 0, 1, 1, 100, 65, 0, 0, 0, 0])]));
    check(Buffer.concat([encodeJournalHeader(), Buffer.from([8, 0, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0])]));
  });

  it('warming changes no key, before, during and after the table grows', () => {
    const ks = new Keyspace();
    const nowMs = 1_000;
    const bytes = Buffer.from(Array.from({ length: 3000 }, (_, i) => `w:${i}|`).join(''), 'latin1');
    const starts = new Int32Array(3000);
    const ends = new Int32Array(3000);
    let p = 0;
    for (let i = 0; i < 3000; i++) {
      starts[i] = p;
      p = bytes.indexOf(0x7c, p);
      ends[i] = p++;
    }
    for (let i = 0; i < 3000; i++) {
      // Every key of the batch ahead, present or not yet, then the next one created.
      ks.warmKeys(bytes, starts.subarray(i), ends.subarray(i), Math.min(32, 3000 - i));
      expect(ks.size).toBe(i);
      expect(ks.lookupKey(bytes, starts[i], ends[i], nowMs)).toBe(-1);
      const slot = ks.createKey(bytes, starts[i], ends[i], KeyType.Gcra);
      ks.setState(slot, i, 0);
      ks.setExpireAtMs(slot, 1e15);
    }
    ks.warmKeys(bytes, starts, ends, 3000);
    for (let i = 0; i < 3000; i++) expect(ks.getA(ks.lookupKey(bytes, starts[i], ends[i], nowMs))).toBe(i);
  });
});
