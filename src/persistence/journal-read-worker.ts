/**
 * The journal read-ahead worker (started by journal-read-ahead.ts): reads each incremental file
 * whole into shared memory and checks and decodes its records with the loader's own JournalParser,
 * a batch at a time into the shared ring (journal-read-ring.ts), while the loading thread loads the
 * base and applies earlier batches. Reading the files and the parser with its CRC-32 were a quarter
 * of a load's time on the loading thread. Every error is posted (a JournalError as its parts), never
 * thrown out of the worker; after an error or the last file the worker ends.
 */
import fs from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { openRegularFileSync } from '../files/regular-file.js';
import { incrementalReadError, JournalError } from './journal-format.js';
import { JournalParser, type JournalRecord } from './journal-parse.js';
import {
  ABORT, BATCH_RECORDS, CONSUMED, RECORD_INTS, RECORD_NUMBERS, RING_SLOTS, WAKE_AT, type ReadWorkerData, type ReadWorkerMessage,
} from './journal-read-ring.js';
import { JOURNAL_FILE } from './persisted-file.js';

const data = workerData as ReadWorkerData;
const port = parentPort!;
const control = new Int32Array(data.control);
const ints = new Int32Array(data.ints);
const numbers = new Float64Array(data.numbers);

let posted = 0;
/** The batch being filled: its first record's index in the ring, its count, its blobs. */
let at = 0;
let count = 0;
let blobs: [number, Float64Array][] | null = null;

function post(message: ReadWorkerMessage): void {
  port.postMessage(message);
}

/** Waits for a free slot (when the ring is full, until half of it is free); false when the loading thread stopped the read-ahead. */
function claimSlot(): boolean {
  if (posted - Atomics.load(control, CONSUMED) >= RING_SLOTS) {
    const wakeAt = posted - RING_SLOTS / 2;
    Atomics.store(control, WAKE_AT, wakeAt);
    for (;;) {
      if (Atomics.load(control, ABORT) !== 0) return false;
      const consumed = Atomics.load(control, CONSUMED);
      if (consumed >= wakeAt) break;
      Atomics.wait(control, CONSUMED, consumed, 1000);
    }
    Atomics.store(control, WAKE_AT, 0);
  }
  if (Atomics.load(control, ABORT) !== 0) return false;
  at = (posted % RING_SLOTS) * BATCH_RECORDS;
  count = 0;
  blobs = null;
  return true;
}

function postBatch(): void {
  post({ kind: 'batch', slot: posted % RING_SLOTS, count, blobs });
  posted++;
  if (posted === data.failAfterBatches) throw testFailure;
}

/** Thrown out of the worker on purpose (aof-load-worker test-fail): what a crash looks like. */
const testFailure = new Error('aof-load-worker test-fail: the read-ahead worker fails as asked');

const store = (rec: JournalRecord): void => {
  const i = at + count;
  ints[i * RECORD_INTS] = rec.op | (rec.type << 8);
  ints[i * RECORD_INTS + 1] = rec.keyStart;
  ints[i * RECORD_INTS + 2] = rec.keyEnd;
  numbers[i * RECORD_NUMBERS] = rec.expireAtMs;
  numbers[i * RECORD_NUMBERS + 1] = rec.a;
  numbers[i * RECORD_NUMBERS + 2] = rec.b;
  numbers[i * RECORD_NUMBERS + 3] = rec.c;
  if (rec.blob !== undefined) (blobs ??= []).push([count, rec.blob]);
  count++;
};

/** The file whole, in memory the loading thread shares (it reads the keys' bytes there). */
function readShared(path: string): { buf: Buffer; shared: SharedArrayBuffer } {
  let fd: number;
  let size: number;
  try {
    // A regular file of at most the bound, or refused: a FIFO named in the manifest is never waited on.
    ({ fd, size } = openRegularFileSync(path, JOURNAL_FILE));
  } catch (e) {
    throw incrementalReadError(path, e);
  }
  try {
    const shared = new SharedArrayBuffer(size);
    const buf = Buffer.from(shared);
    let got = 0;
    while (got < size) {
      const n = fs.readSync(fd, buf, got, size - got, got);
      if (n === 0) break;
      got += n;
    }
    return { buf: buf.subarray(0, got), shared };
  } finally {
    fs.closeSync(fd);
  }
}

function readAll(): void {
  for (let file = 0; file < data.paths.length; file++) {
    const path = data.paths[file];
    const { buf, shared } = readShared(path);
    post({ kind: 'file', file, buf: shared, length: buf.length });
    const parser = new JournalParser(buf, path);
    for (;;) {
      if (!claimSlot()) return;
      let scan;
      try {
        scan = parser.next(store, BATCH_RECORDS);
      } finally {
        // The records before a corrupt one are applied first, as the in-thread load did.
        if (count > 0) postBatch();
      }
      if (scan !== null) {
        post({ kind: 'end', file, records: scan.records, validBytes: scan.validBytes, torn: scan.torn });
        break;
      }
    }
  }
}

try {
  readAll();
} catch (e) {
  if (e instanceof JournalError) post({ kind: 'journal-error', file: e.file, offset: e.offset, problem: e.problem });
  else if (e === testFailure) throw e;
  else post({ kind: 'error', message: (e as Error).message, code: (e as NodeJS.ErrnoException).code });
}
