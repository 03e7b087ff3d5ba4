/**
 * Loading the journal's incremental files: each read whole, its records validated and replayed into
 * the keyspace in slices (the port answers LOADING meanwhile: replies of the slices' turns leave).
 */
import fs from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Server } from '../server/server.js';
import { JOURNAL_HEADER_BYTES, JournalError } from './journal-format.js';
import type { ManifestFile } from './journal-manifest.js';
import { JournalParser } from './journal-parse.js';
import { JournalReplay } from './journal-replay.js';

/** Records replayed between two looks at the slice's clock while loading. */
const LOAD_RECORDS_PER_CHECK = 1024;
const LOAD_SLICE_MS = 10;
/**
 * Records whose keys are read ahead and warmed in the keyspace (Keyspace.warmKeys) before they are
 * replayed: enough for many cache misses in flight at once, few enough that what they bring stays
 * in the cache until it is used.
 */
const WARM_BATCH = 32;

export interface IncrementalReplay {
  records: number;
  /** The last file had a torn tail, cut at lastValid (aof-load-truncated yes). */
  truncated: boolean;
  /** Where the last file's valid records end. */
  lastValid: number;
  /** Sizes of the files before the last one. */
  olderBytes: number;
}

/**
 * Replays `incrs` (in order) into the server's keyspace. A torn tail of the last file is reported
 * (and logged) when aof-load-truncated allows it; anything else wrong throws JournalError.
 */
export async function replayIncrementalFiles(server: Server, dirPath: string, incrs: ManifestFile[]): Promise<IncrementalReplay> {
  const nowMs = server.clock.nowMs();
  const replay = new JournalReplay(server.keyspace, nowMs);
  let records = 0;
  let truncated = false;
  let lastValid = JOURNAL_HEADER_BYTES;
  let older = 0;
  const warmStarts = new Int32Array(WARM_BATCH);
  const warmEnds = new Int32Array(WARM_BATCH);
  for (let i = 0; i < incrs.length; i++) {
    const path = join(dirPath, incrs[i].name);
    let buf: Buffer;
    try {
      buf = fs.readFileSync(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new JournalError(path, 0, 'an incremental file the manifest names does not exist');
      throw e;
    }
    const parser = new JournalParser(buf, path);
    let scan = null;
    while (scan === null) {
      const sliceEnd = performance.now() + LOAD_SLICE_MS;
      while (scan === null && performance.now() < sliceEnd) {
        // Looking each record's key up in turn waited for its cache misses one record at a time (most
        // of a load's time at a million keys): a batch's keys are read ahead and warmed together.
        for (let done = 0; scan === null && done < LOAD_RECORDS_PER_CHECK; ) {
          const n = parser.peekKeys(WARM_BATCH, warmStarts, warmEnds);
          server.keyspace.warmKeys(buf, warmStarts, warmEnds, n);
          scan = parser.next(replay.apply, Math.max(n, 1));
          done += Math.max(n, 1);
        }
      }
      if (scan === null) {
        server.flushPending();
        await nextTurn();
      }
    }
    records += scan.records;
    const last = i === incrs.length - 1;
    if (scan.torn !== null) {
      if (!last) throw new JournalError(path, scan.validBytes, `truncated: ${scan.torn}, and it is not the last incremental file`);
      if (!server.config.bool('aof-load-truncated')) {
        throw new JournalError(path, scan.validBytes, `truncated: ${scan.torn} (aof-load-truncated is no; set it to yes to cut the half-written record and start)`);
      }
      truncated = true;
      const cutTo = Math.max(scan.validBytes, 0);
      server.log.warning(`!!! Warning: short read while loading the AOF file ${incrs[i].name}: ${scan.torn} !!!`, { file: path, offset: cutTo });
      server.log.warning(`AOF loaded anyway because aof-load-truncated is enabled: ${buf.length - cutTo} bytes cut at offset ${cutTo} (${scan.records} records kept)`, { file: path, offset: cutTo });
    }
    if (last) lastValid = scan.validBytes;
    else older += buf.length;
  }
  return { records, truncated, lastValid, olderBytes: older };
}
