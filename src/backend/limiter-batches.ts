/**
 * The limiter calls of one event-loop turn, gathered per backend node and sent as one script run
 * each (docs/backend.md "Batches"). Redis pays a script's fixed cost (the command, the script's
 * set-up, TIME) once per batch instead of once per call, and the sidecar builds one command, one
 * promise and one timeout entry per batch; the calls are decided in the order given, each as on its
 * own (limiter-script.ts, batchScriptHeader).
 *
 * Invariants:
 * - a call never waits for a later turn: the batches are sent at the end of the turn it was made in
 *   (setImmediate, after every connection's input of the turn was read), or at once when one is full
 *   (MAX_BATCH_CALLS calls or MAX_BATCH_BYTES);
 * - the backend sees the commands in the order given: any other command sent to it (a transaction's
 *   unit, DEL, TTL, TYPE, ...) sends the open batches first (RedisBackend.beforeSend); the calls of
 *   one key always share a node, hence a batch, and stay in order within it;
 * - the calls of a unit (addUnit: a transaction's, a rate limit service request's) are never cut
 *   between two batches: one script run decides them all, with nothing in between;
 * - a batch names its keys in ARGV, not KEYS, so that a Cluster master takes keys of every slot it
 *   serves in one run; a call whose key the master does not serve (its slot moved since the slot map
 *   was read) is not decided there (NOT_SERVED) and goes again on its own, by its slot, through the
 *   Cluster client, which follows MOVED and ASK. Nothing of a batch waits longer than
 *   backend-timeout without an answer: it times out as one call, and each of its calls then gets
 *   the policy.
 */
import { batchScriptHeader, NOT_SERVED, splitBatchReply } from './limiter-script.js';
import { TIMED_OUT, type CallDone, type NodeState, type RedisBackend } from './redis-backend.js';
import { FrameCommand, ScriptHeads } from './script-frame.js';

/**
 * The most calls one batch carries. A batch keeps Redis busy for all its calls (nothing else runs
 * meanwhile): at some 3-10 µs of Redis time per call this stays within a few ms, as a transaction's
 * unit (MAX_UNIT_CALLS).
 */
export const MAX_BATCH_CALLS = 256;
/** The most bytes of ARGV one batch carries (keys are up to 64 KiB each). */
export const MAX_BATCH_BYTES = 1024 * 1024;

/** What a batch needs of a call. */
export interface BatchedCall {
  /** Its backend keys (prefixed). */
  keys: Buffer[];
  /** Its one ARGV element (limiterScriptArgv). */
  argv: Buffer;
  /** The node its first key's slot belongs to (RedisBackend.admit). */
  node: NodeState;
  /** Whether it carries a frozen debug clock (DEBUG CLOCK) rather than using the backend's TIME. */
  frozen: boolean;
  /**
   * Where its outcome goes when not to the batches' own receiver: a call of another store riding in
   * the same scripts (a concurrency lease's, backend-leases.ts).
   */
  own?: BatchReceiver<never>;
}

/** Where a batch's outcome goes. */
export interface BatchReceiver<T extends BatchedCall> {
  /** One call's reply (its part of the batch's reply), or its own error, or the batch's failure. */
  answer(call: T, error: Parameters<CallDone>[0], reply: unknown): void;
  /** A call no batch could carry (no connection to its node, or NOT_SERVED): sent on its own. */
  sendAlone(call: T): void;
}

interface Batch<T> {
  node: NodeState;
  calls: T[];
  /** The ARGV: the header (set when sent), then each call's element and its keys. */
  elements: Buffer[];
  bytes: number;
  frozen: boolean;
}

export class LimiterBatches<T extends BatchedCall> {
  /** The batches of this turn, not sent yet (one per node: a few). */
  private open: Batch<T>[] = [];
  private scheduled = false;
  private readonly heads: ScriptHeads;
  /**
   * The connections that were sent the script's text: the first batch on a connection goes as EVAL
   * (which loads the script), later ones as EVALSHA. An EVALSHA answered NOSCRIPT (a backend that
   * restarted) would go again after the commands sent meanwhile, out of order: so not the first.
   */
  private readonly loadedOn = new WeakSet<object>();

  constructor(
    private readonly backend: RedisBackend,
    limiterScript: string,
    private readonly receiver: BatchReceiver<T>,
  ) {
    this.heads = new ScriptHeads(limiterScript);
  }

  /** Adds a call to its node's batch of this turn (sent at the end of the turn, or when full). */
  add(call: T): void {
    const batch = this.openFor(call.node);
    this.put(batch, call);
    this.sendIfFull(batch);
  }

  /**
   * Adds calls that must be decided together (a transaction's unit, a rate limit service request's
   * limits), in order, to one batch of this turn: never cut in two, so one script run decides them
   * all with nothing in between, as a unit's own script would. When the open batch has no room left
   * for all of them it is sent first and they start the next. False, with nothing added, when they
   * cannot ride in a batch: more than a batch carries, or keys of several nodes (the caller sends
   * them as a unit of their own).
   */
  addUnit(calls: readonly T[]): boolean {
    const node = calls[0].node;
    let bytes = 0;
    for (const call of calls) {
      if (call.node !== node) return false;
      bytes += callBytes(call);
    }
    if (calls.length > MAX_BATCH_CALLS || bytes > MAX_BATCH_BYTES) return false;
    let batch = this.openFor(node);
    if (batch.calls.length + calls.length > MAX_BATCH_CALLS || batch.bytes + bytes > MAX_BATCH_BYTES) {
      this.sendOpen(batch);
      batch = this.openFor(node);
    }
    for (const call of calls) this.put(batch, call);
    this.sendIfFull(batch);
    return true;
  }

  /** The node's open batch of this turn, a new one if it has none (the end of the turn scheduled). */
  private openFor(node: NodeState): Batch<T> {
    for (const b of this.open) if (b.node === node) return b;
    const batch: Batch<T> = { node, calls: [], elements: [EMPTY], bytes: 0, frozen: true };
    this.open.push(batch);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.endOfTurn);
    }
    return batch;
  }

  private put(batch: Batch<T>, call: T): void {
    batch.calls.push(call);
    batch.elements.push(call.argv);
    batch.bytes += call.argv.length;
    for (const key of call.keys) {
      batch.elements.push(key);
      batch.bytes += key.length;
    }
    if (!call.frozen) batch.frozen = false;
    batch.node.queued++;
  }

  /** Sends a batch at once when it holds MAX_BATCH_CALLS calls or MAX_BATCH_BYTES. */
  private sendIfFull(batch: Batch<T>): void {
    if (batch.calls.length >= MAX_BATCH_CALLS || batch.bytes >= MAX_BATCH_BYTES) this.sendOpen(batch);
  }

  /** Sends an open batch of this turn now (it is no longer open). */
  private sendOpen(batch: Batch<T>): void {
    this.open.splice(this.open.indexOf(batch), 1);
    this.send(batch);
  }

  /** Sends every open batch now. */
  flush(): void {
    const open = this.open;
    if (open.length === 0) return;
    this.open = [];
    for (const batch of open) this.send(batch);
  }

  private readonly endOfTurn = (): void => {
    this.scheduled = false;
    this.flush();
  };

  private send(batch: Batch<T>): void {
    const { backend, receiver } = this;
    const n = batch.calls.length;
    batch.node.queued -= n;
    const redis = backend.connectionOf(batch.node);
    if (redis === null) {
      for (const call of batch.calls) receiverOf(call, receiver).sendAlone(call);
      return;
    }
    batch.elements[0] = batchScriptHeader(batch.frozen);
    backend.calls++;
    backend.batchStats.count(n);
    const byText = !this.loadedOn.has(redis);
    if (byText) this.loadedOn.add(redis);
    const command = new FrameCommand(this.heads.frame(batch.elements, byText));
    redis.sendCommand(command);
    backend.track(command.promise, (error, reply) => {
      // The backend restarted or its scripts were flushed: once more by text, which loads it.
      if (error !== null && error !== TIMED_OUT && error.message.startsWith('NOSCRIPT')) {
        this.loadedOn.delete(redis);
        const again = new FrameCommand(this.heads.frame(batch.elements, true));
        redis.sendCommand(again);
        backend.track(again.promise, (e, r) => this.settle(batch, e, r), batch.node, n);
        return;
      }
      this.settle(batch, error, reply);
    }, batch.node, n);
  }

  /** The batch's reply, handed out call by call. */
  private settle(batch: Batch<T>, error: Parameters<CallDone>[0], reply: unknown): void {
    const { calls } = batch;
    const receiver = this.receiver;
    if (error !== null) {
      for (const call of calls) receiverOf(call, receiver).answer(call, error, undefined);
      return;
    }
    const replies = splitBatchReply(reply, calls.length);
    if (replies === null) {
      // Each call's parse fails the same way: counted as an error each, and answered by the policy.
      for (const call of calls) receiverOf(call, receiver).answer(call, null, undefined);
      return;
    }
    let moved = false;
    for (let i = 0; i < calls.length; i++) {
      const one = replies[i];
      const to = receiverOf(calls[i], receiver);
      if (typeof one !== 'string') to.answer(calls[i], null, one);
      else if (one === NOT_SERVED) {
        if (!moved) this.backend.refreshSlots();
        moved = true;
        to.sendAlone(calls[i]);
      } else to.answer(calls[i], errorOf(one), undefined);
    }
  }
}

/** The call's own receiver, if it has one (a lease's), else the batches'. */
function receiverOf<T extends BatchedCall>(call: T, receiver: BatchReceiver<T>): BatchReceiver<T> {
  return (call.own as BatchReceiver<T> | undefined) ?? receiver;
}

/** The error of a call in a batch, as the script's reply error would be (a decision such as WRONGTYPE, or a failure). */
function errorOf(text: string): Error {
  let e = ERRORS.get(text);
  if (e === undefined) ERRORS.set(text, (e = new Error(text)));
  return e;
}
const ERRORS = new Map<string, Error>();

/** The ARGV bytes a call adds to a batch: its element and its keys. */
function callBytes(call: BatchedCall): number {
  let n = call.argv.length;
  for (const key of call.keys) n += key.length;
  return n;
}

/** The header's place until the batch is sent (its flags depend on every call). */
const EMPTY = Buffer.alloc(0);
