/**
 * Concurrency leases on the shared backend (docs/backend.md, "Concurrency leases"): RL.ACQUIRE,
 * RL.RELEASE and RL.RENEW are decided by the limiter script on Redis (lease-script.lua), riding in
 * the same per-node batches as the rate limits (BackendLimiterStore.addForeign), at the backend's
 * clock (TIME, or a frozen DEBUG CLOCK as the rate limits do). Every sidecar sees the same leases:
 * a lease taken through one is released or renewed through any other, and a sidecar that dies
 * leaves its leases to end on the backend's clock.
 *
 * An ACQUIRE without ID gets its id here (newLeaseId) before it is sent, so the script never makes
 * one and the reply needs no string.
 *
 * While the backend cannot answer (down, slow, a node full), `backend-unavailable` answers: `local`
 * this process's leases (the local store), `allow` a grant that holds nothing (RELEASE and RENEW 1),
 * `deny` refused for a second (RELEASE and RENEW 0).
 *
 * Waking the waiters of `RL.ACQUIRE ... WAIT` when a slot frees through another sidecar: a bounded
 * poll. While a key has waiters here it is reported freed every LEASE_POLL_MS (the waiters then
 * try again: one call in the next batch per key, whatever the number of waiters), and at once when
 * a lease of it is released through this sidecar. A lease that ends by time alone wakes them by
 * their own timer (the outcome's retry_after_ms).
 */
import type { Clock } from '../clock.js';
import { newLeaseId } from '../limiters/lease-id.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import type { Stats } from '../server/stats.js';
import { detachLeaseCall, type AttemptDone, type LeaseCall, type LeaseOutcome } from '../store/lease-call.js';
import { writeLeaseReply } from '../store/lease-replies.js';
import type { LeaseStore } from '../store/lease-store.js';
import type { DeferredReply, StoreSink } from '../store/store.js';
import { KEY_TOO_LONG, MAX_BACKEND_KEY_BYTES, type BackendLimiterStore } from './backend-limiter.js';
import type { BatchedCall, BatchReceiver } from './limiter-batches.js';
import { batchScriptHeader, splitBatchReply } from './limiter-script.js';
import { isDecision, TIMED_OUT, type CallDone, type RedisBackend } from './redis-backend.js';

/** How often a key with waiters in this sidecar is tried again (ms): the longest a slot freed elsewhere waits to be seen. */
export const LEASE_POLL_MS = 25;

/** The element's op code per call (lease-script.lua). */
const OP_CODE = { acquire: 0x41, release: 0x52, renew: 0x4e } as const;

interface LeaseSent extends BatchedCall {
  /** The call, detached (it outlives the command's turn). */
  call: LeaseCall;
  /** The lease's id: the caller's, or the one made here. */
  id: string;
  /** A command's deferred reply, or a waiter's attempt. */
  resolve: DeferredReply | null;
  done: AttemptDone | null;
  client: StoreSink['client'] | null;
}

export class BackendLeaseStore implements LeaseStore, BatchReceiver<LeaseSent> {
  onFreed: ((key: Buffer) => void) | null = null;
  /** Keys with waiters here (client keys, latin1) → how many watch() calls hold them. */
  private readonly watched = new Map<string, number>();
  private poll: NodeJS.Timeout | null = null;

  constructor(
    private readonly backend: RedisBackend,
    private readonly limiter: BackendLimiterStore,
    /** This process's leases: `backend-unavailable local`. */
    private readonly local: LeaseStore,
    private readonly stats: Stats,
    private readonly clock: Clock,
  ) {}

  acquire(call: LeaseCall, sink: StoreSink): void {
    this.send(call, sink, null, sink.nowUs);
  }

  release(call: LeaseCall, sink: StoreSink): void {
    this.send(call, sink, null, sink.nowUs);
  }

  renew(call: LeaseCall, sink: StoreSink): void {
    this.send(call, sink, null, sink.nowUs);
  }

  attempt(call: LeaseCall, nowMs: number, done: AttemptDone): void {
    this.send(call, null, done, nowMs * 1000);
  }

  watch(key: Buffer): void {
    const k = key.toString('latin1');
    this.watched.set(k, (this.watched.get(k) ?? 0) + 1);
    if (this.poll === null) {
      this.poll = setInterval(this.tick, LEASE_POLL_MS);
      this.poll.unref();
    }
  }

  unwatch(key: Buffer): void {
    const k = key.toString('latin1');
    const n = this.watched.get(k);
    if (n === undefined) return;
    if (n > 1) this.watched.set(k, n - 1);
    else this.watched.delete(k);
    if (this.watched.size === 0 && this.poll !== null) {
      clearInterval(this.poll);
      this.poll = null;
    }
  }

  private readonly tick = (): void => {
    const freed = this.onFreed;
    if (freed === null) return;
    // A copy: a waiter served may unwatch its key meanwhile.
    for (const k of [...this.watched.keys()]) freed(Buffer.from(k, 'latin1'));
  };

  /** Into this turn's batch of the key's node; or the policy at once when the backend cannot take it. */
  private send(call: LeaseCall, sink: StoreSink | null, done: AttemptDone | null, nowUs: number): void {
    const backend = this.backend;
    const argv = call.argv;
    if (argv.byteLength(1) > MAX_BACKEND_KEY_BYTES) {
      if (sink !== null) sink.reply.error(KEY_TOO_LONG);
      else done!(KEY_TOO_LONG);
      return;
    }
    const prefix = backend.prefixBytes;
    const key = Buffer.allocUnsafe(prefix.length + argv.byteLength(1));
    prefix.copy(key, 0);
    argv.source(1).copy(key, prefix.length, argv.start(1), argv.end(1));
    const node = backend.usable ? backend.admit(key) : null;
    if (node === null) {
      this.byPolicy(call, sink, done);
      return;
    }
    const id = call.idArg === -1 ? newLeaseId() : argv.buffer(call.idArg).toString('latin1');
    const frozen = this.clock.frozen;
    const element = Buffer.allocUnsafe(26 + Buffer.byteLength(id, 'latin1'));
    element[0] = 16 | (frozen ? 2 : 0);
    element.writeDoubleLE(frozen ? nowUs : 0, 1);
    element[9] = OP_CODE[call.op];
    element.writeDoubleLE(call.limit, 10);
    element.writeDoubleLE(call.leaseMs, 18);
    element.write(id, 26, 'latin1');
    const sent: LeaseSent = {
      keys: [key], argv: element, node, frozen, own: this as BatchReceiver<never>,
      call: sink !== null ? detachLeaseCall(call) : call, id,
      resolve: sink !== null ? sink.client.defer() : null, done, client: sink?.client ?? null,
    };
    this.limiter.addForeign(sent);
  }

  /** A call no batch could carry (no connection to its node, or its slot moved): a batch of one, by its key. */
  sendAlone(sent: LeaseSent): void {
    const node = this.backend.admit(sent.keys[0]);
    if (node === null) {
      this.answer(sent, NODE_UNAVAILABLE, undefined);
      return;
    }
    this.backend.limit(node, sent.keys, [batchScriptHeader(sent.frozen), sent.argv, sent.keys[0]], (error, reply) => {
      if (error !== null) {
        this.answer(sent, error, undefined);
        return;
      }
      const parts = splitBatchReply(reply, 1);
      if (parts === null) this.answer(sent, null, undefined);
      else if (typeof parts[0] === 'string') this.answer(sent, new Error(parts[0]), undefined);
      else this.answer(sent, null, parts[0]);
    }, true);
  }

  /** The backend's answer to one call (its reply integers), or its failure. */
  answer(sent: LeaseSent, error: Parameters<CallDone>[0], reply: unknown): void {
    const { call } = sent;
    if (error !== null) {
      if (error !== TIMED_OUT && isDecision(error)) {
        this.finish(sent, error.message, (w) => w.error(error.message));
        return;
      }
      this.later(sent, () => this.byPolicy(call, null, sent.done), (w) => this.byPolicy(call, this.sinkLater(sent, w), null));
      return;
    }
    const r = reply as number[] | undefined;
    if (call.op === 'acquire') {
      if (!Array.isArray(r) || r.length !== 5) {
        this.unexpected(sent);
        return;
      }
      const limited = r[0] === 1;
      call.counter?.count(this.stats, limited);
      const outcome: LeaseOutcome = { limited, limit: r[1], remaining: r[2], retryAfterMs: r[3], resetAfterMs: r[4], id: limited ? null : sent.id };
      this.finish(sent, outcome, (w) => writeLeaseReply(w, outcome));
      return;
    }
    if (!Array.isArray(r) || r.length !== 1) {
      this.unexpected(sent);
      return;
    }
    const n = r[0];
    if (call.op === 'release' && n === 1) this.freed(sent.keys[0]);
    this.finish(sent, String(n), (w) => w.integer(n));
  }

  /** A release through this sidecar: its waiters try at once (the poll would find it later). */
  private freed(key: Buffer): void {
    if (this.onFreed === null || this.watched.size === 0) return;
    const client = key.subarray(this.backend.prefixBytes.length);
    if (this.watched.has(client.toString('latin1'))) this.onFreed(Buffer.from(client));
  }

  private unexpected(sent: LeaseSent): void {
    this.backend.errors++;
    this.backend.lastError = 'unexpected script reply to a lease call';
    this.later(sent, () => this.byPolicy(sent.call, null, sent.done), (w) => this.byPolicy(sent.call, this.sinkLater(sent, w), null));
  }

  /** Hands an outcome to a waiter's attempt (a LeaseOutcome, or an error's text) or writes a command's reply. */
  private finish(sent: LeaseSent, attempt: LeaseOutcome | string, write: (w: ReplyWriter) => void): void {
    if (sent.done !== null) {
      // RELEASE and RENEW never come from a waiter; an attempt gets an outcome or an error's text.
      sent.done(attempt);
      return;
    }
    sent.resolve!(write);
  }

  private later(sent: LeaseSent, forAttempt: () => void, forReply: (w: ReplyWriter) => void): void {
    if (sent.done !== null) forAttempt();
    else sent.resolve!(forReply);
  }

  private sinkLater(sent: LeaseSent, reply: ReplyWriter): StoreSink {
    const nowUs = this.clock.nowUs();
    return { reply, client: sent.client!, nowUs, nowMs: Math.floor(nowUs / 1000) };
  }

  /** The `backend-unavailable` policy's answer, into a sink (a command) or to a waiter's attempt. */
  private byPolicy(call: LeaseCall, sink: StoreSink | null, done: AttemptDone | null): void {
    const backend = this.backend;
    backend.policyDecisions++;
    const policy = backend.policy;
    if (policy === 'local') {
      if (done !== null) this.local.attempt(call, Math.floor(this.clock.nowUs() / 1000), done);
      else this.local[call.op](call, sink!);
      return;
    }
    const allow = policy === 'allow';
    if (call.op !== 'acquire') {
      sink!.reply.integer(allow ? 1 : 0);
      return;
    }
    call.counter?.count(this.stats, !allow);
    const outcome: LeaseOutcome = allow
      ? { limited: false, limit: call.limit, remaining: call.limit - 1, retryAfterMs: -1, resetAfterMs: call.leaseMs, id: call.idArg === -1 ? newLeaseId() : call.argv.buffer(call.idArg).toString('latin1') }
      : { limited: true, limit: call.limit, remaining: 0, retryAfterMs: 1000, resetAfterMs: 1000, id: null };
    if (done !== null) done(outcome);
    else writeLeaseReply(sink!.reply, outcome);
  }
}

/** Why a call re-sent on its own got the policy: its node is down or full (as RedisBackend.admit). */
const NODE_UNAVAILABLE = new Error("the key's backend node is down or has too many calls pending");
