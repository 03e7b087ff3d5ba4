/**
 * Writes snapshots so that a crash at any moment leaves the previous file or the new one, never a
 * broken one: the bytes go to a temp file in `dir` (see tempPath), which is fsynced, renamed over
 * `dir/dbfilename`, and then the directory is fsynced so the rename itself is durable.
 *
 * Two writers share that discipline:
 * - `writeSnapshotSync` (SAVE, SHUTDOWN, SIGTERM) serializes every key in one go, blocking.
 * - `BackgroundSave` (BGSAVE, the save policy) serializes the keyspace in slices of at most
 *   SLICE_BUDGET_MS between event-loop turns and writes asynchronously, so clients keep being served.
 *   The file holds the keyspace as it was when the save started, as a fork would: a key changed before
 *   the save reaches it is written as it was first (Keyspace.beginSave; docs/snapshot-format.md,
 *   "Consistency of a background save").
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Keyspace, SaveSink } from '../keyspace/keyspace.js';
import { createExclusiveSync, EXCLUSIVE_CREATE_FLAGS, randomSuffix } from './exclusive-file.js';
import { crc32, encodeHeader, EntryEncoder } from './format.js';

/** CPU time one background slice may take before it yields to clients. */
export const SLICE_BUDGET_MS = 0.05;
/** Bytes a background save accumulates before handing them to the disk. */
const BACKGROUND_WRITE_BYTES = 512 * 1024;
/** Slots a background slice examines between two looks at its clock. */
const SLOTS_PER_CHECK = 64;

export interface SaveResult {
  keys: number;
  bytes: number;
  ms: number;
  file: string;
}

export function snapshotPath(dir: string, dbfilename: string): string {
  return resolve(dir, dbfilename);
}

/**
 * The temp file of a save: `.cellgate-temp-<pid>-<random>.snap`, a new name for every save, created
 * exclusively (exclusive-file.ts): nobody who can write in `dir` can guess it, plant a symlink there,
 * and have a save truncate another file. The `.cellgate-` prefix is reserved (config.ts refuses a
 * dbfilename that starts with it), so a temp file can never be someone's snapshot, and the start-up
 * cleanup (format.ts TEMP_FILE_PATTERN, which reads the pid) removes only these. Never the same path
 * twice: an aborted background save still has file operations queued in libuv's thread pool (writes,
 * its cleanup's unlink), which run while the synchronous save at SIGTERM writes its own file.
 */
export function tempPath(dir: string, pid = process.pid): string {
  return join(dir, `.cellgate-temp-${pid}-${randomSuffix()}.snap`);
}

/** Serializes every live key at `nowMs` and installs the file, blocking. Throws on failure (the old snapshot stays). */
export function writeSnapshotSync(keyspace: Keyspace, nowMs: number, dir: string, dbfilename: string): SaveResult {
  const started = performance.now();
  const temp = tempPath(dir);
  const file = snapshotPath(dir, dbfilename);
  const fd = createExclusiveSync(temp, 0o644);
  let bytes = 0;
  try {
    const header = encodeHeader(nowMs);
    writeAllSync(fd, header);
    bytes += header.length;
    const enc = new EntryEncoder(BACKGROUND_WRITE_BYTES + 64 * 1024, crc32(header));
    let keys = 0;
    keyspace.forEachLive(nowMs, (slot) => {
      enc.add(keyspace, slot);
      keys++;
      if (enc.length >= BACKGROUND_WRITE_BYTES) {
        const chunk = enc.take();
        writeAllSync(fd, chunk);
        enc.recycle(chunk);
        bytes += chunk.length;
      }
    });
    enc.addFooter(keys);
    const last = enc.take();
    writeAllSync(fd, last);
    bytes += last.length;
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(temp, file);
    fsyncDirSync(dir);
    return { keys, bytes, ms: performance.now() - started, file };
  } catch (e) {
    try {
      fs.closeSync(fd);
    } catch {
      /* already closed */
    }
    fs.rmSync(temp, { force: true });
    throw e;
  }
}

function writeAllSync(fd: number, chunk: Buffer): void {
  for (let off = 0; off < chunk.length; ) off += fs.writeSync(fd, chunk, off, chunk.length - off);
}

export function fsyncDirSync(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Tuning of a background save's slices (tests make them small to interleave writes with them). */
export interface BackgroundSaveOptions {
  /** CPU time a slice may take before it yields (default SLICE_BUDGET_MS). */
  sliceBudgetMs?: number;
  /** Slots a slice examines at most (default: no limit but the time budget). */
  sliceSlots?: number;
}

/**
 * One background save. `run()` takes the keyspace's point-in-time view at once (before its first
 * await), resolves when the new snapshot is installed and rejects (leaving the old snapshot and no
 * temp file) on any error or after `abort()`.
 */
export class BackgroundSave {
  private aborted = false;
  /** This save's receiver of keys, which names it to the keyspace (Keyspace.beginSave). */
  private sink: SaveSink | null = null;
  readonly startedPerfMs = performance.now();
  /** Where this save writes before the rename. */
  readonly tempFile: string;

  constructor(
    private readonly keyspace: Keyspace,
    private readonly nowMs: () => number,
    private readonly dir: string,
    private readonly dbfilename: string,
    /** Called before each slice: the server sends the replies waiting for the end of the turn. */
    private readonly beforeSlice: () => void = () => {},
    private readonly options: BackgroundSaveOptions = {},
  ) {
    this.tempFile = tempPath(dir);
  }

  /** Stops the save at its next step; it then removes its temp file. Writes stop copying for it at once. */
  abort(): void {
    this.aborted = true;
    if (this.sink !== null) this.keyspace.endSave(this.sink);
  }

  async run(): Promise<SaveResult> {
    const ks = this.keyspace;
    // The instant the file holds: from here on every key the walk has not reached yet is written as it
    // is now (its pre-image goes into the encoder on its first change). Nothing may be awaited before.
    const startMs = this.nowMs();
    const header = encodeHeader(startMs);
    const enc = new EntryEncoder(BACKGROUND_WRITE_BYTES + 64 * 1024, crc32(header));
    let keys = 0;
    const sink: SaveSink = (source, slot) => {
      enc.add(source, slot);
      keys++;
    };
    this.sink = sink;
    ks.beginSave(startMs, sink);
    const temp = this.tempFile;
    const file = snapshotPath(this.dir, this.dbfilename);
    let fh: fsp.FileHandle | null = null;
    let closed = false;
    try {
      fh = await fsp.open(temp, EXCLUSIVE_CREATE_FLAGS, 0o644);
      const out = fh;
      let bytes = header.length;
      // At most one write is in flight while the next chunk fills. Its failure (disk full) is kept
      // here, not left as a rejected promise nobody awaits yet (which would end the process).
      let writeError: unknown = null;
      const startWrite = (chunk: Buffer, recycle: boolean): Promise<void> =>
        writeAll(out, chunk).then(
          () => {
            if (recycle) enc.recycle(chunk);
          },
          (e: unknown) => {
            writeError ??= e;
          },
        );
      let pending = startWrite(header, false);
      const budgetMs = this.options.sliceBudgetMs ?? SLICE_BUDGET_MS;
      const sliceSlots = this.options.sliceSlots ?? Infinity;
      let more = true;
      while (more) {
        if (this.aborted) throw new Error('background save aborted');
        // One slice: slots in order, each key read whole, between two event-loop turns.
        this.beforeSlice();
        const deadline = performance.now() + budgetMs;
        let left = sliceSlots;
        do {
          const step = Math.min(SLOTS_PER_CHECK, left);
          left -= step;
          more = ks.saveStep(sink, step);
        } while (more && left > 0 && enc.length < BACKGROUND_WRITE_BYTES && performance.now() <= deadline);
        enc.updateCrc();
        if (enc.length >= BACKGROUND_WRITE_BYTES) {
          await pending;
          if (writeError !== null) throw writeError;
          // Two chunk buffers alternate: one being written while the other fills.
          const chunk = enc.take();
          bytes += chunk.length;
          pending = startWrite(chunk, true);
        }
        if (more) await nextTurn();
      }
      // The walk is complete: nothing more enters the encoder.
      ks.endSave(sink);
      await pending;
      if (writeError !== null) throw writeError;
      enc.addFooter(keys);
      const last = enc.take();
      bytes += last.length;
      await writeAll(out, last);
      await out.sync();
      closed = true;
      await out.close();
      if (this.aborted) throw new Error('background save aborted');
      await fsp.rename(temp, file);
      const dirHandle = await fsp.open(this.dir, 'r');
      try {
        await dirHandle.sync();
      } finally {
        await dirHandle.close();
      }
      return { keys, bytes, ms: performance.now() - this.startedPerfMs, file };
    } catch (e) {
      ks.endSave(sink);
      if (fh !== null && !closed) await fh.close().catch(() => {});
      // Only a file this save created: a failed exclusive open created nothing.
      if (fh !== null) await fsp.rm(temp, { force: true }).catch(() => {});
      throw e;
    }
  }
}

async function writeAll(fh: fsp.FileHandle, chunk: Buffer): Promise<void> {
  for (let off = 0; off < chunk.length; ) {
    const { bytesWritten } = await fh.write(chunk, off, chunk.length - off);
    off += bytesWritten;
  }
}
