/**
 * The rate limit service's decision step, behind a narrow interface: the service hands over the
 * limits one request needs (a cache key, an algorithm and its parameters, the hits to add) and gets
 * one outcome per limit. StoreDecider (store-decider.ts) decides through the limiter store the RESP
 * commands use.
 */
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
  /** The limit allows debt (`allow_debt`): the hits are recorded even beyond it (COST n FORCE). */
  force: boolean;
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
