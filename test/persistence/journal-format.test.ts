/**
 * The encoder's fast paths give the same bytes as the format's definitions: the CRC-32 folded eight
 * bytes at a time equals zlib's for every length and alignment; a one-byte length's check byte taken
 * from the table equals the CRC-8 of the byte; a record with a two-byte length (a long key) still
 * round-trips and a flipped length byte is still found.
 */
import { describe, expect, it } from 'vitest';
import zlib from 'node:zlib';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { KeyType } from '../helpers/key-types.js';
import { JournalRecorder } from '../../src/persistence/journal-encode.js';
import { crc32View, crc8Range, encodeJournalHeader, JournalError } from '../../src/persistence/journal-format.js';
import { JournalParser } from '../../src/persistence/journal-parse.js';

function parseAll(file: Buffer): { keys: string[]; records: number } {
  const parser = new JournalParser(file, 'test');
  const keys: string[] = [];
  let scan = null;
  while (scan === null) scan = parser.next((rec, buf) => keys.push(buf.toString('latin1', rec.keyStart, rec.keyEnd)), 1024);
  expect(scan.torn).toBeNull();
  return { keys, records: scan.records };
}

/** crc32View over a view of exactly `bytes`, as the encoder and the parser keep one. */
function crc32Of(bytes: Buffer, start: number, end: number): number {
  return crc32View(new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), bytes, start, end);
}

describe('journal format: encoder fast paths', () => {
  it('crc32View equals zlib.crc32 for every length 0..100 at every start offset 0..15', () => {
    const bytes = Buffer.alloc(256);
    let x = 12345;
    for (let i = 0; i < bytes.length; i++) {
      x = (x * 1103515245 + 12345) & 0x7fffffff;
      bytes[i] = x >>> 16;
    }
    for (let start = 0; start < 16; start++) {
      for (let len = 0; len <= 100; len++) {
        expect(crc32Of(bytes, start, start + len)).toBe(zlib.crc32(bytes.subarray(start, start + len)));
      }
    }
    // The same bytes at an odd offset of their ArrayBuffer (as a pooled Buffer's): words are read through a view of `bytes` only.
    const shifted = Buffer.concat([Buffer.alloc(3, 0xaa), bytes, Buffer.alloc(5, 0x55)]).subarray(3, 3 + bytes.length);
    expect(shifted.byteOffset % 4).not.toBe(0);
    for (let start = 0; start < 16; start++) {
      for (let len = 0; len <= 100; len += 7) {
        expect(crc32Of(shifted, start, start + len)).toBe(zlib.crc32(bytes.subarray(start, start + len)));
      }
    }
    // All-ones bytes exercise the sign bit of every 32-bit word read.
    const ones = Buffer.alloc(40, 0xff);
    expect(crc32Of(ones, 0, 40)).toBe(zlib.crc32(ones));
  });

  it('records with a one-byte and a two-byte length round-trip; their length check bytes are the CRC-8 of the length', () => {
    const ks = new Keyspace();
    const rec = new JournalRecorder(ks);
    ks.journal = rec;
    const nowMs = 1_700_000_000_000;
    const keys = ['short', 'k'.repeat(300)];
    for (const key of keys) {
      const kb = Buffer.from(key, 'latin1');
      const slot = ks.createKey(kb, 0, kb.length, KeyType.Gcra);
      ks.setState(slot, (nowMs + 5000) * 1000 + 7, 0, 0);
      ks.setExpireAtMs(slot, nowMs + 60_000);
    }
    rec.encodePending();
    const file = Buffer.concat([encodeJournalHeader(), rec.buf.subarray(0, rec.pos)]);
    expect(parseAll(file)).toEqual({ keys, records: 2 });
    // First record: one-byte length, its check byte right after it.
    const first = 16;
    expect(file[first]).toBeLessThan(128);
    expect(file[first + 1]).toBe(crc8Range(file, first, first + 1));
    // Second record: a two-byte length.
    const second = first + 2 + file[first] + 4;
    expect(file[second]).toBeGreaterThanOrEqual(128);
    expect(file[second + 2]).toBe(crc8Range(file, second, second + 2));
    // A flipped bit in a length is corruption, not a record that parses.
    for (const at of [first, second, second + 1]) {
      const bad = Buffer.from(file);
      bad[at] ^= 0x04;
      expect(() => parseAll(bad)).toThrow(JournalError);
    }
  });
});
