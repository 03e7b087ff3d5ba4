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
 *   does. Writes are refused (MISCONF) only with stop-writes-on-bgsave-error yes. When the disk frees
 *   less than the waiting records need, a rewrite repairs the journal without them: the keyspace
 *   holds them, so its base does (startRewrite's `gap`).
 */
import fs from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Server } from '../server/server.js';
import { JournalRecorder } from './journal-encode.js';
import { createIncrFile, existingJournalFiles, fileSize, highestSeq, openLastIncrFile, removeStaleJournalTemps } from './journal-folder.js';
import { JournalError, JOURNAL_HEADER_BYTES } from './journal-format.js';
import { replayIncrementalFiles } from './journal-load.js';
import { startReadAhead } from './journal-read-ahead.js';
import { nextSeq, readManifest, writeManifest, type ManifestFile } from './journal-manifest.js';
import { RewriteBook } from './journal-rewrite.js';
import { describe, JournalWriter } from './journal-write.js';
import { BackgroundSave, writeSnapshotSync } from './writer.js';

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
  /** Scheduled rewrites, outcomes, automatic ones held back. */
  private readonly book = new RewriteBook();

  constructor(private readonly server: Server) {
    // Built among the Server's fields, before its config is set: applyConfig (at start) reads it.
    this.recorder = new JournalRecorder(server.keyspace);
    this.writer = new JournalWriter(server, this.recorder, {
      currentPath: () => this.currentIncrPath(),
      lostRecords: () => this.repairSoon('records were dropped while the journal could not be written, and the disk takes writes again'),
      diskTookWrites: (why) => this.repairSoon(why),
    });
  }

  /** Whether the last write or fsync succeeded (INFO aof_last_write_status). */
  get lastWriteOk(): boolean {
    // Records the disk refused and that were dropped are in no file until the repairing rewrite is
    // installed: until then the journal does not hold what was answered, whatever the last write did.
    return this.writer.lastWriteOk && !this.writer.lost;
  }

  get lastWriteError(): string {
    if (!this.writer.lastWriteOk) return this.writer.lastWriteError;
    return this.writer.lost ? 'records the disk refused are not in the journal yet: the rewrite that writes them from memory has not succeeded' : '';
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
    if (this.book.due(nowMs)) {
      this.startRewrite();
      return;
    }
    const pct = this.server.config.int('auto-aof-rewrite-percentage');
    const size = this.currentSize;
    if (pct > 0 && this.loadable && size > this.server.config.int('auto-aof-rewrite-min-size')) {
      const baseSize = this.rewriteBaseSize > 0 ? this.rewriteBaseSize : 1;
      const growth = ((size - baseSize) * 100) / baseSize;
      if (growth >= pct && !this.book.autoLimited(nowMs, this.server.log)) {
        this.server.log.notice(`Starting automatic rewriting of AOF on ${Math.floor(growth)}% growth`);
        this.startRewrite();
      }
    }
  }

  /**
   * The disk takes writes again, or part of them, while the journal lacks records: a rewrite from the
   * keyspace (which holds them all) is started as soon as no BGSAVE runs.
   */
  private repairSoon(why: string): void {
    if (this.rewrite !== null || (this.book.scheduled && this.book.retryAtMs === 0)) return;
    this.server.log.notice(`AOF rewrite scheduled: ${why}`);
    this.book.schedule();
  }

  /** BGREWRITEAOF while a BGSAVE runs: start once it ends. */
  schedule(): void {
    this.book.schedule();
  }

  get rewriteScheduled(): boolean {
    return this.book.scheduled;
  }

  /**
   * Starts a rewrite (the caller made sure no BGSAVE runs: one point-in-time view at a time).
   * Returns false if it could not start (logged).
   */
  startRewrite(): boolean {
    if (this.rewrite !== null) return false;
    const { server } = this;
    this.book.scheduled = false;
    try {
      // No file yet: this rewrite builds the journal (appendonly turned on at run time).
      const building = this.writer.fd === -1;
      // Everything recorded so far goes to the current file, synced: the files before the switch are complete.
      this.commit(true);
      this.writer.syncNow();
      // Records the disk refused (still waiting, or dropped past the buffer's cap) are in no file,
      // but they are in the keyspace, so the base this rewrite writes holds them: the rewrite needs
      // no backlog written first (a disk that freed less than the backlog takes a compact base).
      // Until that base is installed the manifest keeps naming the old set, without the new file:
      // what the new file holds follows records the old files lack.
      const gap = !building && (!this.recorder.empty || this.writer.lost);
      const nextIncr = this.openIncr(nextSeq(this.incrs[this.incrs.length - 1]?.seq ?? this.leftoverSeq()));
      const fromIncr = this.incrs.length - 1;
      if (this.loadable && !gap) writeManifest(this.dirPath, this.manifestName, { base: this.base, incrs: this.incrs });
      const baseSeq = nextSeq(Math.max(this.base?.seq ?? 0, this.leftoverSeq()));
      if (building || gap) {
        // From here every change is recorded into the new file; the base, the keyspace as it is at
        // this instant (BackgroundSave's point-in-time view, taken below in this same turn), holds
        // every change before.
        server.keyspace.journal = this.recorder;
        if (gap && !this.recorder.empty) server.log.warning(`AOF: ${this.recorder.pos} bytes of records the disk refused are dropped; the new base written from memory holds them`);
        this.recorder.reset();
        if (gap) this.writer.lost = true;
      }
      const job = new BackgroundSave(server.keyspace, () => server.clock.nowMs(), this.dirPath, this.baseName(baseSeq), () => server.flushPending());
      this.rewrite = { job, fromIncr, baseSeq, startedPerf: performance.now() };
      server.log.notice(`Background append only file rewriting started (new incremental file ${nextIncr})`);
      job.run().then(
        (result) => this.rewriteDone(job, result.bytes, result.keys, result.ms),
        (e: unknown) => this.rewriteFailed(job, e),
      );
      return true;
    } catch (e) {
      this.book.failed(-1, true, server.clock.nowMs());
      server.log.warning(`Can't rewrite the append only file: ${describe(e)}`);
      return false;
    }
  }

  /** Highest seq among the files of an earlier journal in the folder (so new names never reuse theirs). */
  private leftoverSeq(): number {
    return highestSeq(this.leftovers);
  }

  /** Creates incremental file `seq` (header written and synced) and makes it the current one. Returns its name. */
  private openIncr(seq: number): string {
    const name = this.incrName(seq);
    const fd = createIncrFile(this.dirPath, name);
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
    this.book.succeeded(Math.round((performance.now() - rw.startedPerf) / 1000));
    const repaired = this.writer.lost;
    this.writer.lost = false;
    // Its base was written: the disk takes writes. With nothing waiting, the journal is whole again.
    if (!this.writer.lastWriteOk && this.recorder.empty) this.writer.recovered();
    else if (repaired && this.writer.lastWriteOk) {
      server.snapshots.refreshDenyWrites();
      server.log.warning('AOF repaired: the new base holds every record the disk had refused; the journal is whole again.');
    }
    server.log.notice(`Background AOF rewrite terminated with success: base ${base.name}, ${keys} keys, ${baseBytes} bytes in ${ms.toFixed(1)} ms`, { base: base.name, keys, bytes: baseBytes });
  }

  private rewriteFailed(job: BackgroundSave, e: unknown): void {
    const rw = this.rewrite;
    if (rw === null || rw.job !== job) return;
    this.rewrite = null;
    this.rewriteFailedWith(describe(e), rw.startedPerf);
  }

  private rewriteFailedWith(reason: string, startedPerf: number): void {
    // The manifest still names the old base and every incremental file since: nothing is lost.
    // Without a base yet (appendonly just turned on), the journal has no loadable set: try again.
    this.book.failed(Math.round((performance.now() - startedPerf) / 1000), !this.loadable || this.writer.lost, this.server.clock.nowMs());
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
    const m = await readManifest(manifestPath);
    if (m === null) return null;
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
      this.openIncr(nextSeq(m.base?.seq ?? 0));
      writeManifest(this.dirPath, this.manifestName, { base: this.base, incrs: this.incrs });
    } else {
      this.openLastIncr(lastValid);
    }
    this.rewriteBaseSize = this.currentSize;
    return { manifest: manifestPath, baseKeys, records, files: m.incrs.length, truncated, ms: performance.now() - started };
  }

  /** Opens the last incremental file for appending at `validBytes` (a torn tail is cut off first). */
  private openLastIncr(validBytes: number): void {
    const { fd, size } = openLastIncrFile(join(this.dirPath, this.incrs[this.incrs.length - 1].name), validBytes);
    this.writer.switchTo(fd, size);
  }

  /**
   * Starts recording: at start after `load()` (files open), or, when there is no journal yet, by
   * building one from the keyspace as it is now (the snapshot loaded, or empty): a synchronous base
   * at start (`sync`), a background rewrite otherwise (CONFIG SET appendonly yes, as Redis).
   */
  begin(fromScratch: boolean, sync: boolean): void {
    const { server } = this;
    this.on = true;
    if (!fromScratch || sync) server.keyspace.journal = this.recorder;
    if (!fromScratch) return;
    fs.mkdirSync(this.dirPath, { recursive: true });
    this.leftovers = existingJournalFiles(this.dirPath, this.prefix);
    if (!sync) {
      // Recording starts with the rewrite that builds the journal (startRewrite): what changes
      // before it, while a BGSAVE holds the point-in-time view, is in the base it writes.
      if (server.snapshots.bgsaveInProgress) this.schedule();
      else this.startRewrite();
      return;
    }
    const baseSeq = nextSeq(this.leftoverSeq());
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
    this.book.scheduled = false;
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
    return removeStaleJournalTemps(this.dirPath, this.manifestName);
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
    if (!this.loadable && !this.book.lastOk) return 'the journal has no complete set of files: its rewrite failed (INFO persistence aof_last_bgrewrite_status:err)';
    return null;
  }

  /** The journal's figures for /metrics (cellgate_aof_*), read at the scrape. */
  metrics(): JournalMetrics {
    const w = this.writer;
    return {
      enabled: this.on,
      lastWriteOk: this.lastWriteOk,
      lastBgrewriteOk: this.book.lastOk,
      rewriteInProgress: this.rewrite !== null,
      rewrites: this.book.count,
      rewriteFailuresInRow: this.book.failuresInRow,
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
      ['aof_rewrite_scheduled', this.book.scheduled ? 1 : 0],
      ['aof_last_rewrite_time_sec', this.book.lastSec],
      ['aof_current_rewrite_time_sec', rw !== null ? Math.round((performance.now() - rw.startedPerf) / 1000) : -1],
      ['aof_last_bgrewrite_status', this.book.lastOk ? 'ok' : 'err'],
      ['aof_rewrites', this.book.count],
      ['aof_rewrites_consecutive_failures', this.book.failuresInRow],
      ['aof_last_write_status', this.lastWriteOk ? 'ok' : 'err'],
      ['aof_last_cow_size', 0],
    ];
    if (this.on) {
      rows.push(
        ['aof_current_size', this.currentSize],
        ['aof_base_size', this.baseBytes],
        ['aof_pending_rewrite', this.book.scheduled ? 1 : 0],
        ['aof_buffer_length', this.recorder.pos],
        ['aof_pending_bio_fsync', this.writer.fsyncInFlight ? 1 : 0],
        ['aof_delayed_fsync', this.writer.delayedFsync],
      );
    }
    return rows;
  }
}
