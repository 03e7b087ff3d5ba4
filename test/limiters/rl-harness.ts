/**
 * The RL.* limiters behind a fake one-key keyspace: the same lookup / decide / commit steps
 * src/commands/ratelimit.ts performs, with Redis's expiry rule (a key is gone once now > expireAtMs).
 * Shared by the pure tests in this directory.
 */
import fc from 'fast-check';
import { fixedWindowDecide, fixedWindowRefund } from '../../src/limiters/fixed-window.ts';
import { gcraMsDecide, gcraMsParams, gcraMsRefund, newGcraMsParams } from '../../src/limiters/gcra-ms.ts';
import { leakyBucketDecide, leakyBucketRefund } from '../../src/limiters/leaky-bucket.ts';

import { slidingLogDecide, slidingLogRecord, slidingLogRefund, slidingLogRefunded } from '../../src/limiters/sliding-log.ts';
import { slidingWindowDecide, slidingWindowRefund } from '../../src/limiters/sliding-window.ts';
import { tokenBucketDecide, tokenBucketRefund } from '../../src/limiters/token-bucket.ts';
import { RefundEffect, newDecision, type Decision } from '../../src/limiters/decision.ts';

export type Algo = 'tokenbucket' | 'leakybucket' | 'fixedwindow' | 'slidinglog' | 'slidingwindow' | 'gcra';

export interface Params {
  limit: number;
  periodMs: number;
  /** Capacity (token bucket, leaky bucket, GCRA); equals limit elsewhere. */
  burst: number;
}

/** The six reply fields. */
export interface Reply {
  limited: number;
  limit: number;
  remaining: number;
  retryAfterMs: number;
  resetAfterMs: number;
  delayMs: number;
}

export function replyOf(d: Decision): Reply {
  return {
    limited: d.limited ? 1 : 0, limit: d.limit, remaining: d.remaining,
    retryAfterMs: d.retryAfter, resetAfterMs: d.resetAfter, delayMs: d.delayMs,
  };
}

export class FakeKey {
  exists = false;
  a = 0;
  b = 0;
  c = 0;
  blob: Float64Array | undefined = undefined;
  expireAtMs = 0;
  private readonly d = newDecision();
  private readonly gcra = newGcraMsParams();

  constructor(readonly algo: Algo, readonly p: Params) {
    if (algo === 'gcra' && gcraMsParams(p.limit, p.periodMs, p.burst, this.gcra) !== null) throw new Error('bad GCRA params');
  }

  /** Whether the key exists at `nowMs` (an expired key is deleted, as the keyspace does). */
  lookup(nowMs: number): boolean {
    if (this.exists && nowMs > this.expireAtMs) {
      this.exists = false;
      this.blob = undefined;
    }
    return this.exists;
  }

  /** The decision at `nowMs` (µs precision for GCRA through `nowUs`), without storing anything. */
  decide(cost: number, nowMs: number, nowUs = nowMs * 1000): Decision {
    const has = this.lookup(nowMs);
    const { limit, periodMs, burst } = this.p;
    const d = this.d;
    switch (this.algo) {
      case 'tokenbucket': tokenBucketDecide(limit, periodMs, burst, cost, has, this.a, this.b, nowMs, d); break;
      case 'leakybucket': leakyBucketDecide(limit, periodMs, burst, cost, has, this.a, this.b, nowMs, d); break;
      case 'fixedwindow': fixedWindowDecide(limit, periodMs, cost, has, this.a, this.b, nowMs, d); break;
      case 'slidingwindow': slidingWindowDecide(limit, periodMs, cost, has, this.a, this.b, this.c, nowMs, d); break;
      case 'slidinglog': slidingLogDecide(limit, periodMs, cost, has, this.a, this.b, this.c, this.blob, nowMs, d); break;
      case 'gcra': gcraMsDecide(this.gcra, cost, has, this.a, this.b, nowUs, d); break;
    }
    return d;
  }

  /** One call: decide, then store what the limiter allowed. Returns the reply. */
  call(cost: number, nowMs: number, nowUs = nowMs * 1000): Reply {
    const d = this.decide(cost, nowMs, nowUs);
    if (d.write) {
      if (this.algo === 'slidinglog') {
        this.blob = slidingLogRecord(this.p.limit, this.p.periodMs, cost, this.exists, this.a, this.b, this.c, this.blob, nowMs, d);
      }
      this.exists = true;
      this.a = d.a;
      this.b = d.b;
      this.c = d.c;
      this.expireAtMs = d.expireAtMs;
    }
    return replyOf(d);
  }

  /**
   * `REFUND units` at `nowMs`, as src/commands/ratelimit.ts does it: the pure refund, its effect on
   * the key (store, delete or nothing), then a COST 0 peek for the reply. Returns the reply and the
   * effect.
   */
  refund(units: number, nowMs: number, nowUs = nowMs * 1000): Reply & { effect: RefundEffect } {
    const has = this.lookup(nowMs);
    const { limit, periodMs } = this.p;
    const d = this.d;
    let effect: RefundEffect;
    switch (this.algo) {
      case 'tokenbucket': effect = tokenBucketRefund(limit, periodMs, units, has, this.a, this.b, nowMs, d); break;
      case 'leakybucket': effect = leakyBucketRefund(limit, periodMs, units, has, this.a, this.b, nowMs, d); break;
      case 'fixedwindow': effect = fixedWindowRefund(periodMs, units, has, this.a, this.b, nowMs, d); break;
      case 'slidingwindow': effect = slidingWindowRefund(periodMs, units, has, this.a, this.b, this.c, nowMs, d); break;
      case 'slidinglog':
        effect = slidingLogRefund(periodMs, units, has, this.a, this.b, this.c, this.blob, nowMs, d);
        if (effect === RefundEffect.Write) this.blob = slidingLogRefunded.log;
        break;
      case 'gcra': effect = gcraMsRefund(this.gcra, units, has, this.a, this.b, nowUs, d); break;
    }
    if (effect === RefundEffect.Write) {
      this.a = d.a;
      this.b = d.b;
      this.c = d.c;
      this.expireAtMs = d.expireAtMs;
    } else if (effect === RefundEffect.Delete) {
      this.exists = false;
      this.blob = undefined;
    }
    return { ...replyOf(this.decide(0, nowMs, nowUs)), effect };
  }

  /** PTTL after a call: −2 when there is no key. */
  pttl(nowMs: number): number {
    return this.lookup(nowMs) ? this.expireAtMs - nowMs : -2;
  }
}

/**
 * Checks the properties every algorithm shares, at time `nowMs` right after `reply` was given for a
 * call of `cost` (the key holds the state after that call):
 * - retry_after_ms is exact: one ms earlier the same request is still limited, at it it is allowed;
 * - reset_after_ms is when the state is fresh: a peek then sees a full limiter, and the key's TTL
 *   is reset_after_ms (no key when it is 0).
 * Returns a description of the first violation, or null.
 */
export function checkTimes(key: FakeKey, cost: number, nowMs: number, reply: Reply, full: number): string | null {
  if (reply.limited === 1 && reply.retryAfterMs > 0) {
    if (key.decide(cost, nowMs + reply.retryAfterMs - 1).limited !== true) return `allowed 1 ms before retry_after_ms (${reply.retryAfterMs})`;
    if (key.decide(cost, nowMs + reply.retryAfterMs).limited !== false) return `still limited at retry_after_ms (${reply.retryAfterMs})`;
  }
  if (reply.limited === 1 && reply.retryAfterMs === 0) return 'limited with retry_after_ms 0';
  if (reply.limited === 0 && reply.retryAfterMs !== -1) return 'allowed with retry_after_ms != -1';
  const pttl = key.pttl(nowMs);
  // A key is visible up to and including its expiry ms (as Redis), so a key that just became fresh
  // may still show PTTL 0.
  if (reply.resetAfterMs === 0 ? pttl !== -2 && pttl !== 0 : pttl !== reply.resetAfterMs) return `PTTL ${pttl} != reset_after_ms ${reply.resetAfterMs}`;
  const fresh = replyOf(key.decide(0, nowMs + reply.resetAfterMs));
  if (fresh.remaining !== full || fresh.resetAfterMs !== 0) return `not fresh at reset_after_ms: ${JSON.stringify(fresh)}`;
  if (reply.resetAfterMs > 0) {
    const before = replyOf(key.decide(0, nowMs + reply.resetAfterMs - 1));
    if (before.resetAfterMs === 0) return 'already fresh 1 ms before reset_after_ms';
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// Reference models: each test file gives the textbook definition of its algorithm as `allows`
// (would a request of this cost be allowed at t?), `record` (an allowed request happened at t) and
// `isFresh` (is the state that of a key never used?). Everything else in a reply is derived here by
// brute force, the way docs/algorithms.md words it: remaining = the largest cost allowed now, retry_after_ms =
// the first later millisecond at which the request is allowed, reset_after_ms = the first
// millisecond from now at which the state is fresh.
// ---------------------------------------------------------------------------------------------

export interface Model {
  allows(cost: number, t: number): boolean;
  record(cost: number, t: number): void;
  isFresh(t: number): boolean;
  /** Leaky bucket: ms until an allowed request's turn. */
  delay?(cost: number, t: number): number;
  /** The textbook meaning of giving `units` spent units back at t (docs/algorithms.md, "Refunds"). */
  refund?(units: number, t: number): void;
}

/** The reply the model gives, recording the request when it is allowed. */
export function modelCall(m: Model, capacity: number, cost: number, t: number, horizonMs: number): Reply {
  const limited = cost > 0 && !m.allows(cost, t);
  let retryAfterMs = -1;
  if (limited) {
    for (let w = 1; w <= horizonMs; w++) {
      if (m.allows(cost, t + w)) {
        retryAfterMs = w;
        break;
      }
    }
  }
  const delayMs = !limited && cost > 0 && m.delay ? m.delay(cost, t) : 0;
  if (!limited && cost > 0) m.record(cost, t);
  let remaining = 0;
  while (remaining < capacity && m.allows(remaining + 1, t)) remaining++;
  let resetAfterMs = 0;
  while (!m.isFresh(t + resetAfterMs)) {
    resetAfterMs++;
    if (resetAfterMs > horizonMs) throw new Error('model never fresh');
  }
  return { limited: limited ? 1 : 0, limit: capacity, remaining, retryAfterMs, resetAfterMs, delayMs };
}

export interface Step {
  gapMs: number;
  cost: number;
  /** `REFUND max(cost, 1)` instead of a call of `cost` (the model must have `refund`). */
  refund?: boolean;
}

/**
 * Replays `steps` from `startMs` against the implementation and the model; returns the first
 * disagreement or violated timing property as a message, or null. `onAllowed` sees every admitted
 * request (for invariants over the history).
 */
export function replay(
  algo: Algo, p: Params, model: Model, startMs: number, steps: Step[],
  onAllowed?: (t: number, cost: number) => void,
): string | null {
  const key = new FakeKey(algo, p);
  const capacity = algo === 'tokenbucket' || algo === 'leakybucket' || algo === 'gcra' ? p.burst : p.limit;
  const horizonMs = (capacity + 3) * p.periodMs + 10;
  let t = startMs;
  for (let i = 0; i < steps.length; i++) {
    t += steps[i].gapMs;
    let cost = steps[i].cost;
    let got: Reply;
    let want: Reply;
    if (steps[i].refund === true) {
      const units = Math.max(1, cost);
      const { effect: _effect, ...reply } = key.refund(units, t);
      got = reply;
      model.refund!(units, t);
      // The reply is the state after the refund: a COST 0 peek, with its timing properties.
      cost = 0;
      want = modelCall(model, capacity, 0, t, horizonMs);
    } else {
      got = key.call(cost, t);
      want = modelCall(model, capacity, cost, t, horizonMs);
    }
    if (JSON.stringify(got) !== JSON.stringify(want)) {
      return `step ${i} at +${t - startMs} ms, cost ${cost}: got ${JSON.stringify(got)}, model ${JSON.stringify(want)}`;
    }
    const violation = checkTimes(key, cost, t, got, capacity);
    if (violation !== null) return `step ${i} at +${t - startMs} ms, cost ${cost}: ${violation}`;
    if (got.limited === 0 && cost > 0) onAllowed?.(t, cost);
  }
  return null;
}

export const T0 = 1_800_000_000_000;

/** Parameters kept small so the brute-force model stays fast; `burst` only where it applies. */
export function paramsArb(withBurst: boolean): fc.Arbitrary<Params> {
  return fc.record({ limit: fc.integer({ min: 1, max: 6 }), periodMs: fc.integer({ min: 1, max: 40 }), burst: fc.integer({ min: 1, max: 8 }) })
    .map((p) => (withBurst ? p : { ...p, burst: p.limit }));
}

/** A random timeline: mostly short gaps (bursts), some long ones; costs up to capacity + 1. */
export function timelineArb(p: Params): fc.Arbitrary<{ startMs: number; steps: Step[] }> {
  const capacity = Math.max(p.burst, p.limit);
  const gap = fc.oneof(
    { weight: 3, arbitrary: fc.constant(0) },
    { weight: 5, arbitrary: fc.integer({ min: 1, max: Math.max(1, Math.ceil(p.periodMs / 3)) }) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 3 * p.periodMs }) },
  );
  const cost = fc.oneof({ weight: 6, arbitrary: fc.constant(1) }, { weight: 3, arbitrary: fc.integer({ min: 0, max: capacity + 1 }) });
  return fc.record({
    startMs: fc.integer({ min: 0, max: 10 * p.periodMs }).map((o) => T0 + o),
    steps: fc.array(fc.record({ gapMs: gap, cost }), { minLength: 1, maxLength: 40 }),
  });
}

/** Params, then a timeline for them. */
export function caseArb(withBurst: boolean) {
  return paramsArb(withBurst).chain((p) => timelineArb(p).map((tl) => ({ p, ...tl })));
}

/** Params, then a timeline for them where about one step in four is a REFUND. */
export function refundCaseArb(withBurst: boolean) {
  return paramsArb(withBurst).chain((p) => fc.record({
    tl: timelineArb(p),
    refunds: fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 40, maxLength: 40 }),
  }).map(({ tl, refunds }) => ({ p, startMs: tl.startMs, steps: tl.steps.map((s, i) => ({ ...s, refund: refunds[i] === 0 })) })));
}
