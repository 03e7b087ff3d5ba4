/**
 * What an `RL.*` algorithm is, as one value (src/limiters/registry.ts lists them): its names, its
 * key type tag, its op code in the backend's Lua script and that script's fragment, the parameters it
 * accepts, its decision over a key's state, the rules of a stored state, and its text for COMMAND DOCS
 * and the warm-up. The command layer, the script, the snapshot and journal checks and the warm-up all
 * read the entry, so an algorithm is described in its own limiter file and listed once.
 *
 * Every step has the same signature over the key's state (fields A, B, C and the optional blob):
 * a call site holds one `Algorithm` and calls through it, with no switch on the type and no
 * allocation.
 */
import type { CellParams } from './cell-throttle.js';
import { MAX_SCALED } from './rate-decision.js';
import type { Decision, RefundEffect } from './decision.js';

/** One limit's parameters, as the command parsed them (ratelimit.ts's limits satisfy it). */
export interface LimitParams {
  limit: number;
  periodMs: number;
  burst: number;
  /** RL.GCRA's derived intervals (filled by checkParams); unused by the other algorithms. */
  gcra: CellParams;
  /**
   * `FORCE`: a charge made after the fact, recorded even beyond the limit (as debt, each algorithm's
   * way); the reply still says limited when it did not fit. False: a refused call spends nothing.
   */
  force: boolean;
}

/** Why a limit's parameters are refused beyond each number's own range (ratelimit.ts words the error). */
export enum ParamsProblem {
  None = 0,
  /** BURST · period_ms above MAX_SCALED (the buckets' capacity in scaled units). */
  BurstProduct = 1,
  /** limit · period_ms above MAX_SCALED (the windows' budget in scaled units). */
  LimitProduct = 2,
  /** RL.GCRA: more than 10^9 per second, an emission interval of 0 ns. */
  ZeroInterval = 3,
  /** RL.GCRA: a burst tolerance beyond 100 years. */
  ToleranceOverflow = 4,
}

/**
 * A decision step over a key's state: `has` says whether the key exists (then a, b, c and, for an
 * algorithm with `hasBlob`, blob are its state), times are passed in (ms, and µs for the GCRA).
 */
export type StateStep<R> = (
  p: LimitParams, units: number, has: boolean, a: number, b: number, c: number, blob: Float64Array | undefined,
  nowMs: number, nowUs: number, out: Decision,
) => R;

/** An op of the backend's limiter script: its code in the script's ARGV and its branch of `decide`. */
export interface ScriptOp {
  /** The op code byte (ASCII letter; an RL.* REFUND sends it uppercase). */
  op: string;
  /**
   * The op's branch of the script's `decide`, byte for byte (the `--@decide` section of the
   * algorithm's .lua file); '' when the op shares another op's branch.
   */
  luaDecide: string;
  /** The op's branch of the script's REFUND (the `--@refund` section); '' when it has none of its own. */
  luaRefund: string;
  /** The reply: six integer fields in ms (RL.*), or five in seconds (CL.THROTTLE, GCRA). */
  reply: 'rl-ms' | 'throttle-seconds';
}

export interface Algorithm extends ScriptOp {
  /** The name after `RL.` (and RL.ALL's ALGO), uppercase. */
  name: string;
  /** What TYPE answers for its keys, lowercase. */
  typeName: string;
  /** Its name in configuration files, lowercase words joined by `_` (the Envoy rate limit service's `algorithm`). */
  configName: string;
  /** The key's type tag: the keyspace's type, the snapshot's and the journal's type byte. Never reused. */
  type: number;
  acceptsBurst: boolean;
  /** The largest `limit` accepted. */
  maxLimit: number;
  /** Whether decide reads field C (read only then: a keyspace read per call is measurable). */
  readsC: boolean;
  /** Whether the state has a blob besides A, B, C (read and stored only then). */
  hasBlob: boolean;
  /**
   * Checks the parameters together (each is already in range) and derives what the decision needs
   * (RL.GCRA's intervals into `gcraOut`).
   */
  checkParams(limit: number, periodMs: number, burst: number, gcraOut: CellParams): ParamsProblem;
  /** Decides a call of cost `units` (0: a peek); the state to store, when `out.write`, goes in `out`. */
  decide: StateStep<void>;
  /**
   * Completes an allowed decision's state before it is stored: a blob algorithm puts the blob to store
   * in `out.blob` (undefined: none). Called only for an algorithm with `hasBlob`.
   */
  commit: StateStep<void>;
  /** Gives `units` spent units back (REFUND n); a blob algorithm's new blob goes in `out.blob`. */
  refund: StateStep<RefundEffect>;
  /**
   * What is wrong with a stored state (a snapshot's or journal's entry of this type, its expiry
   * already checked), or null.
   */
  stateProblem(expireAtMs: number, a: number, b: number, c: number, blob: Float64Array | undefined): string | null;
  /** COMMAND DOCS: the summary (the reply's shape is appended) and the complexity. */
  summary: string;
  complexity: string;
  /** The warm-up's call, the arguments after the key (src/server/warmup.ts). */
  warmupArgs: readonly string[];
}

/** x is an integer in [min, max] (a stored state's field). */
export function isIntIn(x: number, min: number, max: number): boolean {
  return Number.isInteger(x) && x >= min && x <= max;
}

/** checkParams of the buckets: the capacity BURST · period_ms (scaled units) must be exact. */
export function burstProduct(limit: number, periodMs: number, burst: number): ParamsProblem {
  return burst * periodMs > MAX_SCALED ? ParamsProblem.BurstProduct : ParamsProblem.None;
}

/** checkParams of the windows: the budget limit · period_ms (scaled units) must be exact. */
export function limitProduct(limit: number, periodMs: number): ParamsProblem {
  return limit * periodMs > MAX_SCALED ? ParamsProblem.LimitProduct : ParamsProblem.None;
}

/** commit of an algorithm without a blob: the decision's A, B, C are the whole state. */
export function noCommit(): void {}

/**
 * stateProblem of the millisecond meters (buckets and windows): A = a time in ms, at most the expiry;
 * B = a count or deficit in [0, MAX_SCALED]; C = a second count in that range when `cIsCount`, else 0.
 */
export function meterStateProblem(name: string, cIsCount: boolean, expireAtMs: number, a: number, b: number, c: number): string | null {
  if (!isIntIn(a, 0, expireAtMs)) return `${name} time ${a} ms is not an integer in [0, expiry ${expireAtMs}]`;
  if (!isIntIn(b, 0, MAX_SCALED)) return `${name} state B ${b} is not an integer in [0, 2^52]`;
  if (cIsCount ? !isIntIn(c, 0, MAX_SCALED) : c !== 0) {
    return cIsCount ? `${name} previous count ${c} is not an integer in [0, 2^52]` : `${name} state C is ${c}, expected 0`;
  }
  return null;
}

/**
 * The sections of an algorithm's .lua file (embedded by scripts/embed-lua.mjs): each starts at a
 * marker line `--@decide` or `--@refund` and runs to the next marker; the marker lines are not part
 * of the script. A missing section is ''.
 */
export function luaSections(text: string): { luaDecide: string; luaRefund: string } {
  const sections: Record<string, string> = { decide: '', refund: '' };
  const parts = text.split(/^--@(decide|refund)\n/m);
  if (parts[0] !== '') throw new Error('an algorithm\'s .lua file must start with a --@decide or --@refund line');
  for (let i = 1; i < parts.length; i += 2) sections[parts[i]] = parts[i + 1];
  return { luaDecide: sections.decide, luaRefund: sections.refund };
}
