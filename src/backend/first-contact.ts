/**
 * Limiter calls made before the sidecar first reached its backend (docs/backend.md, "At start").
 *
 * A sidecar that has just started has no connection yet, through no fault of the backend: a
 * Cluster client discovers the slot map and then connects to each master, which on a busy machine
 * takes a while. Answering those calls by the `backend-unavailable` policy would let each fresh
 * sidecar spend the whole limit on its own (`local`), or every call (`allow`), right after every
 * deploy. So until the first contact a call waits for it, as a call sent to the backend waits for
 * its reply: within `backend-timeout`, then the policy answers. Only once the backend was reached
 * and then lost do calls get the policy at once (RedisBackend's `down`).
 *
 * What waits is bounded: at most MAX_WAITING calls (the rest get the policy at once, counted as
 * overflows), each for at most backend-timeout from its arrival; a unit (a transaction's calls, a
 * rate limit service request's limits) waits as one entry and is released or answered whole.
 */
import type { BackendHost } from './redis-backend.js';

/** The most calls held for the first contact (as many as one node may have pending). */
export const MAX_WAITING = 2048;

interface Waiting<T> {
  items: T[];
  deadlineMs: number;
}

export class FirstContactWait<T> {
  /** Calls that waited for the first contact (INFO backend_first_contact_waits). */
  waited = 0;
  /** Of those, the calls whose backend-timeout passed first (answered by the policy). */
  expired = 0;
  private entries: Waiting<T>[] = [];
  private held = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly host: BackendHost,
    private readonly timeoutMs: () => number,
    /** Answers what waited too long (by the policy). */
    private readonly expire: (items: T[]) => void,
  ) {}

  /** Calls held now. */
  get size(): number {
    return this.held;
  }

  /** Holds `items` (one call, or a unit's calls) until release() or their deadline; false when full. */
  hold(items: T[]): boolean {
    if (this.held + items.length > MAX_WAITING) return false;
    this.entries.push({ items, deadlineMs: Date.now() + this.timeoutMs() });
    this.held += items.length;
    this.waited += items.length;
    if (this.timer === null) this.arm();
    return true;
  }

  /** Everything held, in arrival order (the first contact was made): the caller sends it. */
  release(): T[][] {
    const out = this.entries.map((e) => e.items);
    this.entries = [];
    this.held = 0;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    return out;
  }

  /** One timer for the oldest entry: every entry waits the same time, so deadlines come in order. */
  private arm(): void {
    if (this.entries.length === 0) {
      this.timer = null;
      return;
    }
    const wait = Math.max(0, this.entries[0].deadlineMs - Date.now());
    this.timer = this.host.after('backend first contact', wait, () => this.onTimer());
  }

  private onTimer(): void {
    const now = Date.now();
    let n = 0;
    while (n < this.entries.length && this.entries[n].deadlineMs <= now) n++;
    const due = this.entries.splice(0, n);
    for (const e of due) {
      this.held -= e.items.length;
      this.expired += e.items.length;
    }
    this.arm();
    for (const e of due) this.expire(e.items);
  }
}
