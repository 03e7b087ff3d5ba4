/**
 * Persistence as Redis does it with RDB, for cellgate's snapshots: loading at start, SAVE, BGSAVE,
 * the `save <seconds> <changes>` policy, the snapshot at shutdown, INFO's persistence fields and
 * `stop-writes-on-bgsave-error` (MISCONF).
 *
 * Time: LASTSAVE, rdb_last_save_time and the save policy follow the server clock (as limiter
 * decisions do), so `DEBUG CLOCK ADVANCE` drives the policy deterministically in tests. In real mode
 * the server clock is the wall clock made monotonic, so this matches Redis's elapsed seconds.
 */
import { readdirSync, rmSync, statSync } from 'node:fs';
import { readWholeRegularFile } from '../files/regular-file.js';
import { SNAPSHOT_FILE } from './persisted-file.js';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { CommandSpec } from '../commands/types.js';
import type { Server } from '../server/server.js';
import { SnapshotLoad, type SnapshotSummary } from './reader.js';
import { processAlive } from './dir.js';
import { HEADER_BYTES, TEMP_FILE_PATTERN } from './format.js';
import { BackgroundSave, snapshotPath, writeSnapshotSync, type SaveResult } from './writer.js';

/** After a failed background save, the policy waits this long before trying again (Redis's CONFIG_BGSAVE_RETRY_DELAY). */
const BGSAVE_RETRY_DELAY_MS = 5000;

/** Redis's reply to a command that needs the dataset while it loads (server.c shared.loadingerr). */
export const LOADING_MESSAGE = 'LOADING Redis is loading the dataset in memory';

/** CPU time one loading slice may take before the server answers the clients waiting (INFO, PING). */
const LOAD_SLICE_MS = 10;
/** Entries loaded between two looks at the slice's clock. */
const LOAD_ENTRIES_PER_CHECK = 256;

export const MISCONF_MESSAGE =
  "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";

/** An error reply with its errorstats code. */
export interface Refusal {
  readonly code: string;
  readonly message: string;
}
const LOADING_REFUSAL: Refusal = { code: 'LOADING', message: LOADING_MESSAGE };
const MISCONF_REFUSAL: Refusal = { code: 'MISCONF', message: MISCONF_MESSAGE };

export interface LoadResult {
  file: string;
  loaded: number;
  expired: number;
  ms: number;
  summary: SnapshotSummary;
}

export type SaveMode = 'default' | 'save' | 'nosave';

export class Snapshotter {
  /** Server-clock ms of the last successful save (or of the start, as Redis). */
  lastSaveMs: number;
  /** keyspace.dirty when the last successful save began. */
  private dirtyAtLastSave = 0;
  private lastBgsaveOk = true;
  private lastBgsaveTryMs = 0;
  private lastBgsaveSeconds = -1;
  private lastError = '';
  private saves = 0;
  private lastSave: SaveResult | null = null;
  private lastLoad: LoadResult | null = null;
  private background: BackgroundSave | null = null;
  private backgroundScheduled = false;
  /**
   * True while write commands must be refused with MISCONF: the last background save failed, save
   * points are configured and `stop-writes-on-bgsave-error` is yes (it is no by default: for soft
   * state, refusing every limiter call is a worse outage than a snapshot that is not being saved).
   */
  denyWrites = false;
  /** denyWrites because the journal cannot be written (Redis's MISCONF for the AOF). */
  private denyWritesForJournal = false;
  /**
   * True until `load()` has ended: commands without the `loading` flag get LOADING, and nothing
   * saves (a SIGTERM while the ports are being bound, before the load even began, must not write an
   * empty keyspace over the snapshot).
   */
  loading = true;
  /**
   * True when `refusal` may refuse a command (loading, or denyWrites). A plain field, so the
   * dispatch hot path pays one boolean test.
   */
  gated = true;
  /** The load in progress, for INFO's loading_* fields. */
  private current: { load: SnapshotLoad; startedMs: number } | null = null;
  /**
   * The file being read into memory before its load starts (an off-loop read in pieces): INFO's
   * loading_* fields show its size then, as Redis shows them from the start of a load.
   */
  private reading: { startedMs: number; size: number } | null = null;

  constructor(private readonly server: Server) {
    this.lastSaveMs = server.clock.nowMs();
  }

  get file(): string {
    return snapshotPath(this.server.config.get('dir'), this.server.config.get('dbfilename'));
  }

  get bgsaveInProgress(): boolean {
    return this.background !== null;
  }

  get changesSinceLastSave(): number {
    return this.server.keyspace.dirty - this.dirtyAtLastSave;
  }

  /** `save` as (seconds, changes) pairs; empty when automatic saving is off. */
  savePoints(): [number, number][] {
    const parts = this.server.config.get('save').split(' ').filter(Boolean).map(Number);
    const points: [number, number][] = [];
    for (let i = 0; i + 1 < parts.length; i += 2) points.push([parts[i], parts[i + 1]]);
    return points;
  }

  refreshDenyWrites(): void {
    const stopWrites = this.server.config.bool('stop-writes-on-bgsave-error');
    this.denyWritesForJournal = stopWrites && !this.server.journal.lastWriteOk;
    this.denyWrites = (!this.lastBgsaveOk && stopWrites && this.savePoints().length > 0) || this.denyWritesForJournal;
    this.gated = this.loading || this.denyWrites;
  }

  /** Whether the last background save succeeded (INFO rdb_last_bgsave_status, metrics). */
  get lastBgsaveSucceeded(): boolean {
    return this.lastBgsaveOk;
  }

  /**
   * The error a command gets while `gated`, or null: LOADING for every command without the
   * `loading` flag (PING too: INFO and PING are what health checks poll, so both answer), MISCONF
   * for writes after a failed background save.
   */
  refusal(spec: CommandSpec): Refusal | null {
    if (this.loading && !spec.flags.includes('loading') && spec.dispatch?.includes('health-check') !== true) return LOADING_REFUSAL;
    if (this.denyWrites && spec.flags.includes('write')) {
      return this.denyWritesForJournal ? { code: 'MISCONF', message: `MISCONF Errors writing to the AOF file: ${this.server.journal.lastWriteError}` } : MISCONF_REFUSAL;
    }
    return null;
  }

  /**
   * Removes the temp files (writer.ts tempPath: a reserved name no dbfilename can have) left in
   * `dir` by processes that died mid-save (`kill -9`, power loss), when no process with that pid is
   * running. Nothing else is ever removed. Returns the files removed.
   */
  removeStaleTempFiles(): string[] {
    const dir = this.server.config.get('dir');
    const removed: string[] = [];
    for (const name of readdirSync(dir)) {
      const m = TEMP_FILE_PATTERN.exec(name);
      if (m === null || Number(m[1]) === process.pid || processAlive(Number(m[1]))) continue;
      rmSync(join(dir, name), { force: true });
      removed.push(join(dir, name));
    }
    return removed;
  }

  /**
   * Loads the snapshot into the (empty) keyspace, dropping keys that expired meanwhile, in slices of
   * LOAD_SLICE_MS between event-loop turns: the server already listens, and answers INFO (loading:1),
   * PING and the other `loading` commands meanwhile, LOADING to the rest. Resolves null when there is
   * no snapshot file. Rejects with SnapshotError (corrupt, truncated, foreign, wrong version, a number
   * no limiter stores) or the read error, the keyspace then holding part of the file (see
   * discardPartialLoad); the file is only ever read.
   */
  async load(file = this.file, finish = true): Promise<LoadResult | null> {
    const ks = this.server.keyspace;
    const nowMs = this.server.clock.nowMs();
    const started = performance.now();
    try {
      let buf: Buffer;
      try {
        // Off the event loop (the port answers LOADING meanwhile), and only a regular file: a FIFO or
        // a symlink to /dev/zero in its place is refused, never waited on or read without end.
        this.reading = { startedMs: Date.now(), size: regularFileSize(file) };
        buf = await readWholeRegularFile(file, SNAPSHOT_FILE);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw e;
      }
      const load = new SnapshotLoad(buf, file, ks, nowMs, this.server.config.int('key-load-delay'));
      this.current = { load, startedMs: Date.now() };
      for (;;) {
        const sliceEnd = performance.now() + LOAD_SLICE_MS;
        let done = load.step(LOAD_ENTRIES_PER_CHECK);
        while (done === null && performance.now() < sliceEnd) done = load.step(LOAD_ENTRIES_PER_CHECK);
        if (done !== null) {
          this.dirtyAtLastSave = ks.dirty;
          this.lastSaveMs = nowMs;
          this.lastLoad = { file, loaded: done.loaded, expired: done.expired, ms: performance.now() - started, summary: done.summary };
          return this.lastLoad;
        }
        this.server.flushPending();
        await nextTurn();
      }
    } finally {
      this.current = null;
      this.reading = null;
      if (finish) this.endLoading();
    }
  }

  /** The load is over (snapshot, or base and journal): commands are served. */
  endLoading(): void {
    this.loading = false;
    this.refreshDenyWrites();
  }

  /** After a refused load (snapshot-corrupt-policy move-aside): empties the keyspace the load began to fill. */
  discardPartialLoad(): void {
    this.server.keyspace.clear();
    this.dirtyAtLastSave = this.server.keyspace.dirty;
  }


  /** SAVE: a blocking save. Throws on failure (logged; the old snapshot stays). */
  save(): SaveResult {
    const { server } = this;
    const dirtyAtStart = server.keyspace.dirty;
    try {
      const result = writeSnapshotSync(server.keyspace, server.clock.nowMs(), server.config.get('dir'), server.config.get('dbfilename'));
      this.succeeded(result, dirtyAtStart);
      server.log.notice(`DB saved on disk: ${result.keys} keys, ${result.bytes} bytes in ${result.ms.toFixed(1)} ms`, {
        file: result.file, keys: result.keys, bytes: result.bytes, ms: Math.round(result.ms),
      });
      return result;
    } catch (e) {
      this.lastError = describe(e);
      server.log.warning(`Failed saving the DB: ${this.lastError}`, { file: this.file });
      throw e;
    }
  }

  /** BGSAVE: starts a background save. Returns false if one is already running. */
  bgsave(): boolean {
    // One point-in-time view at a time (Keyspace.beginSave): a journal rewrite holds it.
    if (this.background !== null || this.server.journal.rewriteInProgress) return false;
    const { server } = this;
    const dirtyAtStart = server.keyspace.dirty;
    const job = new BackgroundSave(server.keyspace, () => server.clock.nowMs(), server.config.get('dir'), server.config.get('dbfilename'), () => server.flushPending());
    this.background = job;
    this.backgroundScheduled = false;
    this.lastBgsaveTryMs = server.clock.nowMs();
    server.log.notice('Background saving started', { file: this.file });
    job.run().then(
      (result) => {
        if (this.background !== job) return;
        this.background = null;
        this.lastBgsaveOk = true;
        this.lastBgsaveSeconds = Math.round(result.ms / 1000);
        this.succeeded(result, dirtyAtStart);
        server.log.notice(`Background saving terminated with success: ${result.keys} keys, ${result.bytes} bytes in ${result.ms.toFixed(1)} ms`, {
          file: result.file, keys: result.keys, bytes: result.bytes, ms: Math.round(result.ms),
        });
      },
      (e: unknown) => {
        if (this.background !== job) return;
        this.background = null;
        this.lastBgsaveOk = false;
        this.lastError = describe(e);
        this.lastBgsaveSeconds = Math.round((performance.now() - job.startedPerfMs) / 1000);
        this.refreshDenyWrites();
        server.log.warning(`Background saving error: ${this.lastError}`, { file: this.file });
      },
    );
    return true;
  }

  /**
   * The start-up probe found the disk full (ENOSPC, EDQUOT): the server serves, and reports it as a
   * failed save (INFO rdb_last_bgsave_status:err and rdb_last_error, /readyz, MISCONF under
   * stop-writes-on-bgsave-error yes) until a save succeeds, as Redis reports its failing saves.
   */
  startedOnFullDisk(code: string): void {
    this.lastBgsaveOk = false;
    this.lastError = `${code}: the start-up probe of '${this.server.config.get('dir')}' could not write (disk full)`;
    this.lastBgsaveTryMs = this.server.clock.nowMs();
    this.refreshDenyWrites();
  }

  /** BGSAVE SCHEDULE while a save runs: start another once it ends. */
  schedule(): void {
    this.backgroundScheduled = true;
  }

  /** The periodic part (Redis's serverCron): scheduled BGSAVE and the `save` policy. */
  cron(nowMs: number): void {
    // Never save a half-loaded keyspace over the snapshot it comes from.
    if (this.background !== null || this.loading || this.server.journal.rewriteInProgress) return;
    if (this.backgroundScheduled) {
      this.bgsave();
      return;
    }
    const changes = this.changesSinceLastSave;
    if (changes === 0) return;
    for (const [seconds, needed] of this.savePoints()) {
      // As Redis: enough changes, strictly more than `seconds` elapsed, and after a failure wait
      // BGSAVE_RETRY_DELAY_MS between attempts.
      if (changes >= needed && nowMs - this.lastSaveMs > seconds * 1000 && (this.lastBgsaveOk || nowMs - this.lastBgsaveTryMs > BGSAVE_RETRY_DELAY_MS)) {
        this.server.log.notice(`${needed} changes in ${seconds} seconds. Saving...`);
        this.bgsave();
        return;
      }
    }
  }

  /**
   * The snapshot at shutdown. `default` saves when save points are configured (as Redis: `save ""`
   * turns persistence off), `save` always, `nosave` never. A running background save is abandoned
   * first, and its temp file removed once the final save is done (the process exits before the
   * abandoned save's own cleanup would run). Returns false if the save failed.
   */
  saveForShutdown(mode: SaveMode): boolean {
    if (this.loading) {
      // As Redis: a shutdown while loading never saves (the keyspace holds part of the snapshot).
      this.server.log.warning('Shutting down while loading the snapshot: not saving (the snapshot is left as it was)');
      return true;
    }
    let abandoned: string | null = null;
    if (this.background !== null) {
      this.server.log.warning('There is a background save in progress: stopping it to save synchronously');
      this.background.abort();
      abandoned = this.background.tempFile;
      this.background = null;
    }
    let ok = true;
    if (!(mode === 'nosave' || (mode === 'default' && this.savePoints().length === 0))) {
      this.server.log.notice('Saving the final snapshot before exiting.');
      try {
        this.save();
      } catch {
        ok = false;
      }
    }
    if (abandoned !== null) rmSync(abandoned, { force: true });
    return ok;
  }

  private succeeded(result: SaveResult, dirtyAtStart: number): void {
    this.dirtyAtLastSave = dirtyAtStart;
    this.lastSaveMs = this.server.clock.nowMs();
    this.lastSave = result;
    this.lastBgsaveOk = true;
    this.lastError = '';
    this.saves++;
    this.refreshDenyWrites();
  }

  /** INFO persistence, with Redis's field names where Redis has the field. */
  infoRows(): [string, string | number][] {
    const bg = this.background;
    const load = this.current;
    const reading = this.reading;
    const loadingRows: [string, string | number][] = load === null ? (reading === null ? [] : [
      ['loading_start_time', Math.floor(reading.startedMs / 1000)],
      ['loading_total_bytes', reading.size],
      ['loading_loaded_bytes', 0],
      ['loading_loaded_perc', '0.00'],
      ['loading_eta_seconds', etaSeconds(Date.now() - reading.startedMs, 0, reading.size)],
      ['loading_loaded_keys', 0],
    ]) : [
      ['loading_start_time', Math.floor(load.startedMs / 1000)],
      ['loading_total_bytes', load.load.parser.size],
      ['loading_loaded_bytes', load.load.parser.offset],
      ['loading_loaded_perc', ((load.load.parser.offset / load.load.parser.size) * 100).toFixed(2)],
      ['loading_eta_seconds', etaSeconds(Date.now() - load.startedMs, load.load.parser.offset - HEADER_BYTES, load.load.parser.size - load.load.parser.offset)],
      ['loading_loaded_keys', load.load.loaded],
    ];
    return [
      ['loading', this.loading ? 1 : 0],
      ['async_loading', 0],
      ...loadingRows,
      ['rdb_changes_since_last_save', this.changesSinceLastSave],
      ['rdb_bgsave_in_progress', bg !== null ? 1 : 0],
      ['rdb_last_save_time', Math.floor(this.lastSaveMs / 1000)],
      ['rdb_last_bgsave_status', this.lastBgsaveOk ? 'ok' : 'err'],
      ['rdb_last_bgsave_time_sec', this.lastBgsaveSeconds],
      ['rdb_current_bgsave_time_sec', bg !== null ? Math.round((performance.now() - bg.startedPerfMs) / 1000) : -1],
      ['rdb_saves', this.saves],
      ['rdb_last_save_keys', this.lastSave?.keys ?? 0],
      ['rdb_last_save_bytes', this.lastSave?.bytes ?? 0],
      ['rdb_last_save_duration_ms', this.lastSave !== null ? Math.round(this.lastSave.ms) : -1],
      ['rdb_last_error', this.lastError],
      ['rdb_last_load_keys_expired', this.lastLoad?.expired ?? 0],
      ['rdb_last_load_keys_loaded', this.lastLoad?.loaded ?? 0],
      ['rdb_last_load_duration_ms', this.lastLoad !== null ? Math.round(this.lastLoad.ms) : 0],
      ...this.server.journal.infoRows(),
    ];
  }
}

/** Seconds left at the rate so far, as Redis's loading_eta_seconds (1 until there is a rate). */
/** The size of `file` if it is a regular file (a stat, which never opens nor waits on it), else 0. */
function regularFileSize(file: string): number {
  try {
    const st = statSync(file);
    return st.isFile() ? st.size : 0;
  } catch {
    return 0;
  }
}

function etaSeconds(elapsedMs: number, doneBytes: number, leftBytes: number): number {
  return doneBytes > 0 ? Math.ceil((elapsedMs * leftBytes) / doneBytes / 1000) : 1;
}

function describe(e: unknown): string {
  const err = e as NodeJS.ErrnoException;
  const message = String(err.message ?? e);
  return err.code !== undefined && !message.startsWith(err.code) ? `${err.code}: ${message}` : message;
}
