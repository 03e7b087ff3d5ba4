/**
 * The degraded modes: the server still answers, but not the way it would with everything working.
 * One place lists them, reading the parts' own status, and every view shows the same list: INFO
 * (`degraded:<mode>,<mode>`), the metrics (`cellgate_degraded{mode}`, 1 or 0 for each mode), `/readyz`
 * (its body names them, ready or not: a mode that keeps readiness, say the backend answered by a
 * `local` policy, is still visible), and the log (one line when a mode is entered, one when it is
 * left, checked by the periodic task).
 *
 * - backend_unavailable: the shared backend is down; calls are answered by `backend-unavailable`.
 * - rls_no_config: the rate limit service has no configuration (only possible with rls-force-start
 *   serving, or while the first load runs).
 * - journal_not_writing: `appendonly yes` and the journal cannot be written (or lost records that a
 *   rewrite has not repaired yet): decisions answered now would not survive a crash.
 * - snapshot_failing: the last background save failed.
 */
import type { Server } from './server.js';

export const DEGRADED_MODES = ['backend_unavailable', 'rls_no_config', 'journal_not_writing', 'snapshot_failing'] as const;
export type DegradedMode = (typeof DEGRADED_MODES)[number];

/** A part above the server (the rate limit service) that reports a mode: its detail, or null. */
export type DegradedSource = () => [DegradedMode, string] | null;

export class DegradedModes {
  /** The modes in force when the log last said so. */
  private logged = new Map<DegradedMode, string>();
  private readonly sources: DegradedSource[] = [];

  constructor(private readonly server: Server) {}

  /** Adds a mode reported by a part above the server (main.ts). */
  addSource(source: DegradedSource): void {
    this.sources.push(source);
  }

  /** The modes in force now, each with what it is, in DEGRADED_MODES order. */
  current(): Map<DegradedMode, string> {
    const found = new Map<DegradedMode, string>();
    const s = this.server;
    const b = s.backend;
    if (b !== null && !b.usable) found.set('backend_unavailable', `backend ${b.state}: calls are answered by backend-unavailable ${b.policy}`);
    const journal = s.journal.notReadyReason();
    if (journal !== null) found.set('journal_not_writing', journal);
    if (!s.snapshots.lastBgsaveSucceeded) found.set('snapshot_failing', 'the last background save failed (INFO persistence rdb_last_bgsave_status:err)');
    for (const source of this.sources) {
      const r = source();
      if (r !== null) found.set(r[0], r[1]);
    }
    const ordered = new Map<DegradedMode, string>();
    for (const m of DEGRADED_MODES) {
      const detail = found.get(m);
      if (detail !== undefined) ordered.set(m, detail);
    }
    return ordered;
  }

  /** The modes in force now, comma-separated ('' for none): INFO's `degraded` field, /readyz. */
  list(): string {
    return [...this.current().keys()].join(',');
  }

  /** Logs each mode entered (warning, with what it is) and left (notice) since the last check. */
  check(): void {
    const now = this.current();
    const log = this.server.log;
    for (const [mode, detail] of now) {
      if (!this.logged.has(mode)) log.warning(`degraded mode entered: ${mode}: ${detail}`, { degraded: mode, detail });
    }
    for (const mode of this.logged.keys()) {
      if (!now.has(mode)) log.notice(`degraded mode left: ${mode}`, { degraded: mode });
    }
    this.logged = now;
  }
}
