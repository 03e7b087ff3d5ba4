/**
 * The journal's commit: each event-loop turn's records written to the current incremental file, and
 * fsynced by `appendfsync` (always: before the turn's replies leave; everysec: in libuv's thread pool
 * about once a second; no: by the kernel). Write errors are kept, retried and reported here
 * (docs/journal-format.md, "Write errors").
 */
import fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { Server } from '../server/server.js';
import type { JournalRecorder } from './journal-encode.js';

/** Bytes of records kept while the file cannot be written; past this they are dropped and a rewrite is due. */
const MAX_BUFFERED_BYTES = 64 * 1024 * 1024;
/** everysec / no: at most one write per this many ms (the records of the turns between wait in memory). */
const WRITE_COALESCE_MS = 1;
/** ... unless this many bytes wait. */
const COALESCE_MAX_BYTES = 256 * 1024;
/** everysec: the fsync cadence. */
const FSYNC_EVERY_MS = 1000;
/** An everysec fsync still running this long after it started is counted as delayed (Redis's 2 s). */
const FSYNC_DELAYED_MS = 2000;
/** A write error is logged again at most this often while it lasts. */
const WRITE_ERROR_LOG_MS = 30_000;

/** An error's text for INFO and the log: its code first, and never empty (an empty reason tells an operator nothing). */
export function describe(e: unknown): string {
  const err = (e ?? {}) as NodeJS.ErrnoException;
  const message = String(err.message ?? e ?? '').trim();
  const code = typeof err.code === 'string' && err.code !== '' ? err.code : undefined;
  if (message === '') return code ?? `unknown error (${err.name ?? typeof e})`;
  return code !== undefined && !message.startsWith(code) ? `${code}: ${message}` : message;
}

export interface JournalWriterHooks {
  /** The current file's path, for log lines. */
  currentPath(): string;
  /** Records were dropped while the disk refused them and it accepts writes again: the journal must be rebuilt. */
  lostRecords(): void;
  /** Space came back, less than the records that waited need (a retry wrote part of them, or the filesystem says so). */
  diskTookWrites(why: string): void;
}

export class JournalWriter {
  /** The current incremental file, or -1 (none open). */
  fd = -1;
  /** The current incremental file's size: where the next write goes. */
  size = 0;
  /** Of it, the bytes known fsynced. */
  syncedBytes = 0;
  /** `appendfsync`, kept as a field: commit reads it every turn (AppendOnly.applyConfig refreshes it). */
  policy = 'everysec';
  lastWriteOk = true;
  lastWriteError = '';
  /** Writes and fsyncs that failed since start (each retry that fails counts). */
  writeErrors = 0;
  /** Records were dropped during a write failure: the next successful write calls hooks.lostRecords. */
  lost = false;
  fsyncInFlight = false;
  /** everysec fsyncs due while the previous one was still running (Redis's aof_delayed_fsync). */
  delayedFsync = 0;
  /** Every record byte written since start (bench: bytes per record). */
  bytesWritten = 0;
  private lastWriteLogMs = 0;
  /** While writes fail, the filesystem's free bytes at the last look (roomShort); Infinity otherwise. */
  private lastFreeBytes = Infinity;
  private lastDelayLogMs = 0;
  /** When the last fsync started (everysec's cadence), and from when a running one's next delay is counted. */
  private lastFsyncPerf = performance.now();
  private delaySincePerf = 0;
  /**
   * DEBUG JOURNAL-FSYNC-DELAY: ms each everysec fsync waits before it starts, standing in for a
   * slow disk (tests: aof_delayed_fsync). 0, always, unless a debug command set it.
   */
  debugFsyncDelayMs = 0;
  private lastWritePerf = 0;
  private writeTimer = false;
  /**
   * Which file `fd` is: a new one for every switchTo and close. An fsync that ends after a switch
   * must not count for the new file, and the descriptor number alone cannot tell: the kernel hands
   * a closed file's number to the next file opened.
   */
  private fileGeneration = 0;

  constructor(
    private readonly server: Server,
    private readonly recorder: JournalRecorder,
    private readonly hooks: JournalWriterHooks,
  ) {}

  /**
   * Writes this turn's records (once per turn: the server calls it before replies leave). Nothing to
   * do, the usual case without a journal, costs one test.
   */
  commit(force = false): void {
    if (this.recorder.empty) return;
    // Every client's reply flush calls this, several per turn; records already encoded and waiting for
    // the timer are written here once the coalescing window is over, before this call's replies leave
    // (a turn that ran long, DEBUG SLEEP, must not answer ahead of an earlier turn's records).
    if (this.recorder.hasPending) this.recorder.encodePending();
    if (this.fd === -1) return;
    if (this.policy === 'always') {
      if (this.writeBuffered()) this.syncNow();
      return;
    }
    // everysec / no: one write per turn, but not more than one per WRITE_COALESCE_MS. At pipeline 1
    // a turn often holds one command, and a write per command cost ~1.3 µs of its ~9 µs; turns
    // within a millisecond of the last write share the next one (a timer makes sure it happens).
    const now = performance.now();
    if (force || now - this.lastWritePerf >= WRITE_COALESCE_MS || this.recorder.pos >= COALESCE_MAX_BYTES) {
      this.lastWritePerf = now;
      this.writeBuffered();
    } else if (!this.writeTimer) {
      this.writeTimer = true;
      setTimeout(this.writeLater, WRITE_COALESCE_MS);
    }
  }

  private readonly writeLater = (): void => {
    this.writeTimer = false;
    try {
      this.commit(true);
    } catch (e) {
      this.server.tasks.failed('journal write', e);
    }
  };

  /**
   * While writes fail: whether the filesystem has less room than the waiting records need. Then
   * they are not written: part of them would only take the room that a rewrite from memory (a base
   * far smaller than the records) needs to repair the journal; space that comes back, short of
   * what they need, starts that rewrite instead. A file size limit (EFBIG) is not seen here: the
   * write is tried, and a partial one says the same.
   */
  private roomShort(): boolean {
    let free: number;
    try {
      const st = fs.statfsSync(this.hooks.currentPath());
      free = st.bavail * st.bsize;
    } catch {
      return false;
    }
    if (free >= this.recorder.pos) return false;
    if (free > this.lastFreeBytes) this.hooks.diskTookWrites('the disk has room again, less than the records that waited need');
    this.lastFreeBytes = free;
    return true;
  }

  /** Writes the buffered records at the current end of the file. Returns false on an error (handled). */
  private writeBuffered(): boolean {
    const r = this.recorder;
    if (!this.lastWriteOk && this.roomShort()) return false;
    let written = 0;
    try {
      while (written < r.pos) {
        const n = fs.writeSync(this.fd, r.buf, written, r.pos - written, this.size);
        this.size += n;
        written += n;
      }
      this.bytesWritten += written;
      r.consumed(written);
    } catch (e) {
      this.bytesWritten += written;
      r.consumed(written);
      const wasFailing = !this.lastWriteOk;
      this.failed(e);
      if (written > 0 && wasFailing) this.hooks.diskTookWrites('the disk took part of the records that waited and refused the rest');
      return false;
    }
    if (!this.lastWriteOk) this.recovered();
    return true;
  }

  /** The disk takes writes again: a successful write, or a rewrite installed with nothing left waiting. */
  recovered(): void {
    this.lastWriteOk = true;
    this.lastWriteError = '';
    this.lastFreeBytes = Infinity;
    this.server.snapshots.refreshDenyWrites();
    this.server.log.warning('AOF write error looks solved, cellgate can write again.');
    if (this.lost) this.hooks.lostRecords();
  }

  /** A write or fsync failed: reported, the records kept (or, past MAX_BUFFERED_BYTES, dropped). */
  failed(e: unknown): void {
    const text = describe(e);
    this.writeErrors++;
    if (this.policy === 'always') {
      // The replies of this turn are waiting for this write: none may say yes to a decision that is
      // not on disk. Redis exits here too; the restart loads everything answered before.
      this.server.log.warning(`Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting... (${text})`, { file: this.hooks.currentPath() });
      process.exit(1);
    }
    const first = this.lastWriteOk;
    this.lastWriteOk = false;
    this.lastWriteError = text;
    if (first) this.server.snapshots.refreshDenyWrites();
    const now = Date.now();
    if (first || now - this.lastWriteLogMs > WRITE_ERROR_LOG_MS) {
      this.lastWriteLogMs = now;
      this.server.log.warning(`Error writing to the AOF file: ${text} (the records are kept and retried)`, { file: this.hooks.currentPath() });
    }
    if (this.recorder.pos > MAX_BUFFERED_BYTES) {
      // The journal on disk is now behind the keyspace for good: a rewrite, once writes work again, repairs it.
      this.recorder.reset();
      if (!this.lost) this.server.log.warning(`More than ${MAX_BUFFERED_BYTES} bytes of journal records could not be written: dropped; the journal is rewritten once the disk accepts writes again`);
      this.lost = true;
    }
  }

  /** fsync of the current file, now (appendfsync always; shutdown; before a switch). */
  syncNow(): void {
    if (this.fd === -1 || this.syncedBytes === this.size) return;
    try {
      fs.fdatasyncSync(this.fd);
      this.syncedBytes = this.size;
      this.lastFsyncPerf = performance.now();
    } catch (e) {
      this.failed(e);
    }
  }

  /** The periodic part (the server's cron): retries of failed or waiting writes, everysec's fsync. */
  cron(): void {
    if (!this.recorder.empty && this.fd !== -1) this.commit(true);
    if (this.policy !== 'everysec' || this.fd === -1 || this.syncedBytes >= this.size) return;
    const now = performance.now();
    if (this.fsyncInFlight) {
      if (now - this.delaySincePerf >= FSYNC_DELAYED_MS) this.fsyncDelayed(now);
      return;
    }
    if (now - this.lastFsyncPerf < FSYNC_EVERY_MS) return;
    this.fsyncInFlight = true;
    this.lastFsyncPerf = this.delaySincePerf = now;
    const fd = this.fd;
    const generation = this.fileGeneration;
    const upTo = this.size;
    const done = (err: NodeJS.ErrnoException | null): void => {
      this.fsyncInFlight = false;
      if (generation !== this.fileGeneration) return; // the file was switched (and synced) meanwhile
      if (err !== null) this.failed(err);
      else this.syncedBytes = Math.max(this.syncedBytes, upTo);
    };
    if (this.debugFsyncDelayMs > 0) setTimeout(() => (generation === this.fileGeneration ? fs.fdatasync(fd, done) : done(null)), this.debugFsyncDelayMs);
    else fs.fdatasync(fd, done);
  }

  /**
   * An everysec fsync has run FSYNC_DELAYED_MS more: the disk holds back more than two seconds of
   * answered decisions, which a power loss would take. Writes go on (to the page cache), as Redis's
   * do once it stops waiting; counted once per FSYNC_DELAYED_MS as Redis's aof_delayed_fsync.
   */
  private fsyncDelayed(now: number): void {
    this.delayedFsync++;
    this.delaySincePerf = now;
    const nowMs = Date.now();
    if (nowMs - this.lastDelayLogMs > WRITE_ERROR_LOG_MS) {
      this.lastDelayLogMs = nowMs;
      this.server.log.warning(`Asynchronous AOF fsync is taking too long (disk is busy?): running for ${Math.round(now - this.lastFsyncPerf)} ms; writes go on without waiting for it (INFO aof_delayed_fsync: ${this.delayedFsync})`, { file: this.hooks.currentPath() });
    }
  }

  /** Makes `fd` (synced, `size` bytes) the current file; the previous one is closed. Returns the previous size. */
  switchTo(fd: number, size: number): number {
    const previous = this.size;
    this.close();
    this.fd = fd;
    this.size = size;
    this.syncedBytes = size;
    return previous;
  }

  close(): void {
    if (this.fd === -1) return;
    this.fileGeneration++;
    try {
      fs.closeSync(this.fd);
    } catch {
      /* closing a file we synced: nothing to lose */
    }
    this.fd = -1;
  }
}
