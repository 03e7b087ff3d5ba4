/**
 * The limiter calls decided on this process's keyspace (src/keyspace): synchronous, each answer
 * written at once into the sink. Per call: look the key(s) up (WRONGTYPE for a key of another
 * algorithm), ask the pure limiter in src/limiters/ for a decision, store the new state only when
 * the limiter says so, reply. Nothing is allocated per call. State per key type (fields A/B/C of
 * the keyspace, plus a blob for an algorithm that keeps one) is documented in each limiter module; CL.THROTTLE
 * and GCRA share one TAT per key (A = TAT whole µs, B = extra ns, C = GCRA's exact remainder
 * beyond A when its TAT passes 2^53 µs).
 *
 * A blocked key (RL.BLOCK, src/limiters/block.ts) is met where a key of another type is, on the
 * WRONGTYPE test's mismatch side: every call on it is refused with the block's remaining time and
 * changes nothing, and a key of the call's own type pays nothing for it.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import { KeyspaceFullError, type Keyspace } from '../keyspace/keyspace.js';
import { BLOCK_TYPE, blockedDecision, blockedSeconds, blockRefuses } from '../limiters/block.js';
import { cellThrottle } from '../limiters/cell-throttle.js';
import { newDecision, RefundEffect, type Decision } from '../limiters/decision.js';
import { gcraDecide } from '../limiters/redis-gcra.js';
import { GCRA_KEY } from '../limiters/registry.js';
import type { Stats } from '../server/stats.js';
import { createKeyArg, lookupKeyArg } from './key-args.js';
import type { Limit, LimiterCall } from './limiter-call.js';
import { GCRA_OVERFLOW, replyFive, WRONGTYPE, writeSix } from './limiter-replies.js';
import type { LimiterStore, StoreSink, UnitKeyCheck } from './store.js';

/** The key type of CL.THROTTLE, GCRA and RL.GCRA (they share the TAT). */
const GCRA_TYPE = GCRA_KEY.type;
/** The decision of the CL.THROTTLE or GCRA call being served (an RL.* call has one per limit). */
const gcraFamilyDecision = newDecision();

export class LocalLimiterStore implements LimiterStore {
  constructor(
    readonly keyspace: Keyspace,
    private readonly stats: Stats,
  ) {}

  decide(call: LimiterCall, sink: StoreSink): void {
    if (call.kind === 'cl.throttle') clThrottle(this.keyspace, this.stats, call, sink);
    else if (call.kind === 'gcra') gcra(this.keyspace, this.stats, call, sink);
    else if (call.allOrNothing) rlAll(this.keyspace, this.stats, call, sink);
    else rlSingle(this.keyspace, this.stats, call, sink);
  }

  // One process's calls are one unit already: a transaction runs them in one go, nothing between.
  beginUnit(): void {}
  endUnit(): void {}
  unitKeys(): UnitKeyCheck | null {
    return null;
  }
}

/** A key lookup's answers besides a slot and −1 (absent): the key is blocked (nothing replied yet). */
const BLOCKED = -2;
/** ... or it holds another type, and WRONGTYPE was replied. */
const REPLIED = -3;
/** The ms left of the block otherType last answered BLOCKED for. */
let blockedWaitMs = 0;

/**
 * The key in `slot` holds another type than the call's: BLOCKED while a block refuses, −1 for a block
 * that ends now (removed, as expired: the call finds the key fresh), else REPLIED after WRONGTYPE.
 */
function otherType(ks: Keyspace, sink: StoreSink, slot: number): number {
  if (ks.typeOf(slot) === BLOCK_TYPE) {
    const endMs = ks.expireAtMs(slot);
    if (blockRefuses(endMs, sink.nowMs)) {
      blockedWaitMs = endMs - sink.nowMs;
      return BLOCKED;
    }
    ks.removeExpired(slot);
    return -1;
  }
  sink.reply.error(WRONGTYPE);
  return REPLIED;
}

/** Looks up the key (argument 1) for a GCRA-family command: its slot, −1 when absent, BLOCKED or REPLIED. */
function gcraSlot(ks: Keyspace, sink: StoreSink, argv: CommandArgs): number {
  const slot = lookupKeyArg(ks, argv, 1, sink.nowMs);
  if (slot !== -1 && ks.typeOf(slot) !== GCRA_TYPE) return otherType(ks, sink, slot);
  return slot;
}

/** Stores the decision's TAT (state A/B/C) and expiry, creating the key (argument 1) if needed. */
function storeTat(ks: Keyspace, argv: CommandArgs, slot: number, d: Decision): void {
  if (slot === -1) slot = createKeyArg(ks, argv, 1, GCRA_TYPE);
  ks.setState(slot, d.a, d.b, d.c);
  ks.setExpireAtMs(slot, d.expireAtMs);
}

function clThrottle(ks: Keyspace, stats: Stats, call: LimiterCall, sink: StoreSink): void {
  const argv = call.argv;
  const slot = gcraSlot(ks, sink, argv);
  if (slot < -1) {
    if (slot === BLOCKED) {
      const wait = blockedSeconds(blockedWaitMs);
      call.counter!.count(stats, true);
      replyFive(sink.reply, true, call.cell!.limit, 0, wait, wait);
    }
    return;
  }
  const d = gcraFamilyDecision;
  cellThrottle(call.cell!, call.cost, slot !== -1, slot !== -1 ? ks.getA(slot) : 0, slot !== -1 ? ks.getB(slot) : 0, sink.nowUs, d);
  if (d.write) storeTat(ks, argv, slot, d);
  call.counter!.count(stats, d.limited);
  replyFive(sink.reply, d.limited, d.limit, d.remaining, d.retryAfter, d.resetAfter);
}

function gcra(ks: Keyspace, stats: Stats, call: LimiterCall, sink: StoreSink): void {
  const argv = call.argv;
  const r = sink.reply;
  const slot = gcraSlot(ks, sink, argv);
  if (slot < -1) {
    // An argument error stays one on a blocked key, as on an absent one.
    if (slot === BLOCKED) {
      if (call.lateError !== '') r.error(call.lateError);
      else gcraBlocked(stats, call, sink);
    }
    return;
  }
  if (call.lateError !== '') {
    r.error(call.lateError);
    return;
  }
  const params = call.gcra!;
  const d = gcraFamilyDecision;
  if (slot !== -1) gcraDecide(params, true, ks.getA(slot), sink.nowUs, d, ks.getC(slot));
  else gcraDecide(params, false, 0, sink.nowUs, d);
  if (d.overflow) {
    r.error(`${GCRA_OVERFLOW} TOKENS would cause an overflow`);
    return;
  }
  if (d.write) storeTat(ks, argv, slot, d);
  call.counter!.count(stats, d.limited);
  replyGcra(r, d);
}

/** GCRA's five fields; limit or remaining beyond 2^53 written from the exact bigints. */
function replyGcra(r: ReplyWriter, d: Decision): void {
  if (!d.wide) {
    replyFive(r, d.limited, d.limit, d.remaining, d.retryAfter, d.resetAfter);
    return;
  }
  r.arrayHeader(5);
  r.integer(d.limited ? 1 : 0);
  r.raw(`:${d.wideLimit}\r\n:${d.wideRemaining}\r\n`);
  r.integer(d.retryAfter);
  r.integer(d.resetAfter);
}

/** GCRA on a blocked key: refused, the limit its parameters give (exact beyond 2^53 too). */
function gcraBlocked(stats: Stats, call: LimiterCall, sink: StoreSink): void {
  const params = call.gcra!;
  const d = gcraFamilyDecision;
  d.limited = true;
  d.limit = params.limit;
  d.remaining = 0;
  d.retryAfter = d.resetAfter = blockedSeconds(blockedWaitMs);
  d.wide = params.wide !== null;
  if (params.wide !== null) {
    d.wideLimit = params.wide.limit;
    d.wideRemaining = 0n;
  }
  call.counter!.count(stats, true);
  replyGcra(sink.reply, d);
}

/** lookupLimit's answer when the key is absent or of the limit's type (l.slot is set). */
const FOUND = 0;

/**
 * Finds the key's slot into `l.slot`: FOUND, REPLIED after a WRONGTYPE reply, or BLOCKED with
 * `l.decision` holding the blocked answer (l.slot then is no slot: the limit must not be decided).
 */
function lookupLimit(ks: Keyspace, sink: StoreSink, argv: CommandArgs, l: Limit): number {
  let slot = lookupKeyArg(ks, argv, l.keyArg, sink.nowMs);
  if (slot !== -1 && ks.typeOf(slot) !== l.algo.type) {
    slot = otherType(ks, sink, slot);
    if (slot === REPLIED) return REPLIED;
    if (slot === BLOCKED) {
      blockedLimit(ks, l, blockedWaitMs, sink);
      l.slot = BLOCKED;
      return BLOCKED;
    }
  }
  l.slot = slot;
  return FOUND;
}

/**
 * Fills `l.decision` with the answer of a limit whose key is blocked for `waitMs` more: refused, with
 * the limit the algorithm reports for these parameters (from a peek at a fresh key, which is what
 * each algorithm's reply says its limit is).
 */
function blockedLimit(ks: Keyspace, l: Limit, waitMs: number, sink: StoreSink): void {
  l.slot = -1;
  decide(ks, l, 0, sink.nowMs, sink.nowUs);
  blockedDecision(l.decision, waitMs);
}

/** Asks the limiter; writes nothing. */
function decide(ks: Keyspace, l: Limit, cost: number, nowMs: number, nowUs: number): void {
  const slot = l.slot;
  const algo = l.algo;
  if (slot === -1) {
    algo.decide(l, cost, false, 0, 0, 0, undefined, nowMs, nowUs, l.decision);
    return;
  }
  // C and the blob are read only for an algorithm that uses them (a measurable read, a Map lookup).
  algo.decide(l, cost, true, ks.getA(slot), ks.getB(slot), algo.readsC ? ks.getC(slot) : 0, algo.hasBlob ? ks.getBlob(slot) : undefined, nowMs, nowUs, l.decision);
}

/** Stores what `decide` allowed (call only when `decision.write`). */
function commit(ks: Keyspace, argv: CommandArgs, l: Limit, cost: number, nowMs: number): void {
  const d = l.decision;
  const algo = l.algo;
  let slot = l.slot;
  const has = slot !== -1;
  if (algo.hasBlob) {
    algo.commit(l, cost, has, has ? ks.getA(slot) : 0, has ? ks.getB(slot) : 0, has ? ks.getC(slot) : 0,
      has ? ks.getBlob(slot) : undefined, nowMs, 0, d);
    if (!has) slot = createKeyArg(ks, argv, l.keyArg, algo.type);
    ks.setBlob(slot, d.blob);
  } else if (!has) {
    slot = createKeyArg(ks, argv, l.keyArg, algo.type);
  }
  ks.setState(slot, d.a, d.b, d.c);
  ks.setExpireAtMs(slot, d.expireAtMs);
  l.slot = slot;
}

/**
 * `REFUND n`: gives n units back to the key (docs/algorithms.md, "Refunds"), through the same
 * keyspace writes a decision uses (or a delete, when the key is fresh again), then decides a COST 0
 * peek on the new state into `l.decision`: the reply is the state after the refund. An absent key
 * stays absent.
 */
function refund(ks: Keyspace, sink: StoreSink, argv: CommandArgs, l: Limit, units: number): void {
  const slot = l.slot;
  const algo = l.algo;
  const has = slot !== -1;
  const d = l.decision;
  const effect = algo.refund(l, units, has, has ? ks.getA(slot) : 0, has ? ks.getB(slot) : 0, has ? ks.getC(slot) : 0,
    has && algo.hasBlob ? ks.getBlob(slot) : undefined, sink.nowMs, sink.nowUs, d);
  if (effect === RefundEffect.Write) {
    if (algo.hasBlob) ks.setBlob(slot, d.blob);
    ks.setState(slot, d.a, d.b, d.c);
    ks.setExpireAtMs(slot, d.expireAtMs);
  } else if (effect === RefundEffect.Delete) {
    ks.deleteKey(argv.source(l.keyArg), argv.start(l.keyArg), argv.end(l.keyArg), sink.nowMs);
    l.slot = -1;
  }
  decide(ks, l, 0, sink.nowMs, sink.nowUs);
}

function replySix(sink: StoreSink, d: Decision): void {
  writeSix(sink.reply, d.limited ? 1 : 0, d.limit, d.remaining, d.retryAfter, d.resetAfter, d.delayMs);
}

/** `RL.<algo>`: one limit, a COST or a REFUND. */
function rlSingle(ks: Keyspace, stats: Stats, call: LimiterCall, sink: StoreSink): void {
  const argv = call.argv;
  const l = call.limits[0];
  const found = lookupLimit(ks, sink, argv, l);
  if (found !== FOUND) {
    // Blocked: refused, nothing spent nor given back (a refund is no decision: not counted).
    if (found === BLOCKED) {
      call.counter?.count(stats, true);
      replySix(sink, l.decision);
    }
    return;
  }
  if (call.refund !== 0) {
    // Not a decision: the limiter counters (INFO limiter, metrics) count decisions only.
    refund(ks, sink, argv, l, call.refund);
    replySix(sink, l.decision);
    return;
  }
  const cost = call.cost;
  decide(ks, l, cost, sink.nowMs, sink.nowUs);
  if (l.decision.write) commit(ks, argv, l, cost, sink.nowMs);
  call.counter!.count(stats, l.decision.limited);
  replySix(sink, l.decision);
}

/**
 * RL.ALL: every limit looked up, then decided; spent on all only when none is limited. A blocked
 * key limits the whole call, as a limited one does: its limit answers the block, the others their
 * own decision, and nothing is spent.
 */
/**
 * RL.ALL is all or nothing: when the keys it would create do not fit under the keyspace's bound,
 * it is refused (KeyspaceFullError, the dispatcher's OOM) before any of its keys is written.
 */
function refuseUnlessRoom(ks: Keyspace, limits: readonly Limit[], count: number): void {
  let creates = 0;
  for (let n = 0; n < count; n++) if (limits[n].slot === -1 && limits[n].decision.write) creates++;
  if (creates > 0 && ks.size + creates > ks.maxKeys) throw new KeyspaceFullError(ks.maxKeys);
}

function rlAll(ks: Keyspace, stats: Stats, call: LimiterCall, sink: StoreSink): void {
  const { argv, limits, count, cost } = call;
  let blocked = false;
  for (let n = 0; n < count; n++) {
    const found = lookupLimit(ks, sink, argv, limits[n]);
    if (found !== FOUND) {
      if (found === REPLIED) return;
      blocked = true;
    }
  }
  let limited = blocked;
  for (let n = 0; n < count; n++) {
    if (blocked && limits[n].slot === BLOCKED) continue;
    decide(ks, limits[n], cost, sink.nowMs, sink.nowUs);
    if (limits[n].decision.limited) limited = true;
  }
  if (!limited) {
    refuseUnlessRoom(ks, limits, count);
    for (let n = 0; n < count; n++) if (limits[n].decision.write) commit(ks, argv, limits[n], cost, sink.nowMs);
  }
  call.counter!.count(stats, limited);
  const r = sink.reply;
  r.arrayHeader(count + 1);
  r.integer(limited ? 1 : 0);
  for (let n = 0; n < count; n++) replySix(sink, limits[n].decision);
}
