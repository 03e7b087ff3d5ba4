/**
 * The journal encoder writes the same bytes for the same changes as the encoder it replaced: the
 * records of a fixed series of changes (every number class the format distinguishes: small, two-byte
 * and 33-bit varints, negative, past 2^51, past 2^53, non-integer, NaN, ±Infinity, -0; absolute and
 * delta expiries, unsafe expiries; GCRA TATs against the expiry in µs; blobs; keys of 1 to 300 bytes,
 * inline and in the arena, with one- and two-byte lengths; DEL and FLUSH between them) are compared
 * byte for byte with test/fixtures/journal-encode-v1.bin, which the encoder of format version 1 as
 * first released wrote (commit 5c5ce6d). Old and new files therefore load alike, `check` included.
 *
 * (The states need not be ones a limiter would make: the parser, which checks them, is not involved.)
 * To write the fixture with another build: CELLGATE_WRITE_JOURNAL_FIXTURE=<path> npx vitest run <this file>.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { Keyspace } from '../../src/keyspace/keyspace.js';
import { JournalRecorder } from '../../src/persistence/journal-encode.js';
import { encodeJournalHeader } from '../../src/persistence/journal-format.js';
import { KeyType } from '../helpers/key-types.js';

const FIXTURE = new URL('../fixtures/journal-encode-v1.bin', import.meta.url);
const NOW_MS = 1_733_000_000_000;

/** Numbers of every class the format tells apart. */
const NUMBERS = [
  0, 1, -1, 2, 63, 64, -64, -65, 127, 128, 8191, 8192, 16383, 16384, -16384, 2 ** 31 - 1, 2 ** 31, -(2 ** 31),
  2 ** 32 - 1, 2 ** 32, 2 ** 32 + 1, 2 ** 40 + 3, -(2 ** 40) - 5, 2 ** 51 - 1, -(2 ** 51 - 1), 2 ** 51, -(2 ** 51),
  2 ** 53 - 1, 2 ** 53, -(2 ** 53), 1e300, -1e300, Infinity, -Infinity, NaN, 0.5, -2.25, 1e-300, -0,
  Number.MIN_VALUE, NOW_MS, NOW_MS * 1000 + 999,
];

/** Expiries: ordinary ones (deltas of every size from the one before), then edge values. */
const EXPIRIES = [
  NOW_MS + 60_000, NOW_MS + 1, NOW_MS + 3_600_000, NOW_MS + 127, NOW_MS + 86_400_000 * 400, 0, -5, 1.5, 2 ** 53 - 1,
  2 ** 53, 9e15, Infinity, -Infinity, NaN,
];

const KEY_LENGTHS = [1, 16, 20, 21, 60, 127, 128, 300];

/** The records of a fixed series of changes, as `encode` writes them (header included). */
function encodeSeries(): Buffer {
  const ks = new Keyspace();
  const rec = new JournalRecorder(ks);
  ks.journal = rec;
  const out: Buffer[] = [encodeJournalHeader()];
  const flush = (): void => {
    rec.encodePending();
    out.push(Buffer.from(rec.buf.subarray(0, rec.pos)));
    rec.consumed(rec.pos);
  };
  let x = 20261204;
  const pick = <T>(list: readonly T[]): T => {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    return list[(x >>> 8) % list.length];
  };
  const types = [KeyType.Gcra, KeyType.Gcra, KeyType.TokenBucket, KeyType.FixedWindow, KeyType.SlidingLog];
  const live: string[] = [];
  for (let i = 0; i < 600; i++) {
    const length = pick(KEY_LENGTHS);
    const key = `${i}:`.padEnd(length, String.fromCharCode(97 + (i % 26))).slice(0, Math.max(length, `${i}:`.length));
    const type = pick(types);
    const kb = Buffer.from(key, 'latin1');
    const slot = ks.createKey(kb, 0, kb.length, type);
    const expiry = i % 3 === 0 ? pick(EXPIRIES) : NOW_MS + 1000 + (i % 97) * 13;
    // A: mostly near its reference (a GCRA TAT in µs near the expiry), else any number.
    const ref = type === KeyType.Gcra ? expiry * 1000 : expiry;
    const a = i % 4 === 0 ? pick(NUMBERS) : ref - (i % 1000) + (i % 5 === 0 ? 0.5 : 0);
    ks.setState(slot, a, pick(NUMBERS), i % 2 === 0 ? pick(NUMBERS) : 0);
    ks.setExpireAtMs(slot, expiry);
    if (type === KeyType.SlidingLog && i % 2 === 0) {
      const n = i % 7;
      const blob = new Float64Array(n);
      for (let j = 0; j < n; j++) blob[j] = j % 3 === 2 ? pick(NUMBERS) : NOW_MS + j * 17 + (j % 2) * 1e6;
      ks.setBlob(slot, blob);
    }
    if (expiry > NOW_MS + 10_000 && expiry < 2 ** 53) live.push(key);
    // A key changed twice in a turn is recorded once, with its last state.
    if (i % 11 === 0) ks.setState(slot, pick(NUMBERS), 7, 8);
    if (i % 13 === 0 && live.length > 3) ks.delete(live.splice(x % live.length, 1)[0], NOW_MS);
    if (i === 300) {
      ks.clear();
      live.length = 0;
    }
    if (i % 9 === 8) flush();
  }
  flush();
  return Buffer.concat(out);
}

describe('journal encoder: the bytes of format version 1', () => {
  const file = encodeSeries();

  it('equals, byte for byte, what the first encoder of format version 1 wrote', () => {
    const target = process.env.CELLGATE_WRITE_JOURNAL_FIXTURE;
    if (target !== undefined) writeFileSync(target, file);
    const fixture = readFileSync(FIXTURE);
    expect(file.length).toBe(fixture.length);
    // Version 2 added a key type (concurrency leases) and nothing else: the header's version field
    // is the only difference, every record is the same bytes.
    expect(file.readUInt32LE(8)).toBe(2);
    const asVersion1 = Buffer.from(file);
    asVersion1.writeUInt32LE(1, 8);
    const firstDifference = asVersion1.findIndex((byte, i) => byte !== fixture[i]);
    expect(firstDifference).toBe(-1);
  });
});
