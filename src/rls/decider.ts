/**
 * The rate limit service's decision step, behind a narrow interface: the service hands over the
 * limits one request needs (a cache key, an algorithm and its parameters, the hits to add) and gets
 * one outcome per limit. KeyspaceDecider decides in this process's keyspace, the one the RESP
 * commands use (the keys are visible to SCAN, TYPE, TTL, snapshots), with envoyproxy/ratelimit's
 * fixed-window counting or one of cellgate's limiters (src/limiters/).
 */
import { KeyType, type Keyspace } from '../keyspace/keyspace.js';
import { gcraMsDecide, gcraMsParams, newGcraMsParams } from '../limiters/gcra-ms.js';
import { leakyBucketDecide } from '../limiters/leaky-bucket.js';
import { newRateDecision } from '../limiters/rate-decision.js';
import { slidingLogDecide, slidingLogRecord } from '../limiters/sliding-log.js';
import { slidingWindowDecide } from '../limiters/sliding-window.js';
import { tokenBucketDecide } from '../limiters/token-bucket.js';
import type { RlsAlgorithm } from './config.js';

/** One limit of a request, as the decider sees it. */
export interface RlsCall {
  /** The cache key, a binary string (one char per byte, as the keyspace keys it). */
  key: string;
  algorithm: RlsAlgorithm;
  /** requests_per_unit. */
  limit: number;
  /** The unit's length. fixed_window: the key already names the window (envoyproxy/ratelimit's key). */
  periodMs: number;
  burst: number;
  /** Hits to add (0: only look). */
  hits: number;
}

/** What a limit said. */
export interface RlsOutcome {
  over: boolean;
  /** Requests left in the limit after this one (0 when over). */
  remaining: number;
  /** ms until the limit is full again (the algorithms but fixed_window; fixed_window uses the unit). */
  resetAfterMs: number;
  /** fixed_window: the count before and after this request's hits (INCRBY's reply), for the stats. */
  before: number;
  after: number;
}

export function newOutcome(): RlsOutcome {
  return { over: false, remaining: 0, resetAfterMs: 0, before: 0, after: 0 };
}

export interface RlsDecider {
  /**
   * Decides every call at `nowUs` into `out` (same length), then calls `done` with null, or with an
   * Error when the decision could not be made (the request is answered with an error).
   */
  decide(calls: readonly RlsCall[], out: RlsOutcome[], nowUs: number, done: (error: Error | null) => void): void;
}

const TYPE_OF: Record<RlsAlgorithm, KeyType> = {
  fixed_window: KeyType.FixedWindow,
  sliding_window: KeyType.SlidingWindow,
  sliding_log: KeyType.SlidingLog,
  token_bucket: KeyType.TokenBucket,
  leaky_bucket: KeyType.LeakyBucket,
  gcra: KeyType.Gcra,
};

/** Decides in a Keyspace, synchronously. */
export class KeyspaceDecider implements RlsDecider {
  private readonly d = newRateDecision();
  private readonly gcra = newGcraMsParams();

  constructor(private readonly keyspace: () => Keyspace) {}

  decide(calls: readonly RlsCall[], out: RlsOutcome[], nowUs: number, done: (error: Error | null) => void): void {
    const ks = this.keyspace();
    const nowMs = Math.floor(nowUs / 1000);
    for (let i = 0; i < calls.length; i++) {
      const c = calls[i];
      let slot = ks.lookup(c.key, nowMs);
      const type = TYPE_OF[c.algorithm];
      // A key left by another algorithm (the configuration changed it): that state means nothing
      // to this one, so it starts afresh, as a new window would.
      if (slot !== -1 && ks.typeOf(slot) !== type) {
        ks.delete(c.key, nowMs);
        slot = -1;
      }
      if (c.algorithm === 'fixed_window') this.fixedWindow(ks, c, slot, nowMs, out[i]);
      else this.limiter(ks, c, type, slot, nowMs, nowUs, out[i]);
    }
    done(null);
  }

  /**
   * envoyproxy/ratelimit's count: INCRBY hits on the window's key, over the limit or not (an
   * over-limit request still counts), over when the count after it exceeds the limit. State: A =
   * the window's start (ms), B = the count; the key lives until the window ends.
   */
  private fixedWindow(ks: Keyspace, c: RlsCall, slot: number, nowMs: number, o: RlsOutcome): void {
    const windowStartMs = nowMs - (nowMs % c.periodMs);
    const before = slot !== -1 && ks.getA(slot) === windowStartMs ? ks.getB(slot) : 0;
    const after = before + c.hits;
    if (c.hits > 0) {
      if (slot === -1) slot = ks.create(c.key, KeyType.FixedWindow);
      ks.setState(slot, windowStartMs, after, 0);
      ks.setExpireAtMs(slot, windowStartMs + c.periodMs);
    }
    o.before = before;
    o.after = after;
    o.over = after > c.limit;
    o.remaining = o.over ? 0 : c.limit - after;
    o.resetAfterMs = windowStartMs + c.periodMs - nowMs;
  }

  private limiter(ks: Keyspace, c: RlsCall, type: KeyType, slot: number, nowMs: number, nowUs: number, o: RlsOutcome): void {
    const d = this.d;
    const has = slot !== -1;
    const a = has ? ks.getA(slot) : 0;
    const b = has ? ks.getB(slot) : 0;
    const cc = has ? ks.getC(slot) : 0;
    switch (c.algorithm) {
      case 'token_bucket':
        tokenBucketDecide(c.limit, c.periodMs, c.burst, c.hits, has, a, b, nowMs, d);
        break;
      case 'leaky_bucket':
        leakyBucketDecide(c.limit, c.periodMs, c.burst, c.hits, has, a, b, nowMs, d);
        break;
      case 'sliding_window':
        slidingWindowDecide(c.limit, c.periodMs, c.hits, has, a, b, cc, nowMs, d);
        break;
      case 'sliding_log':
        slidingLogDecide(c.limit, c.periodMs, c.hits, has, a, b, cc, has ? ks.getBlob(slot) : undefined, nowMs, d);
        break;
      default:
        gcraMsParams(c.limit, c.periodMs, c.burst, this.gcra);
        gcraMsDecide(this.gcra, c.hits, has, a, b, nowUs, d);
    }
    if (d.write) {
      if (type === KeyType.SlidingLog) {
        const log = slidingLogRecord(c.limit, c.periodMs, c.hits, has, a, b, cc, has ? ks.getBlob(slot) : undefined, nowMs, d);
        if (!has) slot = ks.create(c.key, type);
        ks.setBlob(slot, log);
      } else if (!has) slot = ks.create(c.key, type);
      ks.setState(slot, d.a, d.b, d.c);
      ks.setExpireAtMs(slot, d.expireAtMs);
    }
    o.over = d.limited;
    o.remaining = d.limited ? 0 : d.remaining;
    o.resetAfterMs = d.resetAfterMs;
    o.before = 0;
    o.after = 0;
  }
}
