/**
 * The rate limit service's decision step, behind a narrow interface: the service hands over the
 * limits one request needs (a cache key, an algorithm and its parameters, the hits to add) and gets
 * one outcome per limit. KeyspaceDecider decides in this process's keyspace, the one the RESP
 * commands use (the keys are visible to SCAN, TYPE, TTL, snapshots), with envoyproxy/ratelimit's
 * fixed-window counting or one of cellgate's limiters (src/limiters/).
 */
import { KeyType, type Keyspace } from '../keyspace/keyspace.js';
import type { Algorithm, LimitParams } from '../limiters/algorithm.js';
import { newGcraMsParams } from '../limiters/gcra-ms.js';
import { newRateDecision } from '../limiters/rate-decision.js';
import { ALGORITHMS } from '../limiters/registry.js';
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

function algorithm(name: string): Algorithm {
  const a = ALGORITHMS.find((x) => x.name === name);
  if (a === undefined) throw new Error(`no RL.${name} algorithm`);
  return a;
}

/** cellgate's algorithms by the configuration's names (fixed_window is counted here, as envoyproxy/ratelimit does). */
const ALGO: Record<Exclude<RlsAlgorithm, 'fixed_window'>, Algorithm> = {
  sliding_window: algorithm('SLIDINGWINDOW'),
  sliding_log: algorithm('SLIDINGLOG'),
  token_bucket: algorithm('TOKENBUCKET'),
  leaky_bucket: algorithm('LEAKYBUCKET'),
  gcra: algorithm('GCRA'),
};

/** Decides in a Keyspace, synchronously. */
export class KeyspaceDecider implements RlsDecider {
  private readonly d = newRateDecision();
  private readonly params: LimitParams = { limit: 0, periodMs: 0, burst: 0, gcra: newGcraMsParams() };

  constructor(private readonly keyspace: () => Keyspace) {}

  decide(calls: readonly RlsCall[], out: RlsOutcome[], nowUs: number, done: (error: Error | null) => void): void {
    const ks = this.keyspace();
    const nowMs = Math.floor(nowUs / 1000);
    for (let i = 0; i < calls.length; i++) {
      const c = calls[i];
      const algo = c.algorithm === 'fixed_window' ? null : ALGO[c.algorithm];
      let slot = ks.lookup(c.key, nowMs);
      // A key left by another algorithm (the configuration changed it): that state means nothing
      // to this one, so it starts afresh, as a new window would.
      if (slot !== -1 && ks.typeOf(slot) !== (algo === null ? KeyType.FixedWindow : algo.type)) {
        ks.delete(c.key, nowMs);
        slot = -1;
      }
      if (algo === null) this.fixedWindow(ks, c, slot, nowMs, out[i]);
      else this.limiter(ks, c, algo, slot, nowMs, nowUs, out[i]);
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

  /** One of cellgate's algorithms, through its registry entry, as an RL.* call decides and stores. */
  private limiter(ks: Keyspace, c: RlsCall, algo: Algorithm, slot: number, nowMs: number, nowUs: number, o: RlsOutcome): void {
    const d = this.d;
    const p = this.params;
    p.limit = c.limit;
    p.periodMs = c.periodMs;
    p.burst = c.burst;
    // Checked when the configuration loaded; this derives RL.GCRA's intervals.
    algo.checkParams(c.limit, c.periodMs, c.burst, p.gcra);
    const has = slot !== -1;
    const a = has ? ks.getA(slot) : 0;
    const b = has ? ks.getB(slot) : 0;
    const cc = has && algo.readsC ? ks.getC(slot) : 0;
    const blob = has && algo.hasBlob ? ks.getBlob(slot) : undefined;
    algo.decide(p, c.hits, has, a, b, cc, blob, nowMs, nowUs, d);
    if (d.write) {
      if (algo.hasBlob) {
        algo.commit(p, c.hits, has, a, b, has ? ks.getC(slot) : 0, blob, nowMs, nowUs, d);
        if (!has) slot = ks.create(c.key, algo.type);
        ks.setBlob(slot, d.blob);
      } else if (!has) slot = ks.create(c.key, algo.type);
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
