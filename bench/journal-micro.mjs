#!/usr/bin/env node
/**
 * The journal's record encoder and parser alone, in-process (no server, no socket, no file): 100k
 * GCRA keys of 16 bytes, turns of 800 changed keys (P16 × 50 clients) encoded with
 * JournalRecorder, then the records parsed (JournalParser) and replayed into an empty keyspace.
 * Prints ns per record; an A/B is two runs on two builds:
 *
 *   npm run build && node bench/journal-micro.mjs [dist folder, default ./dist]
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from './harness.mjs';

const rootPath = process.argv[2] ?? join(ROOT, 'dist');
const root = pathToFileURL(rootPath).href;
const { Keyspace } = await import(`${root}/keyspace/keyspace.js`);
/** GCRA's key type tag, as snapshots and the journal store it (stable across builds). */
const GCRA_TYPE = 1;
const format = await import(`${root}/persistence/journal-format.js`);
// The encoder, parser and replay have their own files since the split; an older build keeps them in journal-format.js.
const own = async (file) => (existsSync(join(rootPath, 'persistence', file)) ? import(`${root}/persistence/${file}`) : format);
const { encodeJournalHeader } = format;
const { JournalRecorder } = await own('journal-encode.js');
const { JournalParser } = await own('journal-parse.js');
const { JournalReplay } = await own('journal-replay.js');
const ks = new Keyspace();
const slots = [];
const now = Date.now();
for (let i = 0; i < 100000; i++) {
  const k = Buffer.from('key:' + String(i).padStart(12, '0'));
  const s = ks.createKey(k, 0, k.length, GCRA_TYPE);
  ks.setState(s, (now + 1000) * 1000 + i, 0, 0);
  ks.setExpireAtMs(s, now + 60000 + (i % 1000));
  slots.push(s);
}
const rec = new JournalRecorder(ks);
const TURN = 800;
let x = 1;
const chunks = [];
for (let round = 0; round < 3; round++) {
  const t = process.hrtime.bigint();
  let n = 0;
  for (let turn = 0; turn < 2000; turn++) {
    for (let j = 0; j < TURN; j++) { x = (x * 1103515245 + 12345) & 0x7fffffff; rec.touched(slots[x % 100000]); }
    rec.encodePending();
    if (round === 2 && turn < 200) chunks.push(Buffer.from(rec.buf.subarray(0, rec.pos)));
    rec.consumed(rec.pos);
    n += TURN;
  }
  console.log(`encode: ${(Number(process.hrtime.bigint() - t) / n).toFixed(1)} ns/record (touched+encode)`);
}
// parse
const file = Buffer.concat([encodeJournalHeader(), ...chunks, ...chunks, ...chunks, ...chunks, ...chunks]);
for (let r = 0; r < 3; r++) {
  const p = new JournalParser(file, 'x');
  let cnt = 0;
  const t = process.hrtime.bigint();
  let scan = null;
  while (scan === null) scan = p.next(() => { cnt++; }, 1024);
  console.log(`parse: ${(Number(process.hrtime.bigint() - t) / cnt).toFixed(1)} ns/record, ${((file.length - 16) / cnt).toFixed(1)} bytes/record`);
}
for (let r = 0; r < 2; r++) {
  const ks2 = new Keyspace();
  const rp = new JournalReplay(ks2, now);
  const p = new JournalParser(file, 'x');
  const t = process.hrtime.bigint();
  let scan = null;
  while (scan === null) scan = p.next(rp.apply, 1024);
  console.log(`parse+replay: ${(Number(process.hrtime.bigint() - t) / scan.records).toFixed(1)} ns/record`);
}
