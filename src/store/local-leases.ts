/**
 * Concurrency limits decided on this process's keyspace (see lease-store.ts): the key looked up
 * (WRONGTYPE for another type, a block refuses an ACQUIRE), the leases decided by
 * src/limiters/concurrency.ts at the command's time, the state stored when it changed. A release of
 * the last lease deletes the key. Watched keys (waiting ACQUIREs) are marked through the keyspace's
 * WATCH marks, which every change of a key reaches: a write, a delete, expiry, eviction, FLUSH.
 */
import type { Keyspace, WatchOwner, KeyWatch } from '../keyspace/keyspace.js';
import { BLOCK_TYPE, blockRefuses } from '../limiters/block.js';
import { CONCURRENCY_TYPE, leaseAcquire, leaseRelease, newLeaseDecision, recycleBlob, type LeaseDecision } from '../limiters/concurrency.js';
import { newLeaseId } from '../limiters/lease-id.js';
import { MAX_LEASE_ID_BYTES } from '../limiters/lease-limits.js';
import type { Stats } from '../server/stats.js';
import { createKeyArg, lookupKeyArg } from './key-args.js';
import { newLeaseOutcome, type AttemptDone, type LeaseCall, type LeaseOutcome } from './lease-call.js';
import { writeLeaseReply } from './lease-replies.js';
import type { LeaseStore } from './lease-store.js';
import { WRONGTYPE } from './limiter-replies.js';
import type { StoreSink } from './store.js';

/** Reused by every call: nothing allocated per call but a granted lease's id. */
const decision = newLeaseDecision();
const outcome = newLeaseOutcome();
/** The bytes of a lease id the store made. */
const madeId = Buffer.alloc(MAX_LEASE_ID_BYTES);
/** A lookup's answer besides a slot and −1 (absent): another type, WRONGTYPE to answer. */
const OTHER = -2;
/** ... or a block refusing for blockedMs more. */
const BLOCKED = -3;
let blockedMs = 0;

/** One watched key: its mark in the keyspace, whose `dirty` set by a change reports the key freed. */
class FreedMark implements WatchOwner {
  watch: KeyWatch | null = null;
  constructor(
    private readonly store: LocalLeaseStore,
    readonly key: Buffer,
  ) {}
  get dirty(): boolean {
    return false;
  }
  set dirty(v: boolean) {
    if (v) this.store.onFreed?.(this.key);
  }
}

export class LocalLeaseStore implements LeaseStore {
  onFreed: ((key: Buffer) => void) | null = null;
  private readonly marks = new Map<string, FreedMark>();

  constructor(
    readonly keyspace: Keyspace,
    private readonly stats: Stats,
  ) {}

  acquire(call: LeaseCall, sink: StoreSink): void {
    const o = this.decideAcquire(call, sink.nowMs, false);
    const argv = call.argv;
    const i = call.idArg;
    if (o === null) sink.reply.error(WRONGTYPE);
    else if (i !== -1) writeLeaseReply(sink.reply, o, argv.source(i), argv.start(i), argv.end(i));
    else writeLeaseReply(sink.reply, o);
  }

  attempt(call: LeaseCall, nowMs: number, done: AttemptDone): void {
    const o = this.decideAcquire(call, nowMs, true);
    done(o === null ? WRONGTYPE : o);
  }

  release(call: LeaseCall, sink: StoreSink): void {
    this.releaseOrRenew(call, sink, -1);
  }

  renew(call: LeaseCall, sink: StoreSink): void {
    this.releaseOrRenew(call, sink, call.leaseMs);
  }

  watch(key: Buffer): void {
    const name = key.toString('latin1');
    if (this.marks.has(name)) return;
    const mark = new FreedMark(this, key);
    mark.watch = this.keyspace.watch(mark, name, 0);
    this.marks.set(name, mark);
  }

  unwatch(key: Buffer): void {
    const name = key.toString('latin1');
    const mark = this.marks.get(name);
    if (mark === undefined) return;
    this.marks.delete(name);
    if (mark.watch !== null) this.keyspace.unwatch([mark.watch]);
  }

  /** The key's slot (argument 1), −1 when absent, OTHER or BLOCKED. */
  private lookup(call: LeaseCall, nowMs: number): number {
    const ks = this.keyspace;
    const slot = lookupKeyArg(ks, call.argv, 1, nowMs);
    if (slot === -1 || ks.typeOf(slot) === CONCURRENCY_TYPE) return slot;
    if (ks.typeOf(slot) !== BLOCK_TYPE) return OTHER;
    const endMs = ks.expireAtMs(slot);
    if (blockRefuses(endMs, nowMs)) {
      blockedMs = endMs - nowMs;
      return BLOCKED;
    }
    // A block ending now: the key is fresh.
    ks.removeExpired(slot);
    return -1;
  }

  /**
   * ACQUIRE at `nowMs`: the outcome (valid until the next call), or null for WRONGTYPE. Its id is
   * set for a made id, and for a caller's ID only when `idText` (a waiter's reply is written later).
   */
  private decideAcquire(call: LeaseCall, nowMs: number, idText: boolean): LeaseOutcome | null {
    const ks = this.keyspace;
    const slot = this.lookup(call, nowMs);
    if (slot === OTHER) return null;
    const o = outcome;
    o.limit = call.limit;
    if (slot === BLOCKED) {
      o.limited = true;
      o.remaining = 0;
      o.retryAfterMs = o.resetAfterMs = blockedMs;
      o.id = null;
      call.counter?.count(this.stats, true);
      return o;
    }
    const argv = call.argv;
    let bytes: Buffer;
    let start: number;
    let end: number;
    let made = '';
    if (call.idArg !== -1) {
      bytes = argv.source(call.idArg);
      start = argv.start(call.idArg);
      end = argv.end(call.idArg);
    } else {
      made = newLeaseId();
      bytes = madeId;
      start = 0;
      end = madeId.write(made, 0, 'latin1');
    }
    const has = slot !== -1;
    const d = decision;
    leaseAcquire(call.limit, call.leaseMs, has, has ? ks.getA(slot) : 0, has ? ks.getB(slot) : 0, has ? ks.getBlob(slot) : undefined,
      bytes, start, end, nowMs, d);
    if (d.write) store(ks, call, slot, d);
    call.counter?.count(this.stats, d.limited);
    o.limited = d.limited;
    o.remaining = d.remaining;
    o.retryAfterMs = d.retryAfterMs;
    o.resetAfterMs = d.resetAfterMs;
    o.id = d.limited ? null : call.idArg === -1 ? made : idText ? argv.str(call.idArg) : null;
    return o;
  }

  /** RELEASE (renewMs −1) or RENEW: 1 when the lease was live, else 0. */
  private releaseOrRenew(call: LeaseCall, sink: StoreSink, renewMs: number): void {
    const ks = this.keyspace;
    const nowMs = sink.nowMs;
    const slot = this.lookup(call, nowMs);
    if (slot === OTHER) {
      sink.reply.error(WRONGTYPE);
      return;
    }
    if (slot < 0) {
      sink.reply.integer(0);
      return;
    }
    const argv = call.argv;
    const i = call.idArg;
    const d = decision;
    const blob = ks.getBlob(slot);
    leaseRelease(renewMs, true, ks.getA(slot), ks.getB(slot), blob, argv.source(i), argv.start(i), argv.end(i), nowMs, d);
    if (d.write) {
      if (d.count === 0) {
        ks.deleteKey(argv.source(1), argv.start(1), argv.end(1), nowMs);
        recycleBlob(blob);
      } else {
        store(ks, call, slot, d);
      }
    }
    sink.reply.integer(d.found ? 1 : 0);
  }
}

/** Stores the decision's leases in the key (argument 1), creating it if absent. */
function store(ks: Keyspace, call: LeaseCall, slot: number, d: LeaseDecision): void {
  if (slot === -1) slot = createKeyArg(ks, call.argv, 1, CONCURRENCY_TYPE);
  ks.setBlob(slot, d.blob);
  ks.setState(slot, d.count, d.used, 0);
  ks.setExpireAtMs(slot, d.expireAtMs);
}
