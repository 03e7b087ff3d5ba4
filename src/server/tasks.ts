/**
 * The one way the server runs code from a timer or a deferred callback (the periodic task, active
 * expiry steps, the end-of-turn reply flush, drain retries, the close of refused sockets). A callback
 * that throws is logged and counted (INFO `periodic_task_errors`) and the process goes on: an
 * exception in a timer is otherwise uncaught and ends the process, as `process.memoryUsage()` failing
 * with EMFILE (it opens /proc/self/stat) did under a connection flood, without a final snapshot.
 */
import type { Logger } from '../log.js';

/** At most one log line per task name per this many ms: a task that fails every tick must not flood the log. */
const LOG_EVERY_MS = 1000;

export class Tasks {
  /** Callbacks that threw, since start (INFO stats periodic_task_errors). */
  errors = 0;
  private readonly lastLogMs = new Map<string, number>();
  private readonly suppressed = new Map<string, number>();

  constructor(private readonly log: Logger) {}

  /** `task`, wrapped so that an exception it throws is logged, counted and survived. Wrap once, call often. */
  guard(name: string, task: () => void): () => void {
    return () => {
      try {
        task();
      } catch (e) {
        this.failed(name, e);
      }
    };
  }

  /** Runs `task` every `ms`. */
  every(name: string, ms: number, task: () => void): NodeJS.Timeout {
    return setInterval(this.guard(name, task), ms);
  }

  /** Runs `task` once after `ms`; the timer does not keep the process alive. */
  after(name: string, ms: number, task: () => void): NodeJS.Timeout {
    const timer = setTimeout(this.guard(name, task), ms);
    timer.unref();
    return timer;
  }

  /** Runs `task` after this turn's I/O (setImmediate). */
  soon(name: string, task: () => void): void {
    setImmediate(this.guard(name, task));
  }

  /** Logs and counts an exception thrown by `name`. */
  failed(name: string, e: unknown): void {
    this.errors++;
    const reason = errorText(e);
    this.warnLimited(name, `${name} failed (the server goes on): ${reason}`, { task: name, error: reason });
  }

  /**
   * A warning, at most one per `name` per second (the others are counted and the count is told in
   * the next line): for failures that can repeat at the rate of a flood (accept errors, a task
   * failing every tick).
   */
  warnLimited(name: string, message: string, fields: Record<string, unknown> = {}): void {
    const now = Date.now();
    const last = this.lastLogMs.get(name) ?? -Infinity;
    if (now - last < LOG_EVERY_MS) {
      this.suppressed.set(name, (this.suppressed.get(name) ?? 0) + 1);
      return;
    }
    const skipped = this.suppressed.get(name) ?? 0;
    this.suppressed.delete(name);
    this.lastLogMs.set(name, now);
    this.log.warning(skipped > 0 ? `${message} (and ${skipped} more not logged)` : message, fields);
  }
}

export function errorText(e: unknown): string {
  const err = e as NodeJS.ErrnoException | null;
  if (err === null || typeof err !== 'object') return String(e);
  return err.code !== undefined ? `${err.code}: ${err.message}` : String(err.message ?? e);
}
