/**
 * The append-only journal (`appendonly yes`), with Redis 7's multi-part layout and setting names:
 * `dir/appenddirname` holds a manifest (`<appendfilename>.manifest`), one base (a cellgate snapshot,
 * `<appendfilename>.<seq>.base.snap`) and incremental files (`<appendfilename>.<seq>.incr.aof`, the
 * records of journal-format.ts). Start = base loaded, then every incremental file replayed in order.
 *
 * - Group commit: the keyspace tells the recorder what changed (Keyspace.journal); once per event-loop
 *   turn, before that turn's replies leave (Server.flushPending and the clients' direct sends call
 *   `commit`), the turn's records are encoded. `appendfsync always` writes and fsyncs them then, so
 *   no reply says yes to a decision that is not on disk. `everysec` and `no` write them then too,
 *   unless the last write was less than a millisecond ago (turns of one command each at
 *   pipeline 1 then share a write); `everysec` fsyncs in libuv's thread pool about once a second,
 *   `no` leaves that to the kernel. A `kill -9` (the kernel keeps what was written) then loses at most
 *   the last millisecond or so of answered decisions, a power loss with everysec about a second.
 * - Rewrite (BGREWRITEAOF, auto-aof-rewrite-*): the current file is synced and closed, a new
 *   incremental file is opened and listed in the manifest beside the old ones, and a new base is
 *   written from the point-in-time copy a BGSAVE uses (Keyspace.beginSave) while traffic goes on; when
 *   it is installed, the manifest is switched (temp file, fsync, rename, directory fsync) to the new
 *   base and the new incremental file, and the old files are removed. A crash at any moment leaves a
 *   manifest whose files all exist and load.
 * - Write errors: `aof_last_write_status:err`, the records stay buffered and are retried each turn
 *   (positional writes at the last good offset, so a partial write never leaves garbage in the
 *   middle). With `always`, an answered decision must be on disk, so the process exits, as Redis
 *   does. Writes are refused (MISCONF) only with stop-writes-on-bgsave-error yes.
 */
import fs from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Server } from '../server/server.js';
import { TEMP_FILE_PATTERN } from './format.js';
import { processAlive } from './dir.js';
import { JournalRecorder } from './journal-encode.js';
import { encodeJournalHeader, JournalError, JOURNAL_HEADER_BYTES } from './journal-format.js';
import { replayIncrementalFiles } from './journal-load.js';
import { startReadAhead } from './journal-read-ahead.js';
import { CREATE_EXCLUSIVE, parseManifest, writeManifest, type ManifestFile } from './journal-manifest.js';
import { describe, JournalWriter } from './journal-write.js';
import { BackgroundSave, fsyncDirSync, writeSnapshotSync } from './writer.js';

const { O_NOFOLLOW, O_RDWR } = fs.constants;

/** A rewrite that failed while the journal has no loadable set yet is retried by the cron after this long. */
const REWRITE_RETRY_MS = 5000;
/** Automatic rewrites failed in a row before the next ones are held back (autoRewriteLimited), and the longest wait. */
const AUTO_REWRITE_FAILURES = 3;
const AUTO_REWRITE_MAX_DELAY_MINUTES = 60;

export interface JournalLoadResult {
  manifest: string;
  baseKeys: number;
  records: number;
  files: number;
  truncated: boolean;
  ms: number;
}

export interface JournalMetrics {
  enabled: boolean;
  lastWriteOk: boolean;
  lastBgrewriteOk: boolean;
  rewriteInProgress: boolean;
  rewrites: number;
  rewriteFailuresInRow: number;
  currentBytes: number;
  baseBytes: number;
  /** Records encoded and not written yet (INFO aof_buffer_length). */
  bufferBytes: number;
  writeErrors: number;
  delayedFsyncs: number;
  writtenBytes: number;
  records: number;
}

export class AppendOnly {
  readonly recorder: JournalRecorder;
  /** True while changes are recorded (appendonly yes, the journal opened or being built). */
  on = false;
  /** The current incremental file, its writes and fsyncs. */
  readonly writer: JournalWriter;
  /** The files of the journal: the installed base (null until the first rewrite is done) and the incremental files, oldest first. */
  private base: ManifestFile | null = null;
  private baseBytes = 0;
  private incrs: ManifestFile[] = [];
  /** Sizes of the incremental files before the current one. */
  private olderIncrBytes = 0;
  /** True when the manifest on disk names a complete set (a base and every incremental file since). */
  private loadable = false;
  /** Files of an earlier journal (turned off, then on again) removed once the new base is installed. */
  private leftovers: string[] = [];
  /** The journal's size after the last rewrite or load (Redis's aof_rewrite_base_size). */
  private rewriteBaseSize = 0;
  private rewrite: { job: BackgroundSave; fromIncr: number; baseSeq: number; startedPerf: number } | null = null;
  rewriteScheduled = false;
  private rewriteRetryAtMs = 0;
  private lastBgrewriteOk = true;
  private lastRewriteSec = -1;
  private rewrites = 0;
  /** Rewrites failed in a row (INFO aof_rewrites_consecutive_failures); a success resets it. */
  private rewriteFailuresInRow = 0;
  /** Automatic rewrites held back after repeated failures (Redis's aofRewriteLimited): the delay and its end, server clock. */
  private autoLimitMinutes = 0;
  private autoLimitUntilMs = 0;

  constructor(private readonly server: Server) {
    // Built among the Server's fields, before its config is set: applyConfig (at start) reads it.
    this.recorder = new JournalRecorder(server.keyspace);
    this.writer = new JournalWriter(server, this.recorder, {
      currentPath: () => this.currentIncrPath(),
      lostRecords: () => this.scheduleRewrite('records were dropped while the journal could not be written'),
    });
  }

  /** Whether the last write or fsync succeeded (INFO aof_last_write_status). */
  get lastWriteOk(): boolean {
    return this.writer.lastWriteOk;
  }

  get lastWriteError(): string {
    return this.writer.lastWriteError;
  }

  /**
   * Writes this turn's records (once per turn: the server calls it before replies leave; see
   * journal-write.ts). Nothing to do, the usual case without a journal, costs one test.
   */
  commit(force = false): void {
    // Tested here too: every flush of every client calls this, and without a journal this one test is all it costs.
    if (this.recorder.empty) return;
    this.writer.commit(force);
  }

  /**
   * For the warm-up's scratch server (src/server/warmup.ts) only: records its keyspace's changes
   * as a journal does, without files (commit encodes each turn's records, and with no file open
   * writes nothing). A server that will journal then meets compiled code for the recording as well:
   * without this, its first limiter calls recompiled the whole limiter path (the keyspace's writes,
   * inlined in every limiter, had only ever seen no journal) while the first clients waited.
   */
  recordWithoutFiles(on: boolean): void {
    this.server.keyspace.journal = on ? this.recorder : null;
    this.dropRecords();
  }

  /** For the warm-up's scratch server: forgets the records encoded so far (recorder.records still counts them). */
  dropRecords(): void {
    this.recorder.reset();
  }

  get dirPath(): string {
    return join(this.server.config.get('dir'), this.server.config.get('appenddirname'));
  }

  private get prefix(): string {
    return this.server.config.get('appendfilename');
  }

  get manifestName(): string {
    return `${this.prefix}.manifest`;
  }

  get rewriteInProgress(): boolean {
    return this.rewrite !== null;
  }

  /** The journal's bytes on disk: base and incremental files (INFO aof_current_size). */
  get currentSize(): number {
    return this.baseBytes + this.olderIncrBytes + this.writer.size;
  }

  private baseName(seq: number): string {
    return `${this.prefix}.${seq}.base.snap`;
  }

  private incrName(seq: number): string {
    return `${this.prefix}.${seq}.incr.aof`;
  }

  private currentIncrPath(): string {
    const last = this.incrs[this.incrs.length - 1];
    return last === undefined ? this.dirPath : join(this.dirPath, last.name);
  }

  /** The periodic part: everysec's fsync, retries of failed writes, scheduled and automatic rewrites. */
  cron(nowMs: number): void {
    if (!this.on) return;
    this.writer.cron();
    if (this.rewrite !== null || this.server.snapshots.bgsaveInProgress) return;
    if (this.rewriteScheduled && nowMs >= this.rewriteRetryAtMs) {
      this.startRewrite();
      return;
    }
    const pct = this.server.config.int('auto-aof-rewrite-percentage');
    const size = this.currentSize;
    if (pct > 0 && this.loadable && size > this.server.config.int('auto-aof-rewrite-min-size')) {
      const baseSize = this.rewriteBaseSize > 0 ? this.rewriteBaseSize : 1;
      const growth = ((size - baseSize) * 100) / baseSize;
      if (growth >= pct && !this.autoRewriteLimited(nowMs)) {
        this.server.log.notice(`Starting automatic rewriting of AOF on ${Math.floor(growth)}% growth`);
        this.startRewrite();
      }
    }
  }

  /**
   * Whether automatic rewrites are held back: after AUTO_REWRITE_FAILURES failures in a row (a full
   * disk fails each one after writing as much of a base as fits, and the growth that triggers them
   * stays), the next waits a minute, then 2, 4, ... up to an hour of server time, as Redis's
   * aofRewriteLimited. BGREWRITEAOF is never held back; a success ends it.
   */
  private autoRewriteLimited(nowMs: number): boolean {
    if (this.rewriteFailuresInRow < AUTO_REWRITE_FAILURES) {
      this.autoLimitMinutes = 0;
      this.autoLimitUntilMs = 0;
      return false;
    }
    if (this.autoLimitUntilMs !== 0) {
      if (nowMs < this.autoLimitUntilMs) return true;
      this.autoLimitUntilMs = 0;
      return false;
    }
    this.autoLimitMinutes = Math.min(this.autoLimitMinutes === 0 ? 1 : this.autoLimitMinutes * 2, AUTO_REWRITE_MAX_DELAY_MINUTES);
    this.autoLimitUntilMs = nowMs + this.autoLimitMinutes * 60_000;
    this.server.log.warning(`Background AOF rewrite has repeatedly failed and triggered the limit, will retry in ${this.autoLimitMinutes} minutes`);
    return true;
  }

  private scheduleRewrite(why: string): void {
    this.server.log.notice(`AOF rewrite scheduled: ${why}`);
    this.rewriteScheduled = true;
  }

  /** BGREWRITEAOF while a BGSAVE runs: start once it ends. */
  schedule(): void {
    this.rewriteScheduled = true;
    this.rewriteRetryAtMs = 0;
  }

  /**
   * Starts a rewrite (the caller made sure no BGSAVE runs: one point-in-time view at a time).
   * Returns false if it could not start (logged).
   */
  startRewrite(): boolean {
    if (this.rewrite !== null) return false;
    const { server } = this;
    this.rewriteScheduled = false;
    try {
      // Everything recorded so far goes to the current file, synced: the files before the switch are complete.
      this.commit(true);
      // Records waiting for a disk that refuses them stay with the file they were encoded for (the
      // expiry of one may be relative to the one before it): no switch until they are written.
      if (!this.recorder.empty) throw new Error(`the journal cannot be written: ${this.lastWriteError}`);
      this.writer.syncNow();
      const nextIncr = this.openIncr((this.incrs[this.incrs.length - 1]?.seq ?? this.leftoverSeq()) + 1);
      const fromIncr = this.incrs.length - 1;
      if (this.loadable) writeManifest(this.dirPath, this.manifestName, { base: this.base, incrs: this.incrs });
      const baseSeq = Math.max(this.base?.seq ?? 0, this.leftoverSeq()) + 1;
      const job = new BackgroundSave(server.keyspace, () => server.clock.nowMs(), this.dirPath, this.baseName(baseSeq), () => server.flushPending());
      this.rewrite = { job, fromIncr, baseSeq, startedPerf: performance.now() };
      server.log.notice(`Background append only file rewriting started (new incremental file ${nextIncr})`);
      job.run().then(
        (result) => this.rewriteDone(job, result.bytes, result.keys, result.ms),
        (e: unknown) => this.rewriteFailed(job, e),
      );
      return true;
    } catch (e) {
      this.lastBgrewriteOk = false;
      this.rewriteFailuresInRow++;
      this.rewriteScheduled = true;
      this.rewriteRetryAtMs = server.clock.nowMs() + REWRITE_RETRY_MS;
      server.log.warning(`Can't rewrite the append only file: ${describe(e)}`);
      return false;
    }
  }

  /** Highest seq among the files of an earlier journal in the folder (so new names never reuse theirs). */
  private leftoverSeq(): number {
    let seq = 0;
    for (const name of this.leftovers) {
      const m = /\.(\d+)\.(?:base\.snap|incr\.aof)$/.exec(name);
      if (m !== null) seq = Math.max(seq, Number(m[1]));
    }
    return seq;
  }

  /** Creates incremental file `seq` (header written and synced) and makes it the current one. Returns its name. */
  private openIncr(seq: number): string {
    const name = this.incrName(seq);
    const path = join(this.dirPath, name);
    // A leftover of a rewrite that died before naming it in the manifest: never part of a loaded set.
    fs.rmSync(path, { force: true });
    const fd = fs.openSync(path, CREATE_EXCLUSIVE, 0o644);
    try {
      const header = encodeJournalHeader();
      fs.writeSync(fd, header, 0, header.length, 0);
      fs.fdatasyncSync(fd);
    } catch (e) {
      fs.closeSync(fd);
      throw e;
    }
    fsyncDirSync(this.dirPath);
    this.switchTo(fd, JOURNAL_HEADER_BYTES);
    this.incrs.push({ name, seq });
    return name;
  }

  private switchTo(fd: number, size: number): void {
    if (this.writer.fd !== -1) this.olderIncrBytes += this.writer.size;
    this.writer.switchTo(fd, size);
  }

  private rewriteDone(job: BackgroundSave, baseBytes: number, keys: number, ms: number): void {
    const rw = this.rewrite;
    if (rw === null || rw.job !== job) return;
    this.rewrite = null;
    const { server } = this;
    const oldBase = this.base;
    const oldIncrs = this.incrs.slice(0, rw.fromIncr);
    const incrs = this.incrs.slice(rw.fromIncr);
    const base = { name: this.baseName(rw.baseSeq), seq: rw.baseSeq };
    try {
      writeManifest(this.dirPath, this.manifestName, { base, incrs });
    } catch (e) {
      this.rewriteFailedWith(`installing the new manifest: ${describe(e)}`, rw.startedPerf);
      return;
    }
    this.base = base;
    this.baseBytes = baseBytes;
    this.incrs = incrs;
    this.loadable = true;
    let older = 0;
    for (const f of incrs.slice(0, -1)) older += fileSize(join(this.dirPath, f.name));
    this.olderIncrBytes = older;
    // The manifest no longer names them: a crash from here on loads the new set.
    const gone = [...(oldBase === null ? [] : [oldBase.name]), ...oldIncrs.map((f) => f.name), ...this.leftovers];
    this.leftovers = [];
    for (const name of gone) fs.rmSync(join(this.dirPath, name), { force: true });
    this.rewriteBaseSize = this.currentSize;
    this.lastBgrewriteOk = true;
    this.rewriteFailuresInRow = 0;
    this.lastRewriteSec = Math.round((performance.now() - rw.startedPerf) / 1000);
    this.rewrites++;
    this.writer.lost = false;
    server.log.notice(`Background AOF rewrite terminated with success: base ${base.name}, ${keys} keys, ${baseBytes} bytes in ${ms.toFixed(1)} ms`, { base: base.name, keys, bytes: baseBytes });
  }

  private rewriteFailed(job: BackgroundSave, e: unknown): void {
    const rw = this.rewrite;
    if (rw === null || rw.job !== job) return;
    this.rewrite = null;
    this.rewriteFailedWith(describe(e), rw.startedPerf);
  }

  private rewriteFailedWith(reason: string, startedPerf: number): void {
    this.lastBgrewriteOk = false;
    this.rewriteFailuresInRow++;
    this.lastRewriteSec = Math.round((performance.now() - startedPerf) / 1000);
    // The manifest still names the old base and every incremental file since: nothing is lost.
    // Without a base yet (appendonly just turned on), the journal has no loadable set: try again.
    if (!this.loadable || this.writer.lost) {
      this.rewriteScheduled = true;
      this.rewriteRetryAtMs = this.server.clock.nowMs() + REWRITE_RETRY_MS;
    }
    this.server.log.warning(`Background AOF rewrite failed: ${reason}`);
  }

  /**
   * Loads the journal set named by the manifest into the (empty) keyspace, in slices (the port
   * answers LOADING meanwhile), and opens its last incremental file for appending. Returns null when
   * there is no manifest. A torn tail of the last file is cut (aof-load-truncated yes) and logged;
   * anything else wrong throws JournalError or SnapshotError naming the file.
   */
  async load(): Promise<JournalLoadResult | null> {
    const { server } = this;
    const started = performance.now();
    const manifestPath = join(this.dirPath, this.manifestName);
    let text: string;
    try {
      text = fs.readFileSync(manifestPath, 'latin1');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
    const m = parseManifest(text, manifestPath);
    if (m.base === null && m.incrs.length === 0) throw new JournalError(manifestPath, 0, 'the manifest names no file');
    let baseKeys = 0;
    // The incremental files are read and checked ahead, from now on, while the base loads.
    const readAhead = startReadAhead(server, m.incrs.map((f) => join(this.dirPath, f.name)));
    let replayed;
    try {
      if (m.base !== null) {
        const loaded = await server.snapshots.load(join(this.dirPath, m.base.name), false);
        if (loaded === null) throw new JournalError(manifestPath, 0, `the base file ${m.base.name} it names does not exist`);
        baseKeys = loaded.loaded;
        this.baseBytes = loaded.summary.bytes;
      }
      replayed = await replayIncrementalFiles(server, this.dirPath, m.incrs, readAhead);
    } finally {
      readAhead?.stop();
    }
    const { records, truncated, lastValid, olderBytes: older } = replayed;
    this.base = m.base;
    this.incrs = m.incrs;
    this.olderIncrBytes = older;
    this.loadable = true;
    if (this.incrs.length === 0) {
      this.openIncr(1 + (m.base?.seq ?? 0));
      writeManifest(this.dirPath, this.manifestName, { base: this.base, incrs: this.incrs });
    } else {
      this.openLastIncr(lastValid);
    }
    this.rewriteBaseSize = this.currentSize;
    return { manifest: manifestPath, baseKeys, records, files: m.incrs.length, truncated, ms: performance.now() - started };
  }

  /** Opens the last incremental file for appending at `validBytes` (a torn tail is cut off first). */
  private openLastIncr(validBytes: number): void {
    const last = this.incrs[this.incrs.length - 1];
    const path = join(this.dirPath, last.name);
    const fd = fs.openSync(path, O_RDWR | O_NOFOLLOW);
    let size = validBytes;
    if (validBytes < JOURNAL_HEADER_BYTES) {
      // Cut inside its header (a crash right after creating it): it holds no record; start it again.
      const header = encodeJournalHeader();
      fs.writeSync(fd, header, 0, header.length, 0);
      size = JOURNAL_HEADER_BYTES;
    }
    if (fs.fstatSync(fd).size !== size) {
      fs.ftruncateSync(fd, size);
      fs.fdatasyncSync(fd);
    }
    this.writer.switchTo(fd, size);
  }

  /**
   * Starts recording: at start after `load()` (files open), or, when there is no journal yet, by
   * building one from the keyspace as it is now (the snapshot loaded, or empty): a synchronous base
   * at start (`sync`), a background rewrite otherwise (CONFIG SET appendonly yes, as Redis).
   */
  begin(fromScratch: boolean, sync: boolean): void {
    const { server } = this;
    server.keyspace.journal = this.recorder;
    this.on = true;
    if (!fromScratch) return;
    fs.mkdirSync(this.dirPath, { recursive: true });
    this.leftovers = this.existingFiles();
    if (!sync) {
      if (server.snapshots.bgsaveInProgress) this.schedule();
      else this.startRewrite();
      return;
    }
    const baseSeq = this.leftoverSeq() + 1;
    const result = writeSnapshotSync(server.keyspace, server.clock.nowMs(), this.dirPath, this.baseName(baseSeq));
    this.base = { name: this.baseName(baseSeq), seq: baseSeq };
    this.baseBytes = result.bytes;
    this.openIncr(baseSeq);
    writeManifest(this.dirPath, this.manifestName, { base: this.base, incrs: this.incrs });
    this.loadable = true;
    for (const name of this.leftovers) fs.rmSync(join(this.dirPath, name), { force: true });
    this.leftovers = [];
    this.rewriteBaseSize = this.currentSize;
    server.log.notice(`Creating AOF base file ${this.base.name} on server start: ${result.keys} keys`, { base: this.base.name, keys: result.keys });
  }

  /** The journal's own files in the folder (an earlier journal's, or a crashed rewrite's). */
  private existingFiles(): string[] {
    const pattern = new RegExp(`^${this.prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.\\d+\\.(?:base\\.snap|incr\\.aof)$`);
    try {
      return fs.readdirSync(this.dirPath).filter((n) => pattern.test(n));
    } catch {
      return [];
    }
  }

  /** CONFIG SET appendonly no: the records so far are written and synced, and recording stops. */
  stop(): void {
    if (!this.on) return;
    this.commit(true);
    this.writer.syncNow();
    this.server.keyspace.journal = null;
    this.recorder.reset();
    this.on = false;
    if (this.rewrite !== null) {
      this.rewrite.job.abort();
      this.rewrite = null;
    }
    this.rewriteScheduled = false;
    this.writer.close();
    this.base = null;
    this.incrs = [];
    this.loadable = false;
    this.baseBytes = this.olderIncrBytes = this.writer.size = this.writer.syncedBytes = 0;
    this.server.log.notice('AOF turned off: the journal files are kept as they are');
  }

  /** CONFIG SET: appendonly turned on or off. */
  applyConfig(): void {
    this.writer.policy = this.server.config.get('appendfsync');
    const want = this.server.config.bool('appendonly');
    if (want && !this.on && !this.server.snapshots.loading) this.begin(true, false);
    else if (!want && this.on) this.stop();
  }

  /** SHUTDOWN / SIGTERM: every record written and fsynced; a running rewrite is abandoned (the manifest still names a complete set). */
  shutdown(): void {
    if (!this.on) return;
    if (this.rewrite !== null) {
      this.rewrite.job.abort();
      const temp = this.rewrite.job.tempFile;
      this.rewrite = null;
      fs.rmSync(temp, { force: true });
    }
    this.commit(true);
    this.writer.syncNow();
    this.writer.close();
    this.server.log.notice('Calling fsync() on the AOF file.');
  }

  /** Removes temp files of rewrites that died with their process (the snapshot's rule: writer.ts tempPath). */
  removeStaleTempFiles(): string[] {
    const removed: string[] = [];
    let names: string[];
    try {
      names = fs.readdirSync(this.dirPath);
    } catch {
      return removed;
    }
    for (const name of names) {
      if (name.startsWith(`temp-${this.manifestName}.`)) {
        // A manifest being written when the process died (the rename never happened): the lock is ours.
        fs.rmSync(join(this.dirPath, name), { force: true });
        removed.push(join(this.dirPath, name));
        continue;
      }
      const m = TEMP_FILE_PATTERN.exec(name);
      if (m === null || Number(m[1]) === process.pid || processAlive(Number(m[1]))) continue;
      fs.rmSync(join(this.dirPath, name), { force: true });
      removed.push(join(this.dirPath, name));
    }
    return removed;
  }

  /**
   * Why the journal keeps the server from being ready (/readyz), or null. Not ready while what was
   * answered would not survive a restart: a write or fsync error persists (the records wait in
   * memory), records were dropped during one and the rewrite that repairs the journal has not
   * succeeded yet, or a journal being built has no complete set on disk because its rewrite failed.
   * Decisions go on meanwhile (stop-writes-on-bgsave-error no): readiness is what tells a balancer.
   */
  notReadyReason(): string | null {
    if (!this.on) return null;
    const w = this.writer;
    if (!w.lastWriteOk) return `the journal cannot be written (INFO persistence aof_last_write_status:err: ${w.lastWriteError})`;
    if (w.lost) return 'journal records were dropped while the disk refused them; the rewrite that repairs the journal has not succeeded yet';
    if (!this.loadable && !this.lastBgrewriteOk) return 'the journal has no complete set of files: its rewrite failed (INFO persistence aof_last_bgrewrite_status:err)';
    return null;
  }

  /** The journal's figures for /metrics (cellgate_aof_*), read at the scrape. */
  metrics(): JournalMetrics {
    const w = this.writer;
    return {
      enabled: this.on,
      lastWriteOk: w.lastWriteOk,
      lastBgrewriteOk: this.lastBgrewriteOk,
      rewriteInProgress: this.rewrite !== null,
      rewrites: this.rewrites,
      rewriteFailuresInRow: this.rewriteFailuresInRow,
      currentBytes: this.on ? this.currentSize : 0,
      baseBytes: this.on ? this.baseBytes : 0,
      bufferBytes: this.recorder.pos,
      writeErrors: w.writeErrors,
      delayedFsyncs: w.delayedFsync,
      writtenBytes: w.bytesWritten,
      records: this.recorder.records,
    };
  }

  /** INFO persistence's aof_* fields, Redis's names. */
  infoRows(): [string, string | number][] {
    const rw = this.rewrite;
    const rows: [string, string | number][] = [
      ['aof_enabled', this.on ? 1 : 0],
      ['aof_rewrite_in_progress', rw !== null ? 1 : 0],
      ['aof_rewrite_scheduled', this.rewriteScheduled ? 1 : 0],
      ['aof_last_rewrite_time_sec', this.lastRewriteSec],
      ['aof_current_rewrite_time_sec', rw !== null ? Math.round((performance.now() - rw.startedPerf) / 1000) : -1],
      ['aof_last_bgrewrite_status', this.lastBgrewriteOk ? 'ok' : 'err'],
      ['aof_rewrites', this.rewrites],
      ['aof_rewrites_consecutive_failures', this.rewriteFailuresInRow],
      ['aof_last_write_status', this.lastWriteOk ? 'ok' : 'err'],
      ['aof_last_cow_size', 0],
    ];
    if (this.on) {
      rows.push(
        ['aof_current_size', this.currentSize],
        ['aof_base_size', this.baseBytes],
        ['aof_pending_rewrite', this.rewriteScheduled ? 1 : 0],
        ['aof_buffer_length', this.recorder.pos],
        ['aof_pending_bio_fsync', this.writer.fsyncInFlight ? 1 : 0],
        ['aof_delayed_fsync', this.writer.delayedFsync],
      );
    }
    return rows;
  }
}

function fileSize(path: string): number {
  try {
    return fs.statSync(path).size;
  } catch {
    return 0;
  }
}
