/**
 * The clients waiting in `RL.ACQUIRE key limit lease_ms ... WAIT timeout_ms` (docs/concurrency.md),
 * blocked as Redis blocks BLPOP: the connection gets no reply and runs none of its later commands
 * until its ACQUIRE is granted, its timeout (real time) passes (then the reply is the limited one),
 * CLIENT UNBLOCK ends it, or it disconnects (its wait is dropped: nothing is left behind).
 *
 * Waiters queue per key, first come first served: only the head of a key's queue tries, and an
 * ACQUIRE that does not wait serves the queue before taking a slot itself. The head tries again when
 * the store reports that a slot of the key may have freed (a release, DEL, FLUSH, expiry, eviction;
 * LeaseStore.watch / onFreed), when its earliest lease ends (a timer at the limited reply's
 * retry_after_ms, on the real clock; under a frozen DEBUG CLOCK, at each DEBUG CLOCK change), and
 * after a granted head (several slots may have freed at once).
 *
 * A wait counts as one decision (INFO limiter): allowed when granted, limited when it ends unserved.
 *
 * A client has at most one wait (it is blocked), counted in its memory account (the copied call),
 * so waiters are bounded by maxclients and by maxmemory-clients.
 */
import type { Clock } from '../clock.js';
import { KeyspaceFullError } from '../keyspace/keyspace.js';
import type { LeaseWaiting } from '../commands/types.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import { detachLeaseCall, type LeaseCall, type LeaseOutcome } from '../store/lease-call.js';
import { writeLeaseReply } from '../store/lease-replies.js';
import type { LeaseStore } from '../store/lease-store.js';
import type { Client } from './client.js';
import type { ClientsMemory } from './client-memory.js';
import type { LimiterCounter, Stats } from './stats.js';

/** What a waiter costs beside its key and id: the queue entry, the call's copy, its timer and closures. */
const WAITER_BYTES = 640;
const UNBLOCKED = 'UNBLOCKED client unblocked via CLIENT UNBLOCK';

interface Waiter {
  client: Client;
  /** The call as copied, without its counter: its attempts are not decisions, its end is. */
  call: LeaseCall;
  counter: LimiterCounter | null;
  queue: KeyQueue;
  resolve: (write: (reply: ReplyWriter) => void) => void;
  timer: NodeJS.Timeout | null;
  /** The latest limited outcome's fields, and the (server) ms it was decided at: a timeout answers them. */
  limit: number;
  retryAfterMs: number;
  resetAfterMs: number;
  atMs: number;
  /** Answered or gone: an attempt in flight for it finds it so. */
  done: boolean;
}

interface KeyQueue {
  name: string;
  key: Buffer;
  waiters: Waiter[];
  /** The head's attempt is in flight (a backend's answer comes later). */
  trying: boolean;
  /** When the earliest lease ends (real clock). */
  timer: NodeJS.Timeout | null;
}

export class LeaseWaiters implements LeaseWaiting {
  waiting = 0;
  timedOut = 0;
  granted = 0;
  private readonly queues = new Map<string, KeyQueue>();
  private readonly byClient = new Map<Client, Waiter>();
  /** Keys reported freed, served after the command that freed them (never inside a keyspace change). */
  private readonly ready = new Set<KeyQueue>();
  private scheduled = false;

  constructor(
    private readonly store: () => LeaseStore,
    private readonly clock: Clock,
    private readonly memory: ClientsMemory,
    private readonly stats: Stats,
    /** Logs an unexpected error met while serving from a timer or after a command (never thrown there). */
    private readonly warn: (e: unknown) => void,
  ) {}

  /** The store's onFreed: called from inside a keyspace change, so the key is served a moment later. */
  readonly freed = (key: Buffer): void => {
    const q = this.queues.get(key.toString('latin1'));
    if (q === undefined) return;
    this.ready.add(q);
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(this.serveReady);
  };

  private readonly serveReady = (): void => {
    this.scheduled = false;
    const queues = [...this.ready];
    this.ready.clear();
    for (const q of queues) this.serveGuarded(q);
  };

  /** serve() from a microtask or a timer: an exception there would end the process. */
  private serveGuarded(q: KeyQueue): void {
    try {
      this.serve(q);
    } catch (e) {
      this.warn(e);
    }
  }

  wait(client: Client, call: LeaseCall, nowMs: number): void {
    const copy = detachLeaseCall(call);
    copy.counter = null;
    const name = copy.argv.str(1);
    let q = this.queues.get(name);
    if (q === undefined) {
      q = { name, key: copy.argv.buffer(1), waiters: [], trying: false, timer: null };
      this.queues.set(name, q);
      const store = this.store();
      store.onFreed = this.freed;
      store.watch(q.key);
    }
    const w: Waiter = {
      client, call: copy, counter: call.counter, queue: q, resolve: client.block(), timer: null,
      limit: call.limit, retryAfterMs: 1, resetAfterMs: 1, atMs: nowMs, done: false,
    };
    if (call.waitMs > 0) {
      w.timer = setTimeout(() => {
        try {
          this.timeout(w, false);
        } catch (e) {
          this.warn(e);
        }
      }, call.waitMs);
    }
    q.waiters.push(w);
    this.byClient.set(client, w);
    this.waiting++;
    this.memory.set(client, 'blocked', WAITER_BYTES + copy.argv.byteLength(1) + (copy.idArg === -1 ? 0 : copy.argv.byteLength(copy.idArg)));
    // Tried once the command has returned, never inside it: a wait granted at once is then answered
    // through the blocked client's deferred reply like any other (answered synchronously, inside the
    // command that blocked, the reply was never sent and the connection stayed held).
    this.ready.add(q);
    if (!this.scheduled) {
      this.scheduled = true;
      queueMicrotask(this.serveReady);
    }
  }

  serveKey(key: Buffer): void {
    if (this.waiting === 0) return;
    const q = this.queues.get(key.toString('latin1'));
    if (q !== undefined) this.serve(q);
  }

  unblock(client: Client, error: boolean): boolean {
    const w = this.byClient.get(client);
    if (w === undefined) return false;
    if (error) {
      this.finish(w);
      w.resolve((r) => r.error(UNBLOCKED));
    } else {
      this.timeout(w, true);
    }
    return true;
  }

  /** A client that went away: its wait is dropped (no lease is taken for it from now on). */
  clientGone(client: Client): void {
    const w = this.byClient.get(client);
    if (w !== undefined) this.finish(w);
  }

  clockChanged(): void {
    for (const q of this.queues.values()) this.ready.add(q);
    if (this.ready.size > 0 && !this.scheduled) {
      this.scheduled = true;
      queueMicrotask(this.serveReady);
    }
  }

  /** Tries the key's head until one is limited (or an attempt is in flight, or the queue is empty). */
  private serve(q: KeyQueue): void {
    while (!q.trying && q.waiters.length > 0) {
      const w = q.waiters[0];
      q.trying = true;
      let sync = true;
      let next = false;
      const done = (o: LeaseOutcome | string): void => {
        q.trying = false;
        const answered = this.settle(w, o);
        if (sync) next = answered;
        else if (answered) this.serve(q);
      };
      try {
        this.store().attempt(w.call, this.clock.nowMs(), done);
      } catch (e) {
        // Served from another client's command or a timer: the waiter gets the error, the queue goes on.
        if (q.trying) done(e instanceof KeyspaceFullError ? `OOM command not allowed: ${e.message}` : 'ERR internal error in \'rl.acquire\'');
      }
      sync = false;
      if (!next) return;
    }
  }

  /** The head's attempt answered: true when it was answered (the next may try), false when it waits on. */
  private settle(w: Waiter, o: LeaseOutcome | string): boolean {
    // Gone meanwhile (disconnected, timed out): its place was already given up.
    if (w.done) return true;
    if (typeof o === 'string') {
      this.finish(w);
      w.resolve((r) => r.error(o));
      return true;
    }
    if (!o.limited) {
      this.finish(w);
      this.granted++;
      w.counter?.count(this.stats, false);
      const reply = { ...o };
      w.resolve((r) => writeLeaseReply(r, reply));
      return true;
    }
    w.limit = o.limit;
    w.retryAfterMs = o.retryAfterMs;
    w.resetAfterMs = o.resetAfterMs;
    w.atMs = this.clock.nowMs();
    const q = w.queue;
    if (q.timer !== null) clearTimeout(q.timer);
    q.timer = null;
    // Under a frozen debug clock no lease ends by itself: DEBUG CLOCK's changes serve the keys.
    if (!this.clock.frozen && o.retryAfterMs > 0) {
      q.timer = setTimeout(() => {
        q.timer = null;
        this.serveGuarded(q);
      }, Math.min(o.retryAfterMs, 2 ** 31 - 1));
    }
    return false;
  }

  /** The wait ends unanswered by a grant: limited, with its latest limited outcome's waits (as of now). */
  private timeout(w: Waiter, unblocked: boolean): void {
    if (w.done) return;
    this.finish(w);
    if (!unblocked) this.timedOut++;
    w.counter?.count(this.stats, true);
    const elapsed = Math.max(0, this.clock.nowMs() - w.atMs);
    const reply: LeaseOutcome = {
      limited: true, limit: w.limit, remaining: 0, retryAfterMs: Math.max(1, w.retryAfterMs - elapsed),
      resetAfterMs: Math.max(1, w.resetAfterMs - elapsed), id: null,
    };
    w.resolve((r) => writeLeaseReply(r, reply));
  }

  /** Takes the waiter out of its queue and the books (the reply is the caller's). */
  private finish(w: Waiter): void {
    if (w.done) return;
    w.done = true;
    if (w.timer !== null) clearTimeout(w.timer);
    this.byClient.delete(w.client);
    this.waiting--;
    this.memory.set(w.client, 'blocked', 0);
    const q = w.queue;
    const i = q.waiters.indexOf(w);
    if (i !== -1) q.waiters.splice(i, 1);
    if (q.waiters.length === 0) {
      if (q.timer !== null) clearTimeout(q.timer);
      q.timer = null;
      this.queues.delete(q.name);
      this.ready.delete(q);
      this.store().unwatch(q.key);
    }
  }
}
