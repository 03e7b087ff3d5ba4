/**
 * `cellgate/express-rate-limit`: a store for express-rate-limit, so that its users keep their
 * middleware and options and change one line, as with rate-limit-redis:
 *
 *   import { rateLimit } from 'express-rate-limit';
 *   import { CellgateStore } from 'cellgate/express-rate-limit';
 *   app.use(rateLimit({ windowMs: 60_000, limit: 100, store: new CellgateStore({ client: 'redis://127.0.0.1:6379' }) }));
 *
 * express-rate-limit's semantics are a fixed window of `windowMs` that counts every hit (the refused
 * ones too) and compares the count with `limit` itself, which may be a function of the request. So
 * the store counts with `RL.FIXEDWINDOW` under a limit no count reaches (2^52 / windowMs, cellgate's
 * largest), and never asks cellgate to refuse: `increment` returns the window's hits and the time the
 * window ends, `decrement` gives one back (`REFUND 1`, never below 0), `resetKey` is `DEL`, `get` a
 * peek (`COST 0`). cellgate's windows are aligned to multiples of `windowMs` since the Unix epoch (as
 * envoyproxy/ratelimit's), where express-rate-limit's memory store starts a client's window at its
 * first hit: a client can spend `limit` at the end of one window and again at the start of the next.
 *
 * A call that fails (cellgate unavailable, a timeout) rejects with cellgate's error, and
 * express-rate-limit decides: `passOnStoreError: true` lets the request through, the default answers
 * it with the error (500). Guide: docs/middleware.md ("express-rate-limit").
 */
import type { CellgateClient, Connection, Decision } from '../client/index.js';
import { CellgateArgumentError } from '../client/errors.js';
import { shareClient, type SharedClient } from './core.js';
import { describe } from './policies.js';

/** What express-rate-limit's `increment` and `get` return (its `ClientRateLimitInfo`). */
export interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

export interface CellgateStoreOptions {
  /** A `CellgateClient`, an ioredis / node-redis connection, or a URL (`redis://127.0.0.1:6379`) for a connection of the store's own. */
  client: CellgateClient | Connection | string;
  /** Prefix of the cellgate keys (default `rl:`, as rate-limit-redis): one per limiter, so that two limiters never count the same key. */
  prefix?: string;
  /** Milliseconds a call may take (default 50), the connection included while it is being opened. */
  timeoutMs?: number;
}

/** The largest number RL.FIXEDWINDOW's limit × period may reach (cellgate refuses beyond). */
const MAX_PRODUCT = 2 ** 52;
/** express-rate-limit's default window, for a store used before its init(). */
const DEFAULT_WINDOW_MS = 60_000;

export class CellgateStore {
  /** Read by express-rate-limit's double-count check: keys of stores with other prefixes are other counts. */
  readonly prefix: string;
  /** The counts live in cellgate, shared by every process that uses the same prefix. */
  readonly localKeys = false;
  /** The window (express-rate-limit's `windowMs`, from init()). */
  windowMs = DEFAULT_WINDOW_MS;
  private counterLimit = Math.floor(MAX_PRODUCT / DEFAULT_WINDOW_MS);
  private readonly timeoutMs: number;
  private readonly connection: SharedClient;

  constructor(options: CellgateStoreOptions) {
    if (options === null || typeof options !== 'object') throw new CellgateArgumentError('options', 'new CellgateStore() needs an options object ({ client })');
    for (const name of Object.keys(options)) {
      if (name !== 'client' && name !== 'prefix' && name !== 'timeoutMs') throw new CellgateArgumentError(name, `unknown option '${name}' (the options: client, prefix, timeoutMs)`);
    }
    const prefix = options.prefix ?? 'rl:';
    if (typeof prefix !== 'string') throw new CellgateArgumentError('prefix', `prefix must be a string, not ${describe(prefix)}`);
    this.prefix = prefix;
    this.timeoutMs = options.timeoutMs ?? 50;
    if (!Number.isSafeInteger(this.timeoutMs) || this.timeoutMs < 1) throw new CellgateArgumentError('timeoutMs', `timeoutMs must be an integer >= 1, not ${describe(options.timeoutMs)}`);
    this.connection = shareClient(options.client);
  }

  /** Called by express-rate-limit with its options: the window is theirs. */
  init(options: { windowMs: number }): void {
    const windowMs = options.windowMs;
    if (!Number.isSafeInteger(windowMs) || windowMs < 1 || windowMs > MAX_PRODUCT) throw new CellgateArgumentError('windowMs', `windowMs must be an integer from 1 to 2^52, not ${describe(windowMs)}`);
    this.windowMs = windowMs;
    this.counterLimit = Math.floor(MAX_PRODUCT / windowMs);
  }

  /** Counts a hit: the window's hits so far, this one included, and when the window ends. */
  async increment(key: string): Promise<ClientRateLimitInfo & { resetTime: Date }> {
    const c = await this.connection.client;
    const d = await c.fixedWindow(this.prefix + key, this.counterLimit, this.windowMs, { timeoutMs: this.timeoutMs });
    return this.info(d);
  }

  /** Gives one hit back (skipFailedRequests / skipSuccessfulRequests); a count never goes below 0. */
  async decrement(key: string): Promise<void> {
    const c = await this.connection.client;
    await c.reward(this.prefix + key, 1, { algorithm: 'fixedwindow', limit: this.counterLimit, periodMs: this.windowMs, timeoutMs: this.timeoutMs });
  }

  /** Forgets a key: its next hit starts a count of 1. */
  async resetKey(key: string): Promise<void> {
    const c = await this.connection.client;
    await c.reset(this.prefix + key, { timeoutMs: this.timeoutMs });
  }

  /** The window's hits and end for a key, or undefined when it has none (nothing is spent). */
  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const c = await this.connection.client;
    const d = await c.get('fixedwindow', this.prefix + key, this.counterLimit, this.windowMs, { timeoutMs: this.timeoutMs });
    return d.remaining >= d.limit ? undefined : this.info(d);
  }

  /** Closes the connection the store opened from a URL (one passed in stays the application's). */
  async shutdown(): Promise<void> {
    if (!this.connection.owned) return;
    const c = await this.connection.client.catch(() => undefined);
    await c?.close();
  }

  private info(d: Decision): ClientRateLimitInfo & { resetTime: Date } {
    return { totalHits: d.limit - d.remaining, resetTime: new Date(Date.now() + d.resetAfterMs) };
  }
}

export default CellgateStore;
