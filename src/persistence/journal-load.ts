/**
 * Loading the journal's incremental files: their records validated and replayed into the keyspace
 * in slices (the port answers LOADING meanwhile: replies of the slices' turns leave). The files are
 * read and their records checked and decoded by a read-ahead worker (journal-read-ahead.ts) while
 * this thread applies earlier records; without it (aof-load-worker no, or the worker failed: logged,
 * the load goes on from the record it had reached) each file is read and parsed here, as before.
 * Either way the rules are JournalParser's: a torn tail of the last file is cut or refused per
 * aof-load-truncated, any other problem refuses the load with the same JournalError.
 */
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Keyspace } from '../keyspace/keyspace.js';
import { readWholeRegularFile } from '../files/regular-file.js';
import type { Server } from '../server/server.js';
import { incrementalReadError, JOURNAL_HEADER_BYTES, JournalError, OP_FLUSH } from './journal-format.js';
import type { ManifestFile } from './journal-manifest.js';
import { JournalParser, type JournalRecord, type JournalScan } from './journal-parse.js';
import type { JournalReadAhead } from './journal-read-ahead.js';
import { BATCH_RECORDS, RECORD_INTS, RECORD_NUMBERS } from './journal-read-ring.js';
import { JournalReplay } from './journal-replay.js';
import { JOURNAL_FILE } from './persisted-file.js';

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

/** One file replayed: its scan (JournalScan) and its size. */
interface FileReplay {
  scan: JournalScan;
  bytes: number;
}

/**
 * Replays `incrs` (in order) into the server's keyspace, through `readAhead` when given (started on
 * the same files, in the same order). A torn tail of the last file is reported (and logged) when
 * aof-load-truncated allows it; anything else wrong throws JournalError.
 */
export async function replayIncrementalFiles(server: Server, dirPath: string, incrs: ManifestFile[], readAhead: JournalReadAhead | null = null): Promise<IncrementalReplay> {
  const replay = new JournalReplay(server.keyspace, server.clock.nowMs());
  const loader = new RecordLoader(server, replay);
  let ahead = readAhead;
  let records = 0;
  let truncated = false;
  let lastValid = JOURNAL_HEADER_BYTES;
  let older = 0;
  for (let i = 0; i < incrs.length; i++) {
    const path = join(dirPath, incrs[i].name);
    let file: FileReplay | null = null;
    let applied = 0;
    if (ahead !== null) {
      const r = await loader.fromReadAhead(ahead, i);
      if ('failed' in r) {
        server.log.warning(`journal read-ahead worker failed (${r.failed}): loading ${incrs[i].name} and the rest on the main thread from record ${r.applied}`, { file: path, records: r.applied });
        ahead.stop();
        ahead = null;
        applied = r.applied;
      } else {
        file = r;
      }
    }
    file ??= await loader.inThread(path, applied);
    const { scan } = file;
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
      server.log.warning(`AOF loaded anyway because aof-load-truncated is enabled: ${file.bytes - cutTo} bytes cut at offset ${cutTo} (${scan.records} records kept)`, { file: path, offset: cutTo });
    }
    if (last) lastValid = scan.validBytes;
    else older += file.bytes;
  }
  return { records, truncated, lastValid, olderBytes: older };
}

/** Applies records, a slice of LOAD_SLICE_MS at a time, each group of WARM_BATCH keys warmed first. */
class RecordLoader {
  private readonly ks: Keyspace;
  private readonly warmStarts = new Int32Array(WARM_BATCH);
  private readonly warmEnds = new Int32Array(WARM_BATCH);
  private readonly rec: JournalRecord = { op: 0, type: 0, keyStart: 0, keyEnd: 0, expireAtMs: 0, a: 0, b: 0, c: 0, blob: undefined };
  private sliceEnd = 0;

  constructor(
    private readonly server: Server,
    private readonly replay: JournalReplay,
  ) {
    this.ks = server.keyspace;
  }

  /** Between slices: the replies of the turn leave (LOADING), then a turn passes. */
  private async yieldIfDue(): Promise<void> {
    if (performance.now() < this.sliceEnd) return;
    this.server.flushPending();
    await nextTurn();
    this.sliceEnd = performance.now() + LOAD_SLICE_MS;
  }

  /** File `file` through the read-ahead, or how many of its records were applied when the worker failed. */
  async fromReadAhead(ahead: JournalReadAhead, file: number): Promise<FileReplay | { failed: string; applied: number }> {
    const { ints, numbers } = ahead.ring;
    const { rec, warmStarts, warmEnds } = this;
    const apply = this.replay.apply;
    let buf: Buffer | null = null;
    let applied = 0;
    this.sliceEnd = performance.now() + LOAD_SLICE_MS;
    for (;;) {
      const m = await ahead.next();
      switch (m.kind) {
        case 'failed':
          return { failed: m.reason, applied };
        case 'file':
          if (m.file !== file) return { failed: `file ${m.file} came when file ${file} was expected`, applied };
          buf = Buffer.from(m.buf, 0, m.length);
          break;
        case 'batch': {
          if (buf === null) return { failed: 'records came before their file', applied };
          const first = m.slot * BATCH_RECORDS;
          const blobs = m.blobs;
          let nextBlob = 0;
          for (let done = 0; done < m.count; ) {
            await this.yieldIfDue();
            const upTo = Math.min(m.count, done + LOAD_RECORDS_PER_CHECK);
            for (let g = done; g < upTo; g += WARM_BATCH) {
              const gEnd = Math.min(upTo, g + WARM_BATCH);
              let n = 0;
              for (let r = g; r < gEnd; r++) {
                const w = (first + r) * RECORD_INTS;
                if ((ints[w] & 0xff) === OP_FLUSH) continue;
                warmStarts[n] = ints[w + 1];
                warmEnds[n++] = ints[w + 2];
              }
              this.ks.warmKeys(buf, warmStarts, warmEnds, n);
              for (let r = g; r < gEnd; r++) {
                const w = (first + r) * RECORD_INTS;
                const x = (first + r) * RECORD_NUMBERS;
                const head = ints[w];
                rec.op = head & 0xff;
                rec.type = head >>> 8;
                rec.keyStart = ints[w + 1];
                rec.keyEnd = ints[w + 2];
                rec.expireAtMs = numbers[x];
                rec.a = numbers[x + 1];
                rec.b = numbers[x + 2];
                rec.c = numbers[x + 3];
                rec.blob = blobs !== null && nextBlob < blobs.length && blobs[nextBlob][0] === r ? blobs[nextBlob++][1] : undefined;
                apply(rec, buf);
              }
            }
            applied += upTo - done;
            done = upTo;
          }
          ahead.release();
          break;
        }
        case 'end':
          if (m.file !== file || buf === null) return { failed: `the end of file ${m.file} came when file ${file} was expected`, applied };
          return { scan: { records: m.records, validBytes: m.validBytes, torn: m.torn }, bytes: buf.length };
        case 'journal-error':
          throw new JournalError(m.file, m.offset, m.problem);
        case 'error':
          throw Object.assign(new Error(m.message), { code: m.code });
      }
    }
  }

  /** File `path` read and parsed on this thread; its first `skip` records (applied already) are checked, not applied again. */
  async inThread(path: string, skip: number): Promise<FileReplay> {
    let buf: Buffer;
    try {
      buf = await readWholeRegularFile(path, JOURNAL_FILE);
    } catch (e) {
      throw incrementalReadError(path, e);
    }
    const { warmStarts, warmEnds } = this;
    const parser = new JournalParser(buf, path);
    if (skip > 0) {
      const scan = parser.next(() => {}, skip);
      if (scan !== null) return { scan, bytes: buf.length };
    }
    const apply = this.replay.apply;
    this.sliceEnd = performance.now() + LOAD_SLICE_MS;
    for (;;) {
      await this.yieldIfDue();
      // Looking each record's key up in turn waited for its cache misses one record at a time (most
      // of a load's time at a million keys): a batch's keys are read ahead and warmed together.
      for (let done = 0; done < LOAD_RECORDS_PER_CHECK; ) {
        const n = parser.peekKeys(WARM_BATCH, warmStarts, warmEnds);
        this.ks.warmKeys(buf, warmStarts, warmEnds, n);
        const scan = parser.next(apply, Math.max(n, 1));
        if (scan !== null) return { scan, bytes: buf.length };
        done += Math.max(n, 1);
      }
    }
  }
}
