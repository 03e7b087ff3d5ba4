/**
 * The descriptor budget behind `maxclients`, as Redis's adjustOpenFilesLimit: every client holds a
 * file descriptor, and the process needs some of its own (listeners, the snapshot file, the log,
 * Node's event loop). A `maxclients` larger than the descriptor limit allows lets a flood of idle
 * connections use them all, and then anything that opens a file fails with EMFILE.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Redis's CONFIG_MIN_RESERVED_FDS: descriptors kept back for persistence, listeners, logs. */
export const MIN_RESERVED_FDS = 32;

/**
 * The soft RLIMIT_NOFILE of this process, or null where it cannot be read. Node has no getrlimit
 * binding (and raises the soft limit to the hard one itself at start), so on Linux it is read from
 * /proc/self/limits ("Max open files  <soft>  <hard>  files"); elsewhere the cap is not applied.
 */
export function openFilesLimit(): number | null {
  let text: string;
  try {
    text = readFileSync('/proc/self/limits', 'latin1');
  } catch {
    return null;
  }
  const m = /^Max open files\s+(\d+|unlimited)\s/m.exec(text);
  if (m === null || m[1] === 'unlimited') return null;
  return Number(m[1]);
}

/** Descriptors this process holds now (Node's own: stdio, epoll, its thread pool's pipes, listeners), or 0 if unknown. */
export function openDescriptors(): number {
  try {
    return readdirSync('/proc/self/fd').length;
  } catch {
    return 0;
  }
}

/**
 * The budget, measured once at start: the limit, and the descriptors reserved (Redis's 32 plus
 * those the process already held then, plus `extra` for other servers' connections, e.g. metrics).
 */
export class DescriptorBudget {
  constructor(
    /** The soft limit, or null when unknown (no cap). */
    readonly limit: number | null,
    readonly reserved: number,
  ) {}

  static measure(extra: number): DescriptorBudget {
    return new DescriptorBudget(openFilesLimit(), MIN_RESERVED_FDS + openDescriptors() + extra);
  }

  /** The most clients the limit allows (at least 1), or `requested` when it fits or the limit is unknown. */
  maxClients(requested: number): number {
    if (this.limit === null || requested + this.reserved <= this.limit) return requested;
    return Math.max(1, this.limit - this.reserved);
  }
}
