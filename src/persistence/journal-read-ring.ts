/**
 * The memory a journal read-ahead worker (journal-read-worker.ts) and the loading thread
 * (journal-read-ahead.ts) share: a ring of RING_SLOTS batches of decoded records, and two control
 * words. The worker fills a free slot with up to BATCH_RECORDS records (read and checked by
 * JournalParser) and posts a message naming it; the loading thread applies them in order and gives
 * the slot back. The ring bounds what the worker runs ahead by, whatever the size of the files.
 *
 * A record in a slot: Int32 words [op | type << 8, keyStart, keyEnd] (the key's bytes in the file's
 * buffer, shared as well) and Float64 numbers [expireAtMs, a, b, c]. A blob (rare) travels in the
 * batch's message.
 */

/** Records per batch: a message per batch costs a few microseconds, nothing at this size. */
export const BATCH_RECORDS = 4096;
/**
 * Batches the worker may have filled and the loading thread not yet applied (~11 MiB). A worker that
 * found the ring full waits until half of it is free, so the loading thread wakes it once per
 * RING_SLOTS / 2 batches, not after each (a wake per batch was 9% of the loading thread's time).
 */
export const RING_SLOTS = 64;
export const RECORD_INTS = 3;
export const RECORD_NUMBERS = 4;

/**
 * Control words (Int32 indexes): batches applied (the worker waits on it); 1 to stop the worker; the
 * count of applied batches the waiting worker waits for (0: it is not waiting).
 */
export const CONSUMED = 0;
export const ABORT = 1;
export const WAKE_AT = 2;

export interface ReadRing {
  control: Int32Array;
  ints: Int32Array;
  numbers: Float64Array;
}

export function allocateReadRing(): ReadRing {
  return {
    control: new Int32Array(new SharedArrayBuffer(3 * 4)),
    ints: new Int32Array(new SharedArrayBuffer(RING_SLOTS * BATCH_RECORDS * RECORD_INTS * 4)),
    numbers: new Float64Array(new SharedArrayBuffer(RING_SLOTS * BATCH_RECORDS * RECORD_NUMBERS * 8)),
  };
}

/** What the worker is given. */
export interface ReadWorkerData {
  paths: string[];
  control: SharedArrayBuffer;
  ints: SharedArrayBuffer;
  numbers: SharedArrayBuffer;
  /** Testing (aof-load-worker test-fail): fail, as a worker that crashes, after posting this many batches. */
  failAfterBatches: number;
}

/** Messages from the worker, in the order of the files and records. */
export type ReadWorkerMessage =
  /** File `file` read whole into `buf` (length bytes). */
  | { kind: 'file'; file: number; buf: SharedArrayBuffer; length: number }
  /** `count` records in ring slot `slot`; `blobs` pairs a record's index in the batch with its blob. */
  | { kind: 'batch'; slot: number; count: number; blobs: [number, Float64Array][] | null }
  /** File `file` parsed to its end or to a torn tail (JournalScan). */
  | { kind: 'end'; file: number; records: number; validBytes: number; torn: string | null }
  /** A JournalError: the load is refused with it. */
  | { kind: 'journal-error'; file: string; offset: number; problem: string }
  /** Another error reading a file (its message and errno code): the load is refused with it. */
  | { kind: 'error'; message: string; code: string | undefined };
