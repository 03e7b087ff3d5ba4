/**
 * The journal rewrite's bookkeeping: whether one is scheduled and from when it may start, how the
 * last ones ended (INFO aof_last_bgrewrite_status, aof_rewrites, aof_rewrites_consecutive_failures,
 * aof_last_rewrite_time_sec), and when the automatic ones are due or held back after failures.
 */
import type { Logger } from '../log.js';

/** A rewrite that must happen (no loadable set yet, or records the journal lacks) is retried by the cron after this long. */
export const REWRITE_RETRY_MS = 5000;
/** Automatic rewrites failed in a row before the next ones are held back (autoLimited), and the longest wait. */
const AUTO_REWRITE_FAILURES = 3;
const AUTO_REWRITE_MAX_DELAY_MINUTES = 60;

export class RewriteBook {
  /** A rewrite waits to start (INFO aof_rewrite_scheduled): after a BGSAVE, or a retry after a failure. */
  scheduled = false;
  /** Not before this time (server clock, ms). */
  retryAtMs = 0;
  lastOk = true;
  /** Seconds the last rewrite took, or -1. */
  lastSec = -1;
  /** Rewrites that succeeded. */
  count = 0;
  /** Rewrites failed in a row; a success resets it. */
  failuresInRow = 0;
  /** Automatic rewrites held back after repeated failures (Redis's aofRewriteLimited): the delay and its end, server clock. */
  private autoLimitMinutes = 0;
  private autoLimitUntilMs = 0;

  /** Starts as soon as no BGSAVE runs (BGREWRITEAOF during one; appendonly turned on during one). */
  schedule(): void {
    this.scheduled = true;
    this.retryAtMs = 0;
  }

  /** Whether a scheduled rewrite may start now. */
  due(nowMs: number): boolean {
    return this.scheduled && nowMs >= this.retryAtMs;
  }

  /** A rewrite ended in failure after `sec` seconds; `retry`: it must happen, the cron tries again after REWRITE_RETRY_MS. */
  failed(sec: number, retry: boolean, nowMs: number): void {
    this.lastOk = false;
    this.failuresInRow++;
    if (sec >= 0) this.lastSec = sec;
    if (retry) {
      this.scheduled = true;
      this.retryAtMs = nowMs + REWRITE_RETRY_MS;
    }
  }

  succeeded(sec: number): void {
    this.lastOk = true;
    this.failuresInRow = 0;
    this.lastSec = sec;
    this.count++;
  }

  /**
   * Whether automatic rewrites are held back: after AUTO_REWRITE_FAILURES failures in a row (a full
   * disk fails each one after writing as much of a base as fits, and the growth that triggers them
   * stays), the next waits a minute, then 2, 4, ... up to an hour of server time, as Redis's
   * aofRewriteLimited. BGREWRITEAOF is never held back; a success ends it.
   */
  autoLimited(nowMs: number, log: Logger): boolean {
    if (this.failuresInRow < AUTO_REWRITE_FAILURES) {
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
    log.warning(`Background AOF rewrite has repeatedly failed and triggered the limit, will retry in ${this.autoLimitMinutes} minutes`);
    return true;
  }
}
