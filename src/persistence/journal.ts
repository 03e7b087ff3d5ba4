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
 *   unless the last write was less than WRITE_COALESCE_MS ago (turns of one command each at
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
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Server } from '../server/server.js';
import { TEMP_FILE_PATTERN } from './format.js';
import { processAlive } from './dir.js';
import { encodeJournalHeader, JournalError, JournalParser, JournalRecorder, JournalReplay, JOURNAL_HEADER_BYTES } from './journal-format.js';
import { BackgroundSave, fsyncDirSync, writeSnapshotSync } from './writer.js';

const { O_CREAT, O_EXCL, O_NOFOLLOW, O_RDWR, O_WRONLY } = fs.constants;
/** A new file of the journal: created here and now, never an existing file or a symlink's target. */
const CREATE_EXCLUSIVE = O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW;

/** Bytes of records kept while the file cannot be written; past this they are dropped and a rewrite is due. */
const MAX_BUFFERED_BYTES = 64 * 1024 * 1024;
/** everysec / no: at most one write per this many ms (the records of the turns between wait in memory). */
const WRITE_COALESCE_MS = 1;
/** ... unless this many bytes wait. */
const COALESCE_MAX_BYTES = 256 * 1024;
/** A rewrite that failed while the journal has no loadable set yet is retried by the cron after this long. */
const REWRITE_RETRY_MS = 5000;
/** Records replayed between two looks at the slice's clock while loading. */
const LOAD_RECORDS_PER_CHECK = 1024;
const LOAD_SLICE_MS = 10;

export interface ManifestFile {
  name: string;
  seq: number;
}

export interface Manifest {
  base: ManifestFile | null;
  incrs: ManifestFile[];
}

/** Redis's manifest lines: `file <name> seq <n> type <b|h|i>`, the base first, then the incremental files. */
export function formatManifest(m: Manifest): string {
  let out = '';
  if (m.base !== null) out += `file ${m.base.name} seq ${m.base.seq} type b\n`;
  for (const f of m.incrs) out += `file ${f.name} seq ${f.seq} type i\n`;
  return out;
}

/** Parses a manifest; `type h` (history, Redis's files waiting for deletion) lines are skipped. Throws JournalError. */
export function parseManifest(text: string, file: string): Manifest {
  const m: Manifest = { base: null, incrs: [] };
  let offset = 0;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    const at = offset;
    offset += raw.length + 1;
    if (line === '' || line.startsWith('#')) continue;
    const parts = line.split(/\s+/);
    const fields = new Map<string, string>();
    for (let i = 0; i + 1 < parts.length; i += 2) fields.set(parts[i], parts[i + 1]);
    const name = fields.get('file');
    const seq = Number(fields.get('seq'));
    const type = fields.get('type');
    if (parts.length % 2 !== 0 || name === undefined || !Number.isSafeInteger(seq) || seq < 1 || type === undefined) {
      throw new JournalError(file, at, `invalid manifest line '${line.slice(0, 128)}' (expected 'file <name> seq <n> type <b|h|i>')`);
    }
    if (name.includes('/') || name === '.' || name === '..') throw new JournalError(file, at, `manifest names a path, not a file: '${name.slice(0, 128)}'`);
    if (type === 'b') {
      if (m.base !== null) throw new JournalError(file, at, 'the manifest names two base files');
      m.base = { name, seq };
    } else if (type === 'i') {
      const last = m.incrs[m.incrs.length - 1];
      if (last !== undefined && seq <= last.seq) throw new JournalError(file, at, `incremental file seq ${seq} after seq ${last.seq}: out of order`);
      m.incrs.push({ name, seq });
    } else if (type !== 'h') {
      throw new JournalError(file, at, `unknown file type '${type.slice(0, 16)}' in the manifest`);
    }
  }
  return m;
}

/** Writes a manifest atomically: temp file, fsync, rename over the old one, directory fsync. */
function writeManifest(dirPath: string, manifestName: string, m: Manifest): void {
  // Created exclusively under a fresh name, never through a symlink (as every file cellgate makes for itself).
  const temp = join(dirPath, `temp-${manifestName}.${randomBytes(6).toString('hex')}`);
  const fd = fs.openSync(temp, CREATE_EXCLUSIVE, 0o644);
  try {
    fs.writeSync(fd, formatManifest(m));
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(temp, join(dirPath, manifestName));
  fsyncDirSync(dirPath);
}

export interface JournalLoadResult {
  manifest: string;
  baseKeys: number;
  records: number;
  files: number;
  truncated: boolean;
  ms: number;
}

function describe(e: unknown): string {
  const err = e as NodeJS.ErrnoException;
  const message = String(err.message ?? e);
  return err.code !== undefined && !message.startsWith(err.code) ? `${err.code}: ${message}` : message;
}

export class AppendOnly {
  readonly recorder: JournalRecorder;
  /** True while changes are recorded (appendonly yes, the journal opened or being built). */
  on = false;
  private fd = -1;
  /** The current incremental file's size: where the next write goes. */
  private incrBytes = 0;
  /** Of it, the bytes known fsynced. */
  private syncedBytes = 0;
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
  lastWriteOk = true;
  lastWriteError = '';
  private lastWriteLogMs = 0;
  /** Records were dropped during a write failure: the next successful write is followed by a rewrite. */
  private lost = false;
  private fsyncInFlight = false;
  private lastFsyncPerf = performance.now();
  /** everysec fsyncs that found the previous one still running (Redis's aof_delayed_fsync). */
  delayedFsync = 0;
  /** Every record written since start (bench: bytes per record). */
  bytesWritten = 0;

  constructor(private readonly server: Server) {
    // Built among the Server's fields, before its config is set: applyConfig (at start) reads it.
    this.recorder = new JournalRecorder(server.keyspace);
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
    return this.baseBytes + this.olderIncrBytes + this.incrBytes;
  }

  private baseName(seq: number): string {
    return `${this.prefix}.${seq}.base.snap`;
  }

  private incrName(seq: number): string {
    return `${this.prefix}.${seq}.incr.aof`;
  }

  /** `appendfsync`, kept as a field: commit reads it every turn (applyConfig refreshes it). */
  private policy = 'everysec';

  /**
   * Writes this turn's records (once per turn: the server calls it before replies leave). Nothing to
   * do, the usual case without a journal, costs one test.
   */
  commit(force = false): void {
    if (this.recorder.empty) return;
    this.recorder.encodePending();
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

  private lastWritePerf = 0;
  private writeTimer = false;
  private readonly writeLater = (): void => {
    this.writeTimer = false;
    try {
      this.commit(true);
    } catch (e) {
      this.server.tasks.failed('journal write', e);
    }
  };

  /** Writes the buffered records at the current end of the file. Returns false on an error (handled). */
  private writeBuffered(): boolean {
    const r = this.recorder;
    let written = 0;
    try {
      while (written < r.pos) {
        const n = fs.writeSync(this.fd, r.buf, written, r.pos - written, this.incrBytes);
        this.incrBytes += n;
        written += n;
      }
      this.bytesWritten += written;
      r.consumed(written);
    } catch (e) {
      this.bytesWritten += written;
      r.consumed(written);
      this.writeFailed(e);
      return false;
    }
    if (!this.lastWriteOk) {
      this.lastWriteOk = true;
      this.lastWriteError = '';
      this.server.snapshots.refreshDenyWrites();
      this.server.log.warning('AOF write error looks solved, cellgate can write again.');
      if (this.lost) this.scheduleRewrite('records were dropped while the journal could not be written');
    }
    return true;
  }

  private writeFailed(e: unknown): void {
    const text = describe(e);
    if (this.policy === 'always') {
      // The replies of this turn are waiting for this write: none may say yes to a decision that is
      // not on disk. Redis exits here too; the restart loads everything answered before.
      this.server.log.warning(`Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting... (${text})`, { file: this.currentIncrPath() });
      process.exit(1);
    }
    const first = this.lastWriteOk;
    this.lastWriteOk = false;
    this.lastWriteError = text;
    if (first) this.server.snapshots.refreshDenyWrites();
    const now = Date.now();
    if (first || now - this.lastWriteLogMs > 30_000) {
      this.lastWriteLogMs = now;
      this.server.log.warning(`Error writing to the AOF file: ${text} (the records are kept and retried)`, { file: this.currentIncrPath() });
    }
    if (this.recorder.pos > MAX_BUFFERED_BYTES) {
      // The journal on disk is now behind the keyspace for good: a rewrite, once writes work again, repairs it.
      this.recorder.reset();
      if (!this.lost) this.server.log.warning(`More than ${MAX_BUFFERED_BYTES} bytes of journal records could not be written: dropped; the journal is rewritten once the disk accepts writes again`);
      this.lost = true;
    }
  }

  private currentIncrPath(): string {
    const last = this.incrs[this.incrs.length - 1];
    return last === undefined ? this.dirPath : join(this.dirPath, last.name);
  }

  /** fsync of the current file, now (appendfsync always; shutdown; before a switch). */
  private syncNow(): void {
    if (this.fd === -1 || this.syncedBytes === this.incrBytes) return;
    try {
      fs.fdatasyncSync(this.fd);
      this.syncedBytes = this.incrBytes;
      this.lastFsyncPerf = performance.now();
    } catch (e) {
      this.writeFailed(e);
    }
  }

  /** The periodic part: everysec's fsync, retries of failed writes, scheduled and automatic rewrites. */
  cron(nowMs: number): void {
    if (!this.on) return;
    if (!this.recorder.empty && this.fd !== -1) this.commit(true);
    if (this.policy === 'everysec' && this.fd !== -1 && this.syncedBytes < this.incrBytes && performance.now() - this.lastFsyncPerf >= 1000) {
      if (this.fsyncInFlight) {
        this.delayedFsync++;
      } else {
        this.fsyncInFlight = true;
        this.lastFsyncPerf = performance.now();
        const fd = this.fd;
        const upTo = this.incrBytes;
        fs.fdatasync(fd, (err) => {
          this.fsyncInFlight = false;
          if (fd !== this.fd) return; // the file was switched (and synced) meanwhile
          if (err !== null) this.writeFailed(err);
          else this.syncedBytes = Math.max(this.syncedBytes, upTo);
        });
      }
    }
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
      if (growth >= pct) {
        this.server.log.notice(`Starting automatic rewriting of AOF on ${Math.floor(growth)}% growth`);
        this.startRewrite();
      }
    }
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
      this.syncNow();
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
    if (this.fd !== -1) {
      this.olderIncrBytes += this.incrBytes;
      try {
        fs.closeSync(this.fd);
      } catch {
        /* closing a file we synced: nothing to lose */
      }
    }
    this.fd = fd;
    this.incrBytes = size;
    this.syncedBytes = size;
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
    this.lastRewriteSec = Math.round((performance.now() - rw.startedPerf) / 1000);
    this.rewrites++;
    this.lost = false;
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
    this.lastRewriteSec = Math.round((performance.now() - startedPerf) / 1000);
    // The manifest still names the old base and every incremental file since: nothing is lost.
    // Without a base yet (appendonly just turned on), the journal has no loadable set: try again.
    if (!this.loadable || this.lost) {
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
    if (m.base !== null) {
      const loaded = await server.snapshots.load(join(this.dirPath, m.base.name), false);
      if (loaded === null) throw new JournalError(manifestPath, 0, `the base file ${m.base.name} it names does not exist`);
      baseKeys = loaded.loaded;
      this.baseBytes = loaded.summary.bytes;
    }
    const nowMs = server.clock.nowMs();
    const replay = new JournalReplay(server.keyspace, nowMs);
    let records = 0;
    let truncated = false;
    let lastValid = JOURNAL_HEADER_BYTES;
    let older = 0;
    for (let i = 0; i < m.incrs.length; i++) {
      const path = join(this.dirPath, m.incrs[i].name);
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
        while (scan === null && performance.now() < sliceEnd) scan = parser.next(replay.apply, LOAD_RECORDS_PER_CHECK);
        if (scan === null) {
          server.flushPending();
          await nextTurn();
        }
      }
      records += scan.records;
      const last = i === m.incrs.length - 1;
      if (scan.torn !== null) {
        if (!last) throw new JournalError(path, scan.validBytes, `truncated: ${scan.torn}, and it is not the last incremental file`);
        if (!server.config.bool('aof-load-truncated')) {
          throw new JournalError(path, scan.validBytes, `truncated: ${scan.torn} (aof-load-truncated is no; set it to yes to cut the half-written record and start)`);
        }
        truncated = true;
        const cutTo = Math.max(scan.validBytes, 0);
        server.log.warning(`!!! Warning: short read while loading the AOF file ${m.incrs[i].name}: ${scan.torn} !!!`, { file: path, offset: cutTo });
        server.log.warning(`AOF loaded anyway because aof-load-truncated is enabled: ${buf.length - cutTo} bytes cut at offset ${cutTo} (${scan.records} records kept)`, { file: path, offset: cutTo });
      }
      if (last) lastValid = scan.validBytes;
      else older += buf.length;
    }
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
    this.fd = fd;
    this.incrBytes = size;
    this.syncedBytes = size;
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
    this.syncNow();
    this.server.keyspace.journal = null;
    this.recorder.reset();
    this.on = false;
    if (this.rewrite !== null) {
      this.rewrite.job.abort();
      this.rewrite = null;
    }
    this.rewriteScheduled = false;
    if (this.fd !== -1) fs.closeSync(this.fd);
    this.fd = -1;
    this.base = null;
    this.incrs = [];
    this.loadable = false;
    this.baseBytes = this.olderIncrBytes = this.incrBytes = this.syncedBytes = 0;
    this.server.log.notice('AOF turned off: the journal files are kept as they are');
  }

  /** CONFIG SET: appendonly turned on or off. */
  applyConfig(): void {
    this.policy = this.server.config.get('appendfsync');
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
    this.syncNow();
    if (this.fd !== -1) {
      fs.closeSync(this.fd);
      this.fd = -1;
    }
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
      ['aof_last_write_status', this.lastWriteOk ? 'ok' : 'err'],
      ['aof_last_cow_size', 0],
    ];
    if (this.on) {
      rows.push(
        ['aof_current_size', this.currentSize],
        ['aof_base_size', this.baseBytes],
        ['aof_pending_rewrite', this.rewriteScheduled ? 1 : 0],
        ['aof_buffer_length', this.recorder.pos],
        ['aof_pending_bio_fsync', this.fsyncInFlight ? 1 : 0],
        ['aof_delayed_fsync', this.delayedFsync],
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
