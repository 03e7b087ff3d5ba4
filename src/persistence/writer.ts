/**
 * Writes snapshots so that a crash at any moment leaves the previous file or the new one, never a
 * broken one: the bytes go to a temp file in `dir` (see tempPath), which is fsynced, renamed over
 * `dir/dbfilename`, and then the directory is fsynced so the rename itself is durable.
 *
 * Two writers share that discipline:
 * - `writeSnapshotSync` (SAVE, SHUTDOWN, SIGTERM) serializes every key in one go, blocking.
 * - `BackgroundSave` (BGSAVE, the save policy) serializes the keyspace in slices of at most
 *   SLICE_BUDGET_MS between event-loop turns and writes asynchronously, so clients keep being served.
 *   Each key is written as it is at the moment its slot is visited (see docs/snapshot-format.md,
 *   "Consistency of a background save").
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Keyspace } from '../keyspace/keyspace.js';
import { crc32, encodeHeader, EntryEncoder } from './format.js';

/** CPU time one background slice may take before it yields to clients. */
export const SLICE_BUDGET_MS = 0.05;
/** Bytes a background save accumulates before handing them to the disk. */
const BACKGROUND_WRITE_BYTES = 512 * 1024;
/** Keys serialized between two looks at the slice's clock. */
const KEYS_PER_CHECK = 16;

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
 * The temp file of a save: `.cellgate-temp-<pid>.snap` for a synchronous save,
 * `.cellgate-temp-<pid>-<n>.snap` for the n-th background save of process `pid`. The `.cellgate-`
 * prefix is reserved (config.ts refuses a dbfilename that starts with it), so a temp file can never
 * be someone's snapshot, and the start-up cleanup (format.ts TEMP_FILE_PATTERN) removes only these.
 * Never the same path twice at once: an aborted background save still has file operations queued in
 * libuv's thread pool (open with O_TRUNC, writes, its cleanup's unlink), which run while the
 * synchronous save at SIGTERM writes its own file; when both used one path, that open truncated the
 * final snapshot under the synchronous writer.
 */
export function tempPath(dir: string, backgroundSave = 0, pid = process.pid): string {
  return join(dir, backgroundSave === 0 ? `.cellgate-temp-${pid}.snap` : `.cellgate-temp-${pid}-${backgroundSave}.snap`);
}

let backgroundSaves = 0;

/** Serializes every live key at `nowMs` and installs the file, blocking. Throws on failure (the old snapshot stays). */
export function writeSnapshotSync(keyspace: Keyspace, nowMs: number, dir: string, dbfilename: string): SaveResult {
  const started = performance.now();
  const temp = tempPath(dir);
  const file = snapshotPath(dir, dbfilename);
  // A fresh inode: an aborted background save may still hold the old temp file open.
  fs.rmSync(temp, { force: true });
  const fd = fs.openSync(temp, 'w', 0o644);
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

function fsyncDirSync(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * One background save. `run()` resolves when the new snapshot is installed and rejects (leaving the
 * old snapshot and no temp file) on any error or after `abort()`.
 */
export class BackgroundSave {
  private aborted = false;
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
  ) {
    this.tempFile = tempPath(dir, ++backgroundSaves);
  }

  /** Stops the save at its next step; it then removes its temp file. */
  abort(): void {
    this.aborted = true;
  }

  async run(): Promise<SaveResult> {
    const temp = this.tempFile;
    const file = snapshotPath(this.dir, this.dbfilename);
    await fsp.rm(temp, { force: true });
    const fh = await fsp.open(temp, 'w', 0o644);
    let closed = false;
    try {
      const ks = this.keyspace;
      const header = encodeHeader(this.nowMs());
      let bytes = header.length;
      const enc = new EntryEncoder(BACKGROUND_WRITE_BYTES + 64 * 1024, crc32(header));
      // At most one write is in flight while the next chunk fills. Its failure (disk full) is kept
      // here, not left as a rejected promise nobody awaits yet (which would end the process).
      let writeError: unknown = null;
      const startWrite = (chunk: Buffer, recycle: boolean): Promise<void> =>
        writeAll(fh, chunk).then(
          () => {
            if (recycle) enc.recycle(chunk);
          },
          (e: unknown) => {
            writeError ??= e;
          },
        );
      let pending = startWrite(header, false);
      let keys = 0;
      let sinceCheck = 0;
      let deadline = 0;
      let sliceFull = false;
      const visit = (slot: number): void => {
        enc.add(ks, slot);
        keys++;
        if (++sinceCheck >= KEYS_PER_CHECK) {
          sinceCheck = 0;
          if (performance.now() > deadline || enc.length >= BACKGROUND_WRITE_BYTES) sliceFull = true;
        }
      };
      let cursor = 0;
      do {
        // One slice: keys are visited in slot order, each read whole between two event-loop turns.
        this.beforeSlice();
        deadline = performance.now() + SLICE_BUDGET_MS;
        sliceFull = false;
        const nowMs = this.nowMs();
        do cursor = ks.scan(cursor, KEYS_PER_CHECK, nowMs, visit);
        while (cursor !== 0 && !sliceFull);
        enc.updateCrc();
        if (enc.length >= BACKGROUND_WRITE_BYTES) {
          await pending;
          if (writeError !== null) throw writeError;
          // Two chunk buffers alternate: one being written while the other fills.
          const chunk = enc.take();
          bytes += chunk.length;
          pending = startWrite(chunk, true);
        }
        await nextTurn();
        if (this.aborted) throw new Error('background save aborted');
      } while (cursor !== 0);
      await pending;
      if (writeError !== null) throw writeError;
      enc.addFooter(keys);
      const last = enc.take();
      bytes += last.length;
      await writeAll(fh, last);
      await fh.sync();
      closed = true;
      await fh.close();
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
      if (!closed) await fh.close().catch(() => {});
      await fsp.rm(temp, { force: true }).catch(() => {});
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
