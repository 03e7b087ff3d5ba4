/**
 * The connection to the shared backend (docs/backend.md): a Redis or a Redis Cluster that holds the
 * limiter state of several cellgate sidecars. The client is ioredis (its Cluster support follows
 * MOVED/ASK and refreshes the slot map on failover; concurrent calls are pipelined on each
 * connection); this module adds what a rate limiter needs on top:
 *
 * - a bounded wait: every call is answered within `backend-timeout`, by the backend or, past it, by
 *   the `backend-unavailable` policy (the caller decides what that means);
 * - a state (`connecting` → `up` ↔ `down`), one log line per change: `connecting` until the first
 *   contact (one Redis: its connection ready; a Cluster: the slot map loaded and every master
 *   answering a PING), during which limiter calls wait for it within backend-timeout
 *   (src/backend/first-contact.ts) and /readyz says not ready; down when the connection is lost or
 *   (one Redis) three calls in a row time out; while down, calls are answered by the policy at once
 *   and a PING probe runs every PROBE_INTERVAL_MS; the first success brings it up;
 * - per node: at most MAX_PENDING_PER_NODE calls waiting for one node (the rest get the policy at
 *   once), and in a Cluster a down state per master, following the slot map (reloaded on timeouts,
 *   MOVED, CLUSTERDOWN and while a master is down), so a stuck master takes only its own slots;
 * - invalidations of the sidecars' refusal caches (src/backend/invalidations.ts).
 *
 * The limiter and key stores built on it are src/backend/backend-limiter.ts and backend-keys.ts.
 */
import { Cluster, type Redis } from 'ioredis';
import type { Logger } from '../log.js';
import type { BackendTarget } from './backend-url.js';
import { RefusalCache } from './refusal-cache.js';
import { BatchStats } from './batch-stats.js';
import { keySlot } from './key-slot.js';
import { InvalidationChannel } from './invalidations.js';
import { connectBackend, send, type Client, type ConnectExtras } from './connections.js';
import { MAX_PENDING_PER_NODE, newNode, PROBE_INTERVAL_MS, type NodeState } from './node-state.js';
export { MAX_PENDING_PER_NODE, PROBE_INTERVAL_MS };
import { markNodeDown, markNodeUp, type NodeHost } from './cluster-nodes.js';
export type { NodeState };

export type BackendState = 'connecting' | 'up' | 'down';
import type { UnavailablePolicy } from '../store/policy-limiter.js';
export type { UnavailablePolicy };

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
/** How long after the start a backend not reached yet is logged (it stays `connecting`). */
const CONNECT_GRACE_MS = 1000;

interface InFlight {
  deadlineMs: number;
  done: CallDone;
  settled: boolean;
  node: NodeState;
  /** Limiter calls it carries (a batch's), as counted towards TIMEOUTS_FOR_DOWN. */
  weight: number;
}

interface LimiterClient {
  cellgateLimit(numKeys: number, ...args: (Buffer | string)[]): Promise<unknown>;
  cellgateLimitBuffer(numKeys: number, ...args: (Buffer | string)[]): Promise<unknown>;
  cellgateType(numKeys: number, ...args: (Buffer | string)[]): Promise<unknown>;
  cellgateBlock(numKeys: number, ...args: (Buffer | string)[]): Promise<unknown>;
}

export class RedisBackend {
  state: BackendState = 'connecting';
  timeoutMs: number;
  policy: UnavailablePolicy;
  readonly cache = new RefusalCache();
  /** The prefix as bytes, put before every client key. */
  readonly prefixBytes: Buffer;
  // Counters (INFO backend, metrics).
  calls = 0;
  errors = 0;
  timeouts = 0;
  policyDecisions = 0;
  stateChanges = 0;
  /** Calls answered by the policy at once because their node had MAX_PENDING_PER_NODE calls pending. */
  overflows = 0;
  /** The most calls one node had pending at once so far (never above MAX_PENDING_PER_NODE). */
  pendingPeak = 0;
  lastError = '';
  /** The connections' TLS files (backend-tls.ts), for INFO; set by the server. */
  tls: { reloads: number; reloadErrors: number; lastError: string } | null = null;
  /** The limiter calls held for the first contact (src/backend/first-contact.ts), for INFO. */
  firstContact: { waited: number; expired: number; size: number } | null = null;
  /** Called once, when the backend is reached for the first time (the held calls go then). */
  onFirstContact: () => void = () => {};
  /** The limiter calls' batches (src/backend/limiter-batches.ts). */
  readonly batchStats = new BatchStats();

  private readonly client: Client;
  private readonly subscriber: Client;
  /** Resets heard from and told to the other sidecars (src/backend/invalidations.ts). */
  private readonly invalidations: InvalidationChannel;
  private readonly inFlight: InFlight[] = [];
  private inFlightHead = 0;
  private timer: NodeJS.Timeout | null = null;
  private consecutiveTimeouts = 0;
  private probing = false;
  /** The one node of a standalone backend; a Cluster's masters by node key. */
  private readonly single: NodeState = newNode('standalone');
  private readonly nodesByKey = new Map<string, NodeState>();
  /** When the Cluster's slot map was last asked to refresh (ms). */
  private lastRefreshMs = 0;
  /** The connections' writes are held until the end of this turn (cork). */
  private corked = false;
  private closed = false;
  /** What a Cluster master's down state needs of the backend (cluster-nodes.ts). */
  private readonly nodeHost: NodeHost = {
    after: (name, ms, task) => this.host.after(name, ms, task),
    log: () => this.host.log,
    closed: () => this.closed,
    describe: () => ({ display: this.target.display, policy: this.policy }),
    cluster: () => (this.client instanceof Cluster ? this.client : null),
    refreshSlots: () => this.refreshSlots(),
  };
  /** Whether the backend was ever up: before that, calls wait for it (first-contact.ts). */
  private everUp = false;
  /** A Cluster's master connections by node key (batches are written to them directly). */
  private masterConnections = new Map<string, Redis>();
  /** Sends this turn's batches (limiter-batches.ts) before any other command: the backend sees the order given. */
  beforeSend: () => void = () => {};

  constructor(
    readonly target: BackendTarget,
    readonly prefix: string,
    timeoutMs: number,
    policy: UnavailablePolicy,
    limiterScript: string,
    typeScript: string,
    blockScript: string,
    readonly host: BackendHost,
    extras: ConnectExtras,
  ) {
    this.timeoutMs = timeoutMs;
    this.policy = policy;
    this.prefixBytes = Buffer.from(prefix);
    this.client = connectBackend(target, timeoutMs, extras);
    this.client.defineCommand('cellgateLimit', { lua: limiterScript });
    this.client.defineCommand('cellgateType', { lua: typeScript });
    this.client.defineCommand('cellgateBlock', { lua: blockScript });
    this.client.on('ready', () => this.connected());
    this.client.on('close', () => this.connectionLost('connection closed'));
    this.client.on('error', (e: Error) => this.noteError(e.message));
    // A Cluster client opens and closes connections while it discovers the nodes, and a busy machine
    // makes that slow: not being reached yet is not a fault of the backend. The state stays
    // `connecting` (each call waits for the first contact within backend-timeout, /readyz says not
    // ready); this only says so in the log.
    host.after('backend connect', CONNECT_GRACE_MS, () => {
      if (this.state === 'connecting' && !this.closed) {
        this.host.log.warning(`backend not reached yet after ${CONNECT_GRACE_MS} ms${this.lastError !== '' ? ` (${oneLine(this.lastError)})` : ''}; limiter calls wait up to backend-timeout ${this.timeoutMs} ms for it, then are answered by backend-unavailable ${this.policy}`, { backend: this.target.display });
      }
    });
    this.subscriber = connectBackend(target, timeoutMs, extras);
    this.invalidations = new InvalidationChannel(`${prefix}__invalidate`, this.client, this.subscriber, this.cache, {
      clusterMode: target.mode === 'cluster',
      timeoutMs: () => this.timeoutMs,
      after: (name, ms, task) => host.after(name, ms, task),
      noteError: (message) => this.noteError(message),
    });
  }

  /**
   * The node a call on `key` goes to, when it can take one now; null when the call must get the
   * policy at once: that node is down (Cluster), or has MAX_PENDING_PER_NODE calls pending (counted
   * in `overflows`).
   */
  admit(key: Buffer): NodeState | null {
    const node = this.nodeFor(key);
    if (node.down) return null;
    if (node.pending + node.queued >= MAX_PENDING_PER_NODE) {
      this.overflows++;
      return null;
    }
    return node;
  }

  /** Where a key's calls go: the master of its slot in the Cluster client's slot map. */
  private nodeFor(key: Buffer): NodeState {
    if (!(this.client instanceof Cluster)) return this.single;
    const owner = this.client.slots[keySlot(key)]?.[0];
    if (owner === undefined) return this.single;
    let node = this.nodesByKey.get(owner);
    if (node === undefined) {
      node = newNode(owner);
      this.nodesByKey.set(owner, node);
    }
    return node;
  }

  /** Runs the limiter script with these keys (prefixed) and ARGV on `node` (from admit); `done` is called exactly once; `packed`: the reply as Buffers (a batch's packed reply). */
  limit(node: NodeState, keys: Buffer[], argv: readonly (Buffer | string)[], done: CallDone, packed = false): void {
    this.beforeSend();
    this.calls++;
    if (!this.corked) this.cork();
    const c = this.client as unknown as LimiterClient;
    this.track(packed ? c.cellgateLimitBuffer(keys.length, ...keys, ...argv) : c.cellgateLimit(keys.length, ...keys, ...argv), done, node);
  }

  /** The connection a node's batches are written to (one Redis: the client), or null when not ready. */
  connectionOf(node: NodeState): Redis | null {
    const client = this.client;
    if (!(client instanceof Cluster)) return client.status === 'ready' ? client : null;
    let redis = this.masterConnections.get(node.key);
    if (redis === undefined || redis.status !== 'ready') {
      this.masterConnections = new Map(client.nodes('master').map((r) => [`${r.options.host}:${r.options.port}`, r]));
      redis = this.masterConnections.get(node.key);
    }
    return redis !== undefined && redis.status === 'ready' ? redis : null;
  }

  /** TYPE of one backend key, through the type script (cellgate's algorithm names). */
  type(key: Buffer, argv: string[], done: CallDone): void {
    this.onKey(key, () => (this.client as unknown as LimiterClient).cellgateType(1, key, ...argv), done);
  }

  /** RL.BLOCK of one backend key, through the block script, as a promise. */
  askBlock(key: Buffer, argv: string[]): Promise<unknown> {
    return this.promised((done) => this.onKey(key, () => (this.client as unknown as LimiterClient).cellgateBlock(1, key, ...argv), done));
  }

  /** Any other command (DEL, PTTL, ...) on one key, with the same bounded wait. */
  command(name: string, args: (Buffer | string | number)[], done: CallDone): void {
    const key = args[0];
    this.onKey(Buffer.isBuffer(key) ? key : null, () => send(this.client, name, args), done);
  }

  /**
   * Sends one command on `key` (null: no key, to the one server) once the open batches are sent
   * (the backend sees the commands in order) and the key's node admits it (`admit`); else `done`
   * gets the error at once.
   */
  private onKey(key: Buffer | null, start: () => Promise<unknown>, done: CallDone): void {
    this.beforeSend();
    const node = key === null ? this.single : this.admit(key);
    if (node === null) {
      done(new Error('the key\'s backend node is down or has too many calls pending'), undefined);
      return;
    }
    this.track(start(), done, node);
  }

  /** Cluster nodes marked down now (INFO backend). */
  get nodesDown(): number {
    let n = 0;
    for (const node of this.nodesByKey.values()) if (node.down) n++;
    return n;
  }

  /** Calls sent and not answered yet, over every node (INFO backend). */
  get pending(): number {
    let n = this.single.pending;
    for (const node of this.nodesByKey.values()) n += node.pending;
    return n;
  }

  /** The Cluster's masters (SCAN, DBSIZE and FLUSHDB visit each), or the one server. */
  masters(): Redis[] {
    return this.client instanceof Cluster ? this.client.nodes('master') : [this.client];
  }

  /** Runs a command on one node (a master from masters()), with the bounded wait. */
  onNode(node: Redis, name: string, args: (Buffer | string | number)[], done: CallDone): void {
    this.beforeSend();
    this.track(send(node, name, args), done, this.stateOf(node));
  }

  /** The state of a connection from masters(). */
  private stateOf(redis: Redis): NodeState {
    if (!(this.client instanceof Cluster)) return this.single;
    const key = `${redis.options.host}:${redis.options.port}`;
    let node = this.nodesByKey.get(key);
    if (node === undefined) {
      node = newNode(key);
      this.nodesByKey.set(key, node);
    }
    return node;
  }

  /**
   * One step of a long operator command (FLUSHDB) on one node: bounded by the operation's own
   * deadline, not by backend-timeout, and outside the limiter calls' bookkeeping (never a timeout,
   * never a reason to mark the backend down).
   */
  bulk(node: Redis, name: string, args: (Buffer | string | number)[], deadlineMs: number): Promise<unknown> {
    const waitMs = deadlineMs - Date.now();
    if (waitMs <= 0) return Promise.reject(new Error(`${name.toUpperCase()} did not finish within its time budget`));
    return new Promise((resolve, reject) => {
      const timer = this.host.after('backend bulk', waitMs, () => reject(new Error(`${name.toUpperCase()} did not finish within its time budget`)));
      send(node, name, args).then(
        (reply) => {
          clearTimeout(timer);
          resolve(reply);
        },
        (e: Error) => {
          clearTimeout(timer);
          reject(e);
        },
      );
    });
  }

  /**
   * Tells every sidecar (this one included) that these client keys were reset (an empty list: all of
   * them); resolves once every one has dropped its cached refusals of them, or after backend-timeout
   * (src/backend/invalidations.ts). A reset command replies after this.
   */
  invalidate(keys: Buffer[]): Promise<void> {
    return this.invalidations.invalidate(keys);
  }

  /** Invalidations heard from the sidecars (INFO backend). */
  get invalidationsReceived(): number {
    return this.invalidations.received;
  }

  /** Invalidations whose acknowledgements did not all arrive within backend-timeout (INFO backend). */
  get invalidationAckTimeouts(): number {
    return this.invalidations.ackTimeouts;
  }

  /** Attaches `done` to a call (of `weight` limiter calls: a batch's) with the bounded wait. */
  track(call: Promise<unknown>, done: CallDone, node: NodeState, weight = 1): void {
    const entry: InFlight = { deadlineMs: Date.now() + this.timeoutMs, done, settled: false, node, weight };
    this.inFlight.push(entry);
    node.pending += weight;
    if (node.pending > this.pendingPeak) this.pendingPeak = node.pending;
    if (this.timer === null) this.armTimer();
    call.then(
      (reply) => {
        node.pending -= weight;
        // The node answers (a late reply included): it is not stuck.
        node.consecutiveTimeouts = 0;
        if (node.down) markNodeUp(this.nodeHost, node, 'a call was answered');
        if (entry.settled) return;
        settle(entry);
        this.consecutiveTimeouts = 0;
        // Back from down (the first contact is `connected`'s: a Cluster's masters all answered).
        if (this.state === 'down' && this.client.status === 'ready') this.setState('up', 'a call succeeded');
        done(null, reply);
      },
      (e: Error) => {
        node.pending -= weight;
        if (e.message.startsWith('CLUSTERDOWN') || e.message.startsWith('MOVED')) this.refreshSlots();
        if (entry.settled) return;
        settle(entry);
        if (!isDecision(e)) {
          this.errors++;
          this.noteError(e.message);
        }
        done(e, undefined);
      },
    );
  }

  /**
   * Asks the Cluster client to reload the slot map (at most once per PROBE_INTERVAL_MS): after a
   * failover the failed master's slots belong to its replica, and a paused master sends no MOVED.
   */
  refreshSlots(): void {
    if (!(this.client instanceof Cluster) || this.closed) return;
    const now = Date.now();
    if (now - this.lastRefreshMs < PROBE_INTERVAL_MS) return;
    this.lastRefreshMs = now;
    this.client.refreshSlotsCache((e?: Error | null) => {
      if (e) this.noteError(`slot map refresh: ${e.message}`);
    });
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
        const done = entry.done;
        settle(entry);
        this.timeouts++;
        // Calls, not scripts: three calls of one batch time out as three calls sent one by one did.
        this.consecutiveTimeouts += entry.weight;
        const node = entry.node;
        node.consecutiveTimeouts += entry.weight;
        // One Redis that stops answering is down for every key. In a Cluster one master failing takes
        // only its slots: the other masters' keys stay decided on the backend, the failing master's
        // calls get the policy at once, and the slot map is reloaded until its replica took over.
        const why = `${TIMEOUTS_FOR_DOWN} calls in a row took longer than backend-timeout ${this.timeoutMs} ms`;
        if (this.target.mode !== 'cluster') {
          if (this.consecutiveTimeouts >= TIMEOUTS_FOR_DOWN && this.state === 'up') this.setState('down', why);
        } else {
          this.refreshSlots();
          if (node.consecutiveTimeouts >= TIMEOUTS_FOR_DOWN && node !== this.single) markNodeDown(this.nodeHost, node, why);
        }
        done(TIMED_OUT, undefined);
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
      if (!this.everUp) {
        this.everUp = true;
        this.onFirstContact();
      }
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
      const node = this.single;
      if (node.pinging || node.pending >= MAX_PENDING_PER_NODE) {
        // The last PING, or as many calls as a node may hold, still unanswered (a paused Redis):
        // wait for them rather than queue more (any of them answered brings the backend up).
        this.probe();
        return;
      }
      node.pinging = true;
      const ping = this.client.ping();
      const answered = (): void => {
        node.pinging = false;
      };
      ping.then(answered, answered);
      this.track(ping, (error) => {
        if (error === null) this.setState('up', 'PING answered');
        else this.probe();
      }, node);
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

  /** Whether the backend was reached at least once since the start (before: calls wait for it). */
  get reached(): boolean {
    return this.everUp;
  }

  /**
   * The client is ready. One Redis: up. A Cluster, the first time: its client is ready once it has
   * the slot map, but it connects to each master only at the first command sent there, and a call
   * to a master still connecting fails at once (no offline queue): so up only once every master
   * answered a PING (tried again every PROBE_INTERVAL_MS until they do).
   */
  private connected(): void {
    const client = this.client;
    if (this.everUp || !(client instanceof Cluster)) {
      this.setState('up', 'connected');
      return;
    }
    if (this.closed || this.state !== 'connecting' || client.status !== 'ready') return;
    const masters = client.nodes('master');
    Promise.all(masters.map((m) => m.ping())).then(
      () => {
        if (client.status === 'ready') this.setState('up', `connected to the ${masters.length} masters`);
        else this.host.after('backend first contact', PROBE_INTERVAL_MS, () => this.connected());
      },
      (e: Error) => {
        this.noteError(`first contact: ${e.message}`);
        this.host.after('backend first contact', PROBE_INTERVAL_MS, () => this.connected());
      },
    );
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

/**
 * Marks an entry answered and drops its `done`: the entry stays queued until the oldest deadline (up
 * to backend-timeout), and what `done` holds (a batch's calls) must not live on into the old generation.
 */
function settle(entry: InFlight): void {
  entry.settled = true;
  entry.done = SETTLED;
}

const SETTLED: CallDone = () => {};

/** A reply error that is a decision the client must see (the script's WRONGTYPE and GCRA overflow), not a failure. */
export function isDecision(e: Error): boolean {
  const m = e.message;
  return m.startsWith('WRONGTYPE ') || m.startsWith('ERR GCRA ');
}


function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ');
}
