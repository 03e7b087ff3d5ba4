/**
 * The middleware's concurrency limit (`concurrency: { limit, leaseMs, waitMs?, key? }`): at most
 * `limit` requests of one key in flight at once, across every replica that shares the cellgate (or
 * its backend). A request takes a lease when it starts (`RL.ACQUIRE`), renews it every `leaseMs / 2`
 * while its response is open (so a streaming response outlives any one lease), and gives it back
 * when the response finishes, errors or its connection closes. A process that dies holding leases
 * frees their slots when they end, `leaseMs` later at most: `leaseMs` is the longest a dead holder
 * keeps a slot, not a bound on a request's duration.
 *
 * A full key is refused at once (429 with `Retry-After`), or with `waitMs` the request waits that
 * long for a slot (`RL.ACQUIRE ... WAIT`, first come first served on the server). The first try is
 * always without WAIT: the common case costs one short call, and `stats.concurrency.waits` counts
 * the requests that really waited.
 *
 * With `onUnavailable: 'insurance'` the leases are counted in this process while cellgate is away
 * (each replica then allows `limit` alone), at most `insurance.maxKeys` keys.
 */
import { CellgateArgumentError, type CellgateClient } from '../client/index.js';
import type { RequestLike } from './keys.js';
import { describe } from './policies.js';

export interface ConcurrencyOptions<Req = RequestLike> {
  /** Requests of one key in flight at once (an integer >= 1). */
  limit: number;
  /** Milliseconds a lease lives without renewal: how long a crashed replica's requests keep their slots. */
  leaseMs: number;
  /** Wait up to this many ms for a slot instead of answering 429 at once (default: no wait). */
  waitMs?: number;
  /** The key slots are counted under (default: the rate limit's key, the user or client IP). */
  key?: (req: Req) => string | Promise<string>;
}

/** `req.rateLimit.concurrency` while a request holds a lease. */
export interface ConcurrencyInfo {
  limit: number;
  /** Slots left when this request took its own. */
  remaining: number;
  /** The lease's id (`RL.RELEASE key id`). */
  id: string;
}

/** The concurrency limit's counters (`stats.concurrency`). */
export interface ConcurrencyStats {
  /** Leases this process holds now (requests in flight under the limit). */
  inUse: number;
  /** Requests waiting for a slot now. */
  waiting: number;
  /** Leases granted, and refused (429 after any wait). */
  acquired: number;
  limited: number;
  /** Requests that found every slot taken and waited (`waitMs`), and of those the ones whose wait ran out. */
  waits: number;
  waitTimeouts: number;
  /** Renewals sent, failed (cellgate unavailable: retried at the next tick), and leases found ended at a renewal. */
  renewals: number;
  renewErrors: number;
  lost: number;
  /** Releases that failed (the lease then ends on its own). */
  releaseErrors: number;
}

export function newConcurrencyStats(): ConcurrencyStats {
  return { inUse: 0, waiting: 0, acquired: 0, limited: 0, waits: 0, waitTimeouts: 0, renewals: 0, renewErrors: 0, lost: 0, releaseErrors: 0 };
}

/** What `hold` needs of a node:http response. */
export interface HeldResponse {
  writableFinished: boolean;
  destroyed?: boolean;
  once(event: 'finish' | 'close', listener: () => void): unknown;
}

export type Admission =
  | { limited: false; limit: number; remaining: number; id: string; hold: (res: HeldResponse) => void }
  | { limited: true; limit: number; retryAfterMs: number };

const KNOWN = new Set(['limit', 'leaseMs', 'waitMs', 'key']);

/** The option, checked: every mistake is an error at setup, none at a request. */
export function checkConcurrency<Req>(c: unknown): ConcurrencyOptions<Req> {
  if (c === null || typeof c !== 'object') throw new CellgateArgumentError('concurrency', `concurrency must be an object ({ limit, leaseMs, waitMs?, key? }), not ${describe(c)}`);
  for (const name of Object.keys(c)) if (!KNOWN.has(name)) throw new CellgateArgumentError('concurrency', `unknown concurrency option '${name}' (the options: ${[...KNOWN].join(', ')})`);
  const o = c as ConcurrencyOptions<Req>;
  const int = (name: string, v: unknown, min: number): void => {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) throw new CellgateArgumentError('concurrency', `concurrency.${name} must be an integer >= ${min}, not ${describe(v)}`);
  };
  int('limit', o.limit, 1);
  int('leaseMs', o.leaseMs, 2);
  if (o.waitMs !== undefined) int('waitMs', o.waitMs, 1);
  if (o.key !== undefined && typeof o.key !== 'function') throw new CellgateArgumentError('concurrency', 'concurrency.key must be a function');
  return o;
}

/**
 * Requests of one middleware waiting for a slot at once, at most: each holds a connection of its
 * own (a blocking call holds up its connection), so past this a request is refused at once.
 */
export const MAX_WAITING = 64;
/** Connections kept open for the next waits, at most. */
const IDLE_WAIT_CONNECTIONS = 4;

export class ConcurrencyGate {
  /** Insurance leases by key (onUnavailable: 'insurance'), oldest key first. */
  private readonly local = new Map<string, number>();
  /** Connections for waiting acquires, not in use. */
  private readonly idle: CellgateClient[] = [];

  constructor(
    private readonly options: ConcurrencyOptions<never>,
    private readonly client: Promise<CellgateClient>,
    private readonly timeoutMs: number,
    readonly stats: ConcurrencyStats,
    private readonly maxKeys: number,
  ) {}

  /**
   * Takes a slot of `key` on cellgate (waiting up to waitMs when they are all taken). Rejects with
   * the client's error when cellgate is unavailable or refuses the call.
   */
  async admit(key: string): Promise<Admission> {
    const { limit, leaseMs, waitMs } = this.options;
    const c = await this.client;
    let lease = await c.acquire(key, limit, leaseMs, { timeoutMs: this.timeoutMs });
    if (lease.limited && waitMs !== undefined && this.stats.waiting < MAX_WAITING) {
      // A connection of its own: the WAIT blocks it (as BLPOP does) and must not hold up the others.
      const w = this.idle.pop() ?? c.duplicate();
      if (w === undefined) throw new CellgateArgumentError('concurrency', 'concurrency.waitMs needs a connection that can be duplicated (ioredis, node-redis)');
      this.stats.waits++;
      this.stats.waiting++;
      let ok = false;
      try {
        lease = await w.acquire(key, limit, leaseMs, { waitMs, timeoutMs: this.timeoutMs });
        ok = true;
      } finally {
        this.stats.waiting--;
        // A connection whose call failed may still have it pending: not reused.
        if (ok && this.idle.length < IDLE_WAIT_CONNECTIONS) this.idle.push(w);
        else void w.close();
      }
      if (lease.limited) this.stats.waitTimeouts++;
    }
    if (lease.limited || lease.id === null) {
      this.stats.limited++;
      return { limited: true, limit: lease.limit, retryAfterMs: lease.retryAfterMs };
    }
    const id = lease.id;
    this.stats.acquired++;
    return { limited: false, limit: lease.limit, remaining: lease.remaining, id, hold: (res) => this.hold(res, key, id) };
  }

  /** A slot counted in this process while cellgate is unavailable. */
  insure(key: string): Admission {
    const { limit } = this.options;
    const held = this.local.get(key) ?? 0;
    if (held >= limit) {
      this.stats.limited++;
      return { limited: true, limit, retryAfterMs: 1000 };
    }
    // Bounded: a new key past maxKeys pushes out the oldest, whose requests then stop being counted.
    if (held === 0 && this.local.size >= this.maxKeys) this.local.delete(this.local.keys().next().value!);
    this.local.set(key, held + 1);
    this.stats.acquired++;
    return {
      limited: false, limit, remaining: limit - held - 1, id: '',
      hold: (res) => this.whenDone(res, () => {
        const n = this.local.get(key);
        if (n === undefined) return;
        if (n <= 1) this.local.delete(key);
        else this.local.set(key, n - 1);
      }, undefined),
    };
  }

  /** Renews the lease every leaseMs / 2 while `res` is open; releases it once it is done. */
  private hold(res: HeldResponse, key: string, id: string): void {
    const { leaseMs } = this.options;
    let renewing = false;
    let timer: NodeJS.Timeout | undefined = setInterval(() => {
      if (renewing) return; // the last renewal has not answered: one at a time
      renewing = true;
      this.stats.renewals++;
      this.client.then((c) => c.renew(key, id, leaseMs, { timeoutMs: this.timeoutMs })).then(
        (live) => {
          renewing = false;
          if (live || timer === undefined) return;
          // Ended (expired while cellgate was unreachable, or deleted): the slot is no longer ours.
          this.stats.lost++;
          clearInterval(timer);
          timer = undefined;
        },
        () => {
          renewing = false;
          this.stats.renewErrors++;
        },
      );
    }, Math.floor(leaseMs / 2));
    timer.unref();
    this.whenDone(res, () => {
      this.client.then((c) => c.release(key, id, { timeoutMs: this.timeoutMs })).catch(() => { this.stats.releaseErrors++; });
    }, () => {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
    });
  }

  /** Runs `stop` then `release` once, at the response's finish or close (or now, if it is already over). */
  private whenDone(res: HeldResponse, release: () => void, stop: (() => void) | undefined): void {
    this.stats.inUse++;
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      this.stats.inUse--;
      stop?.();
      release();
    };
    res.once('finish', finish);
    res.once('close', finish);
    // A client that left while the request waited for its slot: the events have passed.
    if (res.writableFinished || res.destroyed === true) finish();
  }

  /** Closes the connections kept for waits. */
  async close(): Promise<void> {
    await Promise.all(this.idle.splice(0).map((w) => w.close()));
  }

  /** Forgets the insurance leases once cellgate answers again (it holds the real count). */
  clearInsurance(): void {
    this.local.clear();
  }
}
