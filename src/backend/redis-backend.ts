/**
 * The connection to the shared backend (docs/backend.md): a Redis or a Redis Cluster that holds the
 * limiter state of several cellgate sidecars. The client is ioredis (its Cluster support follows
 * MOVED/ASK and refreshes the slot map on failover; concurrent calls are pipelined on each
 * connection); this module adds what a rate limiter needs on top:
 *
 * - a bounded wait: every call is answered within `backend-timeout`, by the backend or, past it, by
 *   the `backend-unavailable` policy (the caller decides what that means);
 * - a state (`connecting` → `up` ↔ `down`), one log line per change: down when the connection is
 *   lost or three calls in a row time out; while down, calls are answered by the policy at once and a
 *   PING probe runs every PROBE_INTERVAL_MS; the first success brings it up;
 * - invalidations: DEL/UNLINK/FLUSHDB through any sidecar are published on `<prefix>__invalidate`
 *   and every sidecar's refusal cache drops those keys.
 */
import { Cluster, Command, Redis, type RedisOptions } from 'ioredis';
import type { Logger } from '../log.js';
import type { BackendTarget } from './backend-url.js';
import { RefusalCache } from './refusal-cache.js';

export type BackendState = 'connecting' | 'up' | 'down';
export type UnavailablePolicy = 'local' | 'allow' | 'deny';

/** What the backend needs from the server: a guarded timer and the log. */
export interface BackendHost {
  log: Logger;
  /** Runs `task` once after `ms` (exceptions logged, never fatal); the timer does not keep the process alive. */
  after(name: string, ms: number, task: () => void): NodeJS.Timeout;
}

/** How a call ended when it did not get a reply it can use. */
export const TIMED_OUT = 'timed out';

/**
 * A call's outcome: (null, reply) for a reply, (error, undefined) otherwise. `error` is the backend's
 * ReplyError (its message is the reply text), or an Error for a lost connection, or TIMED_OUT.
 */
export type CallDone = (error: Error | typeof TIMED_OUT | null, reply: unknown) => void;

/** Consecutive timeouts that mark the backend down. */
const TIMEOUTS_FOR_DOWN = 3;
/** While down, a PING probe this often (ms). */
export const PROBE_INTERVAL_MS = 250;
/** How long after the start `connecting` turns into `down` if the backend is not up. */
const CONNECT_GRACE_MS = 1000;
/** Reconnect backoff: 50 ms doubling up to 2 s. */
const MAX_RECONNECT_DELAY_MS = 2000;

interface InFlight {
  deadlineMs: number;
  done: CallDone;
  settled: boolean;
}

type Client = Redis | Cluster;
interface LimiterClient {
  cellgateLimit(numKeys: number, ...args: (Buffer | string)[]): Promise<unknown>;
  cellgateType(numKeys: number, ...args: (Buffer | string)[]): Promise<unknown>;
}

export class RedisBackend {
  state: BackendState = 'connecting';
  timeoutMs: number;
  policy: UnavailablePolicy;
  readonly cache = new RefusalCache();
  readonly channel: string;
  /** The prefix as bytes, put before every client key. */
  readonly prefixBytes: Buffer;
  // Counters (INFO backend, metrics).
  calls = 0;
  errors = 0;
  timeouts = 0;
  policyDecisions = 0;
  stateChanges = 0;
  invalidationsReceived = 0;
  lastError = '';

  private readonly client: Client;
  private readonly subscriber: Client;
  private readonly inFlight: InFlight[] = [];
  private inFlightHead = 0;
  private timer: NodeJS.Timeout | null = null;
  private consecutiveTimeouts = 0;
  private probing = false;
  /** The connections' writes are held until the end of this turn (cork). */
  private corked = false;
  private closed = false;

  constructor(
    readonly target: BackendTarget,
    readonly prefix: string,
    timeoutMs: number,
    policy: UnavailablePolicy,
    limiterScript: string,
    typeScript: string,
    private readonly host: BackendHost,
  ) {
    this.timeoutMs = timeoutMs;
    this.policy = policy;
    this.channel = `${prefix}__invalidate`;
    this.prefixBytes = Buffer.from(prefix);
    this.client = this.connect();
    this.client.defineCommand('cellgateLimit', { lua: limiterScript });
    this.client.defineCommand('cellgateType', { lua: typeScript });
    this.client.on('ready', () => this.setState('up', 'connected'));
    this.client.on('close', () => this.connectionLost('connection closed'));
    this.client.on('error', (e: Error) => this.noteError(e.message));
    // A Cluster client opens and closes connections while it discovers the nodes: not being up a
    // while after the start is what counts as down (the policy answers meanwhile either way).
    host.after('backend connect', CONNECT_GRACE_MS, () => {
      if (this.state === 'connecting') this.setState('down', this.lastError !== '' ? this.lastError : `not connected after ${CONNECT_GRACE_MS} ms`);
    });
    this.subscriber = this.connect();
    this.subscriber.on('ready', () => this.subscribe());
    this.subscriber.on('close', () => {
      // Invalidations could be missed from now on: forget what was cached and cache nothing until
      // the subscription is back.
      this.cache.enabled = false;
      this.cache.clear();
    });
    this.subscriber.on('error', () => {
      /* the main connection logs; this one only follows */
    });
    this.subscriber.on('messageBuffer', (channel: Buffer, message: Buffer) => this.onInvalidation(channel, message));
  }

  private connect(): Client {
    const t = this.target;
    const common: RedisOptions = {
      username: t.username,
      password: t.password,
      // Calls never wait for a connection: while there is none they fail at once and get the
      // policy's answer (a rate limiter must answer within its timeout, not queue).
      enableOfflineQueue: false,
      // Concurrent calls are pipelined on the connection either way (ioredis writes each command at
      // once without waiting for earlier replies, and Node coalesces writes queued behind a busy
      // socket). Its auto-pipelining mode also groups a turn's commands into one pipeline object,
      // which measured 1-3 µs more sidecar CPU per call here and no less Redis CPU
      // (bench/RESULTS.md, "Shared backend"): off.
      enableAutoPipelining: false,
      maxRetriesPerRequest: 0,
      connectTimeout: Math.max(1000, this.timeoutMs * 10),
      lazyConnect: false,
      tls: t.tls ? {} : undefined,
      retryStrategy: (times: number) => Math.min(MAX_RECONNECT_DELAY_MS, 50 * 2 ** Math.min(times, 6)),
    };
    if (t.mode === 'cluster') {
      return new Cluster(t.nodes, {
        enableOfflineQueue: false,
        enableAutoPipelining: false,
        clusterRetryStrategy: (times: number) => Math.min(MAX_RECONNECT_DELAY_MS, 50 * 2 ** Math.min(times, 6)),
        // Follow a failover quickly: the slot map is refreshed on MOVED and on errors.
        retryDelayOnFailover: 20,
        retryDelayOnClusterDown: 50,
        retryDelayOnTryAgain: 20,
        slotsRefreshTimeout: Math.max(1000, this.timeoutMs * 10),
        redisOptions: { ...common, retryStrategy: undefined } as RedisOptions,
      });
    }
    return new Redis({ ...common, host: t.nodes[0].host, port: t.nodes[0].port, db: t.db });
  }

  /** Runs the limiter script with these keys (already prefixed) and ARGV; `done` is called exactly once. */
  limit(keys: Buffer[], argv: readonly (Buffer | string)[], done: CallDone): void {
    this.calls++;
    if (!this.corked) this.cork();
    this.track((this.client as unknown as LimiterClient).cellgateLimit(keys.length, ...keys, ...argv), done);
  }

  /** TYPE of one backend key, through the type script (cellgate's algorithm names). */
  type(key: Buffer, argv: string[], done: CallDone): void {
    this.track((this.client as unknown as LimiterClient).cellgateType(1, key, ...argv), done);
  }

  /** Any other command (DEL, PTTL, SCAN, ...) on the connection, with the same bounded wait. */
  command(name: string, args: (Buffer | string | number)[], done: CallDone): void {
    this.track(send(this.client, name, args), done);
  }

  /** The Cluster's masters (SCAN, DBSIZE and FLUSHDB visit each), or the one server. */
  masters(): Redis[] {
    return this.client instanceof Cluster ? this.client.nodes('master') : [this.client];
  }

  /** Runs a command on one node (a master from masters()), with the bounded wait. */
  onNode(node: Redis, name: string, args: (Buffer | string | number)[], done: CallDone): void {
    this.track(send(node, name, args), done);
  }

  /** Tells every sidecar (this one included) that these client keys were reset; an empty list means all. */
  publishInvalidation(keys: Buffer[]): void {
    const message = keys.length === 0 ? Buffer.from('*') : Buffer.concat(keys.flatMap((k) => [lengthPrefix(k.length), k]));
    this.client.publish(this.channel, message).catch((e: Error) => this.noteError(`publish: ${e.message}`));
  }

  private onInvalidation(channel: Buffer, message: Buffer): void {
    if (channel.toString('latin1') !== this.channel) return;
    this.invalidationsReceived++;
    if (message.length === 1 && message[0] === 0x2a) {
      this.cache.clear();
      return;
    }
    // [4-byte length][key bytes]...
    let i = 0;
    while (i + 4 <= message.length) {
      const n = message.readUInt32BE(i);
      i += 4;
      if (i + n > message.length) break;
      this.cache.invalidateKey(message.toString('latin1', i, i + n));
      i += n;
    }
  }

  private subscribe(): void {
    this.subscriber.subscribe(this.channel).then(
      () => {
        this.cache.clear();
        this.cache.enabled = true;
      },
      (e: Error) => this.noteError(`subscribe: ${e.message}`),
    );
  }

  /** Attaches `done` to a call with the bounded wait. */
  private track(call: Promise<unknown>, done: CallDone): void {
    const entry: InFlight = { deadlineMs: Date.now() + this.timeoutMs, done, settled: false };
    this.inFlight.push(entry);
    if (this.timer === null) this.armTimer();
    call.then(
      (reply) => {
        if (entry.settled) return;
        entry.settled = true;
        this.consecutiveTimeouts = 0;
        if (this.state !== 'up' && this.client.status === 'ready') this.setState('up', 'a call succeeded');
        done(null, reply);
      },
      (e: Error) => {
        if (entry.settled) return;
        entry.settled = true;
        if (!isDecision(e)) {
          this.errors++;
          this.noteError(e.message);
        }
        done(e, undefined);
      },
    );
  }

  /**
   * Holds the connections' writes until the end of this event-loop turn, so the calls of every
   * client served in the turn leave in one write per connection (one syscall for a whole pipeline,
   * not one per call; measured in bench/RESULTS.md "Shared backend").
   */
  private cork(): void {
    this.corked = true;
    const streams: { cork(): void; uncork(): void }[] = [];
    for (const node of this.masters()) {
      const stream = (node as unknown as { stream?: { cork(): void; uncork(): void; writable?: boolean } }).stream;
      if (stream !== undefined && stream.writable !== false) {
        stream.cork();
        streams.push(stream);
      }
    }
    setImmediate(this.uncork, streams);
  }

  private readonly uncork = (streams: { uncork(): void }[]): void => {
    this.corked = false;
    for (const s of streams) s.uncork();
  };

  /** One timer for the oldest call: every call has the same timeout, so deadlines come in order. */
  private armTimer(): void {
    while (this.inFlightHead < this.inFlight.length && this.inFlight[this.inFlightHead].settled) this.inFlightHead++;
    if (this.inFlightHead === this.inFlight.length) {
      this.inFlight.length = 0;
      this.inFlightHead = 0;
      this.timer = null;
      return;
    }
    const wait = Math.max(0, this.inFlight[this.inFlightHead].deadlineMs - Date.now());
    this.timer = this.host.after('backend timeouts', wait, () => this.expire());
  }

  private expire(): void {
    const now = Date.now();
    while (this.inFlightHead < this.inFlight.length) {
      const entry = this.inFlight[this.inFlightHead];
      if (!entry.settled) {
        if (entry.deadlineMs > now) break;
        entry.settled = true;
        this.timeouts++;
        this.consecutiveTimeouts++;
        // One Redis that stops answering is down for every key. In a Cluster one master failing takes
        // only its slots: the other masters' keys stay decided on the backend, and the failing
        // master's calls get the policy one by one until its replica takes over.
        if (this.consecutiveTimeouts >= TIMEOUTS_FOR_DOWN && this.state === 'up' && this.target.mode === 'standalone') {
          this.setState('down', `${TIMEOUTS_FOR_DOWN} calls in a row took longer than backend-timeout ${this.timeoutMs} ms`);
        }
        entry.done(TIMED_OUT, undefined);
      }
      this.inFlightHead++;
    }
    if (this.inFlightHead > 1024 && this.inFlightHead * 2 > this.inFlight.length) {
      this.inFlight.splice(0, this.inFlightHead);
      this.inFlightHead = 0;
    }
    this.armTimer();
  }

  private connectionLost(reason: string): void {
    if (this.closed || this.state === 'connecting') return;
    this.setState('down', reason);
  }

  private noteError(message: string): void {
    this.lastError = message;
  }

  private setState(state: BackendState, reason: string): void {
    if (this.closed || state === this.state) return;
    const from = this.state;
    this.state = state;
    this.stateChanges++;
    if (state === 'up') {
      this.consecutiveTimeouts = 0;
      this.host.log.notice(`backend up (${this.target.display}): ${reason}`, { backend: this.target.display, from });
    } else {
      this.host.log.warning(`backend down: ${reason}; answering by backend-unavailable ${this.policy}`, { backend: this.target.display, reason });
      this.probe();
    }
  }

  /** While down: PING every PROBE_INTERVAL_MS until one answers in time. */
  private probe(): void {
    if (this.probing || this.closed) return;
    this.probing = true;
    this.host.after('backend probe', PROBE_INTERVAL_MS, () => {
      this.probing = false;
      if (this.state === 'up' || this.closed) return;
      if (this.client.status !== 'ready') {
        this.probe(); // ioredis is reconnecting; 'ready' brings it up
        return;
      }
      this.track(this.client.ping(), (error) => {
        if (error === null) this.setState('up', 'PING answered');
        else this.probe();
      });
    });
  }

  /** One backend command as a promise (keyspace commands that take several steps); rejects on timeout too. */
  ask(name: string, args: (Buffer | string | number)[], node?: Redis): Promise<unknown> {
    return this.promised((done) => (node === undefined ? this.command(name, args, done) : this.onNode(node, name, args, done)));
  }

  /** TYPE through the type script, as a promise. */
  askType(key: Buffer, argv: string[]): Promise<unknown> {
    return this.promised((done) => this.type(key, argv, done));
  }

  private promised(start: (done: CallDone) => void): Promise<unknown> {
    return new Promise((resolve, reject) => {
      start((error, reply) => {
        if (error === null) resolve(reply);
        else reject(error === TIMED_OUT ? new Error(`no reply within backend-timeout ${this.timeoutMs} ms`) : error);
      });
    });
  }

  /** Whether the calls go to the backend now (else the policy answers at once). */
  get usable(): boolean {
    return this.state === 'up';
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    for (const c of [this.client, this.subscriber]) {
      try {
        c.disconnect();
      } catch {
        /* already closed */
      }
    }
  }
}

/** A reply error that is a decision the client must see (the script's WRONGTYPE and GCRA overflow), not a failure. */
export function isDecision(e: Error): boolean {
  const m = e.message;
  return m.startsWith('WRONGTYPE ') || m.startsWith('ERR GCRA ');
}

/**
 * Sends one command with Buffer replies. Not through `callBuffer`: with auto-pipelining on, ioredis 6
 * drops the command name of call/callBuffer on its way into the pipeline.
 */
function send(client: Client, name: string, args: (Buffer | string | number)[]): Promise<unknown> {
  const command = new Command(name, args, { replyEncoding: null });
  client.sendCommand(command);
  return command.promise;
}

function lengthPrefix(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n, 0);
  return b;
}
