/**
 * `cellgate/client`: a typed client for cellgate over a connection the application already has
 * (ioredis or node-redis) or one it creates from a URL. Every limiter reply comes back as named
 * fields, whatever the protocol (RESP2 arrays, RESP3 maps) and whatever the library made of them
 * (ioredis 6's RESP3 "legacy" mapping flattens a map into `[name, value, ...]`, node-redis turns it
 * into an object, other mappings into a `Map`). This room imports nothing from the server: it is a
 * package surface of its own. Command reference: docs/commands.md.
 */
import {
  CellgateArgumentError,
  CellgateError,
  CellgateReplyError,
  CellgateTimeoutError,
  CellgateUnavailableError,
  toCellgateError,
} from './errors.js';
import { checkId, leaseFrom, type Lease } from './leases.js';

export type { Lease } from './leases.js';

export {
  CellgateArgumentError,
  CellgateError,
  CellgateReplyError,
  CellgateTimeoutError,
  CellgateUnavailableError,
};

/** One limiter's answer. Times are milliseconds; `retryAfterMs` is −1 when allowed, and −1 when limited with a cost that can never fit. */
export interface Decision {
  limited: boolean;
  limit: number;
  remaining: number;
  retryAfterMs: number;
  resetAfterMs: number;
  delayMs: number;
}

/** `RL.ALL`'s answer: the overall flag and one decision per limit, in the order asked. */
export interface AllDecision {
  limited: boolean;
  results: Decision[];
}

export type Algorithm = 'tokenbucket' | 'leakybucket' | 'fixedwindow' | 'slidinglog' | 'slidingwindow' | 'gcra';

export const ALGORITHMS: readonly Algorithm[] = ['tokenbucket', 'leakybucket', 'fixedwindow', 'slidinglog', 'slidingwindow', 'gcra'];

/** The algorithms that take a `burst` (a capacity apart from `limit`). */
export const BURST_ALGORITHMS: readonly Algorithm[] = ['tokenbucket', 'leakybucket', 'gcra'];

/** Options of every `RL.*` call. */
export interface RlOptions {
  /** Capacity (token bucket, leaky bucket, GCRA only); default `limit`. */
  burst?: number;
  /** Units this request spends (default 1; 0 peeks). */
  cost?: number;
  /** Overrides the client's timeout for this call. */
  timeoutMs?: number;
}

export interface CallOptions {
  timeoutMs?: number;
}

/** Options of `acquire()`. */
export interface AcquireOptions {
  /** The lease's id (1 to 64 bytes); acquiring with the id of a live lease renews it. Default: the server makes one. */
  id?: string;
  /** When every slot is taken, wait up to this many ms for one to free (`WAIT`); default: answer at once. */
  waitMs?: number;
  /** Overrides the client's timeout for this call (a `waitMs` is added to it). */
  timeoutMs?: number;
}

/** The limit a `reward()` or `penalty()` applies to: the same parameters the key is spent with. */
export interface LimitParams {
  algorithm: Algorithm;
  limit: number;
  periodMs: number;
  /** Capacity (token bucket, leaky bucket, GCRA only); default `limit`. */
  burst?: number;
  /** Overrides the client's timeout for this call (`penalty()`: for each of its calls). */
  timeoutMs?: number;
}

/** One limit of an `all()` call. */
export interface LimitSpec {
  key: string;
  algorithm: Algorithm;
  limit: number;
  periodMs: number;
  burst?: number;
}

/** What the client needs of an ioredis connection. */
export interface IoredisLike {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
}

/** What the client needs of a node-redis (v4/v5) connection. */
export interface NodeRedisLike {
  sendCommand(args: string[]): Promise<unknown>;
}

export type Connection = IoredisLike | NodeRedisLike;

/** A connection the client created and closes (`connect()`, `open()`), and what it knows of its failures. */
export interface OwnedConnection {
  quit(): Promise<unknown> | void;
  /** The message of the connection's last failed attempt, while it is not connected. */
  lastConnectError?(): string | undefined;
}

export interface ClientOptions {
  /** Milliseconds a call may take before it rejects with `CellgateTimeoutError` (default 1000). */
  timeoutMs?: number;
}

const DEFAULT_TIMEOUT_MS = 1000;
const FIELDS = ['limited', 'limit', 'remaining', 'retry_after_ms', 'reset_after_ms', 'delay_ms'] as const;
const RL_COMMAND: Record<Algorithm, string> = {
  tokenbucket: 'RL.TOKENBUCKET',
  leakybucket: 'RL.LEAKYBUCKET',
  fixedwindow: 'RL.FIXEDWINDOW',
  slidinglog: 'RL.SLIDINGLOG',
  slidingwindow: 'RL.SLIDINGWINDOW',
  gcra: 'RL.GCRA',
};
const HAS_BURST: ReadonlySet<Algorithm> = new Set<Algorithm>(BURST_ALGORITHMS);
/** BURST_ALGORITHMS as the errors list them: `a, b and c`. */
const BURST_LIST = `${BURST_ALGORITHMS.slice(0, -1).join(', ')} and ${BURST_ALGORITHMS[BURST_ALGORITHMS.length - 1]}`;

export class CellgateClient {
  readonly timeoutMs: number;
  private readonly send: (args: string[]) => Promise<unknown>;
  private readonly owned: OwnedConnection | undefined;
  private readonly connection: Connection;
  /** The connection's events, when it has them (ioredis, node-redis): ready() waits for its 'ready'. */
  private readonly events: EventSourceLike | undefined;
  /**
   * Settles when a connection that was still being opened is first ready, or first fails: until then
   * a call waits for it (within its timeout) instead of failing on a stream that is not writeable yet.
   * Null once settled, so a call on a running connection checks one field.
   */
  private opening: Promise<void> | null;

  /**
   * Wraps an existing ioredis or node-redis connection. The connection's own retry settings decide
   * what happens while cellgate is down: ioredis queues commands and retries them 20 times by
   * default, so create it with `enableOfflineQueue: false, maxRetriesPerRequest: 0` for calls that
   * fail fast (the client's timeout bounds the wait either way). To let the client create and own a
   * connection with those settings, use `connect(url)`.
   */
  constructor(connection: Connection, options: ClientOptions = {}, owned?: OwnedConnection) {
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    checkInt('timeoutMs', this.timeoutMs, 1);
    this.owned = owned;
    this.connection = connection;
    if (typeof (connection as NodeRedisLike).sendCommand === 'function' && typeof (connection as IoredisLike).call !== 'function') {
      const c = connection as NodeRedisLike;
      this.send = (args) => c.sendCommand(args);
    } else if (typeof (connection as IoredisLike).call === 'function') {
      const c = connection as IoredisLike;
      this.send = (args) => c.call(args[0], ...args.slice(1));
    } else {
      throw new CellgateArgumentError('connection', 'connection must be an ioredis or node-redis client');
    }
    this.events = typeof (connection as EventSourceLike).once === 'function' ? connection as EventSourceLike : undefined;
    this.opening = stillOpening(connection as EventSourceLike);
    this.opening?.then(() => { this.opening = null; });
  }

  /**
   * Resolves once cellgate answers on this connection (a `PING`), for up to `timeoutMs` (default
   * 1000: opening a connection takes longer than a call): a connection still being opened is waited
   * for, and one that failed (cellgate not listening yet, restarting) is tried again as it reconnects,
   * so an application started beside a cellgate that is still starting waits for it instead of
   * failing at its first refused connection. Rejects after `timeoutMs` with `CellgateTimeoutError`
   * (nothing answered in time) or `CellgateUnavailableError` (the last attempt's reason); a reply
   * error (a wrong password...) rejects at once.
   */
  async ready(timeoutMs = DEFAULT_TIMEOUT_MS): Promise<void> {
    checkInt('timeoutMs', timeoutMs, 1);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const left = deadline - Date.now();
      let failure: CellgateUnavailableError;
      try {
        await this.call(['PING'], Math.max(1, left));
        return;
      } catch (err) {
        // An ACL user without PING is still answered: the server is up.
        if (err instanceof CellgateReplyError && err.code === 'NOPERM') return;
        if (err instanceof CellgateTimeoutError) throw new CellgateTimeoutError('PING', timeoutMs);
        if (!(err instanceof CellgateUnavailableError)) throw err;
        failure = err;
      }
      if (Date.now() >= deadline) {
        throw new CellgateUnavailableError(`${failure.message} (waited ${timeoutMs} ms for cellgate to answer)`, { cause: failure });
      }
      await this.reconnected(deadline);
    }
  }

  /**
   * Settles at the connection's next 'ready', after at most 100 ms (the library may reconnect
   * without an event this client sees), or at `deadline`, whichever comes first.
   */
  private reconnected(deadline: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const events = this.events;
      const done = (): void => {
        clearTimeout(timer);
        events?.off?.('ready', done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(1, Math.min(100, deadline - Date.now())));
      events?.once?.('ready', done);
    });
  }

  /** `CL.THROTTLE key max_burst count_per_period period [quantity]` (redis-cell; period in seconds). */
  async throttle(key: string, maxBurst: number, countPerPeriod: number, periodSeconds: number, quantity = 1, options: CallOptions = {}): Promise<Decision> {
    checkKey(key);
    checkInt('max_burst', maxBurst, 0);
    checkInt('count_per_period', countPerPeriod, 1);
    checkInt('period', periodSeconds, 1);
    checkInt('quantity', quantity, 0);
    const reply = await this.call(['CL.THROTTLE', key, String(maxBurst), String(countPerPeriod), String(periodSeconds), String(quantity)], options.timeoutMs);
    return fromSeconds(reply, 'CL.THROTTLE');
  }

  /** `GCRA key max_burst tokens_per_period period [TOKENS count]` (Redis's command; period in seconds, may be fractional). */
  async gcra(key: string, maxBurst: number, tokensPerPeriod: number, periodSeconds: number, tokens = 1, options: CallOptions = {}): Promise<Decision> {
    checkKey(key);
    checkInt('max_burst', maxBurst, 0);
    checkInt('tokens_per_period', tokensPerPeriod, 1);
    if (!Number.isFinite(periodSeconds) || periodSeconds <= 0) throw new CellgateArgumentError('period', `invalid period '${periodSeconds}': must be a number > 0`);
    checkInt('TOKENS', tokens, 1);
    const reply = await this.call(['GCRA', key, String(maxBurst), String(tokensPerPeriod), String(periodSeconds), 'TOKENS', String(tokens)], options.timeoutMs);
    return fromSeconds(reply, 'GCRA');
  }

  /** Any `RL.*` algorithm by name. */
  async rl(algorithm: Algorithm, key: string, limit: number, periodMs: number, options: RlOptions = {}): Promise<Decision> {
    const args = [commandOf(algorithm), key];
    pushLimit(args, { key, algorithm, limit, periodMs, burst: options.burst });
    if (options.cost !== undefined) {
      checkInt('COST', options.cost, 0);
      args.push('COST', String(options.cost));
    }
    return fromRl(await this.call(args, options.timeoutMs), args[0]);
  }

  tokenBucket(key: string, limit: number, periodMs: number, options?: RlOptions): Promise<Decision> {
    return this.rl('tokenbucket', key, limit, periodMs, options);
  }
  leakyBucket(key: string, limit: number, periodMs: number, options?: RlOptions): Promise<Decision> {
    return this.rl('leakybucket', key, limit, periodMs, options);
  }
  fixedWindow(key: string, limit: number, periodMs: number, options?: RlOptions): Promise<Decision> {
    return this.rl('fixedwindow', key, limit, periodMs, options);
  }
  slidingLog(key: string, limit: number, periodMs: number, options?: RlOptions): Promise<Decision> {
    return this.rl('slidinglog', key, limit, periodMs, options);
  }
  slidingWindow(key: string, limit: number, periodMs: number, options?: RlOptions): Promise<Decision> {
    return this.rl('slidingwindow', key, limit, periodMs, options);
  }
  /** `RL.GCRA`: GCRA with millisecond fields (`gcra()` is Redis's own `GCRA` command). */
  gcraMs(key: string, limit: number, periodMs: number, options?: RlOptions): Promise<Decision> {
    return this.rl('gcra', key, limit, periodMs, options);
  }

  /** `RL.ALL`: every limit checked together, spent on all only when every one allows. */
  async all(limits: readonly LimitSpec[], options: { cost?: number; timeoutMs?: number } = {}): Promise<AllDecision> {
    if (!Array.isArray(limits as unknown) || limits.length === 0) throw new CellgateArgumentError('numlimits', 'all() needs at least one limit');
    const args = ['RL.ALL', String(limits.length)];
    for (const l of limits) {
      commandOf(l.algorithm);
      args.push(l.key, l.algorithm.toUpperCase());
      pushLimit(args, l);
    }
    if (options.cost !== undefined) {
      checkInt('COST', options.cost, 0);
      args.push('COST', String(options.cost));
    }
    const reply = await this.call(args, options.timeoutMs);
    if (!Array.isArray(reply) || reply.length !== limits.length + 1) throw unexpected('RL.ALL', reply);
    return { limited: toInt(reply[0], 'RL.ALL') === 1, results: reply.slice(1).map((r) => fromRl(r, 'RL.ALL')) };
  }

  /**
   * The state of a key without spending (`COST 0`): allowed, with what `remaining` and `resetAfterMs`
   * the key holds now. Never creates or changes the key.
   */
  get(algorithm: Algorithm, key: string, limit: number, periodMs: number, options: Omit<RlOptions, 'cost'> = {}): Promise<Decision> {
    return this.rl(algorithm, key, limit, periodMs, { ...options, cost: 0 });
  }

  /**
   * Gives `units` spent units back (`RL.<ALGO> ... REFUND units`, docs/algorithms.md "Refunds"): a
   * token bucket gets tokens back up to its burst, a window's current count goes down (never below
   * 0), a sliding log drops its newest units, a GCRA or leaky bucket key moves back by `units`
   * emission intervals (never before now). A key never becomes fuller than fresh, and an absent key
   * stays absent. Resolves to the state after the refund (allowed, as a `get()` would show it).
   */
  async reward(key: string, units: number, params: LimitParams): Promise<Decision> {
    const args = [commandOf(params.algorithm), key];
    pushLimit(args, { key, algorithm: params.algorithm, limit: params.limit, periodMs: params.periodMs, burst: params.burst });
    checkInt('REFUND', units, 1);
    args.push('REFUND', String(units));
    return fromRl(await this.call(args, params.timeoutMs), args[0]);
  }

  /**
   * Spends `units` as a penalty, even when that takes the key to its limit (`COST units`). When fewer
   * than `units` are left, it spends what is left instead (a second call with `COST remaining`), so
   * the key ends at its limit: a key is never spent beyond its capacity, and a key already at its
   * limit is left as it is. Between the two calls another client may spend, so the second can be
   * refused too; the decision returned is the last call's (`limited` false when units were spent).
   */
  async penalty(key: string, units: number, params: LimitParams): Promise<Decision> {
    checkInt('COST', units, 1);
    const options = { burst: params.burst, timeoutMs: params.timeoutMs };
    const first = await this.rl(params.algorithm, key, params.limit, params.periodMs, { ...options, cost: units });
    if (!first.limited || first.remaining <= 0) return first;
    return this.rl(params.algorithm, key, params.limit, params.periodMs, { ...options, cost: first.remaining });
  }

  /** Forgets a key (`DEL`): its next call starts from a fresh state. Resolves to whether it existed. */
  async reset(key: string, options: CallOptions = {}): Promise<boolean> {
    checkKey(key);
    return toInt(await this.call(['DEL', key], options.timeoutMs), 'DEL') === 1;
  }

  /**
   * Blocks a key for `ms` milliseconds (`RL.BLOCK`): every limiter call on it is refused meanwhile,
   * whatever its algorithm or parameters (`retryAfterMs` and `resetAfterMs` the block's time left),
   * and it starts fresh afterwards: what it held before the block is gone. rate-limiter-flexible's
   * `block(key, secDuration)`, in milliseconds. A second block replaces the first; `reset()` lifts it.
   */
  async block(key: string, ms: number, options: CallOptions = {}): Promise<void> {
    checkKey(key);
    checkInt('ms', ms, 1);
    const reply = await this.call(['RL.BLOCK', key, String(ms)], options.timeoutMs);
    if (String(reply) !== 'OK') throw unexpected('RL.BLOCK', reply);
  }

  /**
   * `RL.ACQUIRE key limit lease_ms [ID id] [WAIT ms]`: takes one of `limit` slots for `leaseMs` ms,
   * or, with `waitMs`, waits for one that long (first come, first served). Granted: `limited` false
   * and `id` the lease to `release()` or `renew()`; refused: `id` null and `retryAfterMs` until the
   * earliest lease ends. A lease nobody renews ends on its own (a crashed holder frees its slot).
   */
  async acquire(key: string, limit: number, leaseMs: number, options: AcquireOptions = {}): Promise<Lease> {
    checkKey(key);
    checkInt('limit', limit, 1);
    checkInt('lease_ms', leaseMs, 1);
    const args = ['RL.ACQUIRE', key, String(limit), String(leaseMs)];
    if (options.id !== undefined) {
      if (typeof options.id !== 'string' || options.id.length === 0) throw new CellgateArgumentError('ID', `invalid ID '${String(options.id)}': must be a non-empty string`);
      args.push('ID', options.id);
    }
    let timeoutMs = options.timeoutMs ?? this.timeoutMs;
    if (options.waitMs !== undefined) {
      checkInt('WAIT', options.waitMs, 1);
      args.push('WAIT', String(options.waitMs));
      timeoutMs += options.waitMs;
    }
    return leaseFrom(await this.call(args, timeoutMs));
  }

  /** `RL.RELEASE key id`: frees the lease's slot. Resolves true if it was live, false if unknown or already ended. */
  async release(key: string, id: string, options: CallOptions = {}): Promise<boolean> {
    checkKey(key);
    checkId(id);
    return toInt(await this.call(['RL.RELEASE', key, id], options.timeoutMs), 'RL.RELEASE') === 1;
  }

  /**
   * `RL.RENEW key id lease_ms`: the lease now ends `leaseMs` from now. Resolves false when it had
   * already ended (or was released): the caller no longer holds a slot.
   */
  async renew(key: string, id: string, leaseMs: number, options: CallOptions = {}): Promise<boolean> {
    checkKey(key);
    checkId(id);
    checkInt('lease_ms', leaseMs, 1);
    return toInt(await this.call(['RL.RENEW', key, id, String(leaseMs)], options.timeoutMs), 'RL.RENEW') === 1;
  }

  /**
   * A client on a new connection like this one's (`duplicate()`), owned and closed by it: a blocking
   * `acquire` with `waitMs` holds up its connection, as BLPOP does. Undefined when not duplicable.
   */
  duplicate(): CellgateClient | undefined {
    const c = this.connection as Connection & { duplicate?: () => unknown };
    if (typeof c.duplicate !== 'function') return undefined;
    const copy = c.duplicate() as Connection & { connect?: () => Promise<unknown>; isOpen?: boolean; on?: (e: string, f: () => void) => unknown; quit?: () => Promise<unknown>; disconnect?: () => void };
    copy.on?.('error', () => {});
    // node-redis opens a duplicate on request; ioredis opens it at once.
    if (copy.isOpen === false && typeof copy.connect === 'function') copy.connect().catch(() => {});
    return new CellgateClient(copy, { timeoutMs: this.timeoutMs }, { quit: () => (typeof copy.disconnect === 'function' ? copy.disconnect() : copy.quit?.()) });
  }

  /** Closes the connection if this client created it (`connect(url)`); a wrapped one stays the application's. */
  async close(): Promise<void> {
    if (this.owned) await this.owned.quit();
  }

  /** Sends one command, bounded by the timeout; every failure becomes a `CellgateError`. */
  private call(args: string[], timeoutMs = this.timeoutMs): Promise<unknown> {
    return new Promise((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => { settled = true; reject(new CellgateTimeoutError(args[0], timeoutMs)); }, timeoutMs);
      const opening = this.opening;
      if (opening === null) this.sendNow(args, timer, resolve, reject);
      else opening.then(() => { if (!settled) this.sendNow(args, timer, resolve, reject); });
    });
  }

  private sendNow(args: string[], timer: NodeJS.Timeout, resolve: (v: unknown) => void, reject: (e: unknown) => void): void {
    let pending: Promise<unknown>;
    try {
      pending = this.send(args);
    } catch (err) {
      clearTimeout(timer);
      reject(toCellgateError(err, this.owned?.lastConnectError?.()));
      return;
    }
    pending.then(
      (reply) => { clearTimeout(timer); resolve(reply); },
      (err: unknown) => { clearTimeout(timer); reject(toCellgateError(err, this.owned?.lastConnectError?.())); },
    );
  }
}

/** The events and state fields ioredis and node-redis connections share enough of. */
interface EventSourceLike {
  /** ioredis: 'wait' | 'connecting' | 'connect' | 'ready' | 'reconnecting' | 'close' | 'end'. */
  status?: unknown;
  /** node-redis. */
  isReady?: unknown;
  isOpen?: unknown;
  once?: (event: string, listener: (...args: unknown[]) => void) => unknown;
  off?: (event: string, listener: (...args: unknown[]) => void) => unknown;
}

/**
 * For a connection that is being opened right now (ioredis 'connecting'/'connect', node-redis open
 * but not ready), a promise that settles at its first 'ready' or first 'error'/'end'; otherwise null.
 * A failure settles it too: later calls then fail at once on the closed stream, as they should
 * while cellgate is down, instead of each waiting for its timeout.
 */
function stillOpening(c: EventSourceLike): Promise<void> | null {
  if (typeof c.once !== 'function') return null;
  const opening = typeof c.status === 'string'
    ? c.status === 'connecting' || c.status === 'connect'
    : c.isOpen === true && c.isReady === false;
  if (!opening) return null;
  return new Promise<void>((resolve) => {
    const events = ['ready', 'error', 'end', 'close'];
    const done = (): void => {
      for (const e of events) c.off?.(e, done);
      resolve();
    };
    for (const e of events) c.once!(e, done);
  });
}

export interface ConnectOptions extends ClientOptions {
  /** Milliseconds to wait for a TCP connection (default 1000). */
  connectTimeoutMs?: number;
}

/**
 * `connect()` without the wait: the connection is being opened when this resolves, and the client's
 * first calls wait for it (each within its timeout). The HTTP middleware opens its connection so,
 * when it is created.
 */
export async function open(url: string, options: ConnectOptions = {}): Promise<CellgateClient> {
  let mod: { Redis?: unknown; default?: unknown };
  try {
    mod = (await import('ioredis')) as { Redis?: unknown; default?: unknown };
  } catch (err) {
    throw new CellgateError('cellgate/client connect() needs the ioredis package (npm install ioredis), or pass your own connection to new CellgateClient()', { cause: err });
  }
  const Redis = (mod.Redis ?? mod.default) as new (url: string, opts: object) => IoredisLike & { on(e: string, f: (err?: Error) => void): void; quit(): Promise<unknown>; disconnect(): void };
  const redis = new Redis(url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    connectTimeout: options.connectTimeoutMs ?? 1000,
    retryStrategy: (times: number) => Math.min(times * 100, 1000),
  });
  // Without a listener ioredis prints every failed reconnection attempt; calls report the outage,
  // with the last attempt's reason.
  let lastConnectError: string | undefined;
  redis.on('error', (err) => { lastConnectError = err?.message; });
  redis.on('ready', () => { lastConnectError = undefined; });
  return new CellgateClient(redis, options, { quit: () => redis.disconnect(), lastConnectError: () => lastConnectError });
}

/**
 * Creates a client with a connection of its own (ioredis, which must be installed), set up to fail
 * fast while cellgate is unreachable: no offline queue, no per-command retries, reconnection in the
 * background (at most one attempt a second), and connection errors kept out of the log (a failed
 * call says what happened). `url` as ioredis takes it: `redis://[:password@]host:port`.
 *
 * Resolves once cellgate answers on the new connection; rejects (and closes it) when it does not
 * within `connectTimeoutMs` (default 1000; a cellgate still starting is waited for, as `ready()`
 * does), so the first call after `await connect(url)` is sent on a ready connection.
 */
export async function connect(url: string, options: ConnectOptions = {}): Promise<CellgateClient> {
  const client = await open(url, options);
  try {
    await client.ready(options.connectTimeoutMs ?? DEFAULT_TIMEOUT_MS);
  } catch (err) {
    await client.close();
    throw err;
  }
  return client;
}

function checkKey(key: unknown): void {
  if (typeof key !== 'string' || key.length === 0) throw new CellgateArgumentError('key', `invalid key '${String(key)}': must be a non-empty string`);
}

function checkInt(name: string, value: unknown, min: number): void {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) throw new CellgateArgumentError(name, `invalid ${name} '${String(value)}': not an integer`);
  if (value < min) throw new CellgateArgumentError(name, `invalid ${name} '${value}': must be >= ${min}`);
}

function pushLimit(args: string[], l: LimitSpec): void {
  checkKey(l.key);
  checkInt('limit', l.limit, 1);
  checkInt('period_ms', l.periodMs, 1);
  args.push(String(l.limit), String(l.periodMs));
  if (l.burst !== undefined) {
    if (!HAS_BURST.has(l.algorithm)) throw new CellgateArgumentError('BURST', `BURST applies to ${BURST_LIST} only, not ${l.algorithm}`);
    checkInt('BURST', l.burst, 1);
    args.push('BURST', String(l.burst));
  }
}

function commandOf(algorithm: Algorithm): string {
  if (Object.hasOwn(RL_COMMAND, algorithm)) return RL_COMMAND[algorithm];
  throw new CellgateArgumentError('algorithm', `invalid algorithm '${String(algorithm)}': expected one of ${ALGORITHMS.join(', ')}`);
}

function unexpected(command: string, reply: unknown): CellgateError {
  return new CellgateError(`unexpected ${command} reply: ${JSON.stringify(reply, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v instanceof Map ? Object.fromEntries(v) : v))}`);
}

function toInt(v: unknown, command: string): number {
  const n = typeof v === 'number' ? v : typeof v === 'bigint' || typeof v === 'string' ? Number(v) : NaN;
  if (!Number.isFinite(n)) throw unexpected(command, v);
  return n;
}

/**
 * The six `RL.*` fields from any shape a library gives: an array of six integers (RESP2), a flat
 * `[name, value, ...]` array (ioredis RESP3 legacy mapping), a `Map`, or a plain object.
 */
function rlFields(reply: unknown, command: string): number[] {
  if (Array.isArray(reply)) {
    if (reply.length === 6 && reply.every((v) => typeof v !== 'string' || /^-?\d+$/.test(v))) return reply.map((v) => toInt(v, command));
    if (reply.length === 12) {
      const byName = new Map<string, unknown>();
      for (let i = 0; i < 12; i += 2) byName.set(String(reply[i]), reply[i + 1]);
      return FIELDS.map((f) => toInt(byName.get(f), command));
    }
    throw unexpected(command, reply);
  }
  if (reply instanceof Map) return FIELDS.map((f) => toInt(reply.get(f), command));
  if (reply !== null && typeof reply === 'object') return FIELDS.map((f) => toInt((reply as Record<string, unknown>)[f], command));
  throw unexpected(command, reply);
}

function fromRl(reply: unknown, command: string): Decision {
  const [limited, limit, remaining, retryAfterMs, resetAfterMs, delayMs] = rlFields(reply, command);
  return { limited: limited === 1, limit, remaining, retryAfterMs, resetAfterMs, delayMs };
}

/** CL.THROTTLE and GCRA answer in whole seconds; the named fields are milliseconds for every command. */
function fromSeconds(reply: unknown, command: string): Decision {
  if (!Array.isArray(reply) || reply.length !== 5) throw unexpected(command, reply);
  const [limited, limit, remaining, retryAfter, resetAfter] = reply.map((v) => toInt(v, command));
  return {
    limited: limited === 1,
    limit,
    remaining,
    retryAfterMs: retryAfter < 0 ? -1 : retryAfter * 1000,
    resetAfterMs: resetAfter * 1000,
    delayMs: 0,
  };
}
