/**
 * A limiter command parsed: what a LimiterStore decides (src/store/store.ts). The commands fill one
 * record each and reuse it from call to call (nothing allocated per call on the local path); a store
 * that answers after this turn (the shared backend) copies what it keeps (detachCall), as the
 * argument views die with the turn.
 */
import { CommandArgs } from '../protocol/command-args.js';
import type { Algorithm } from '../limiters/algorithm.js';
import type { CellParams } from '../limiters/cell-throttle.js';
import { newGcraMsParams } from '../limiters/gcra-ms.js';
import { newDecision, type Decision } from '../limiters/decision.js';
import type { GcraParams } from '../limiters/redis-gcra.js';
import type { LimiterCounter } from '../server/stats.js';

/** One limit of an RL.* call, parsed (its parameters are the algorithm's LimitParams). Reused between calls. */
export interface Limit {
  /** The algorithm's entry (src/limiters/registry.ts). */
  algo: Algorithm;
  /** The argument holding the key. */
  keyArg: number;
  limit: number;
  periodMs: number;
  burst: number;
  gcra: CellParams;
  /** `FORCE`: recorded even beyond the limit (LimitParams.force). */
  force: boolean;
  /** The key's slot, or −1 when absent (set by the local store). */
  slot: number;
  decision: Decision;
}

export function newLimit(algo: Algorithm): Limit {
  return { algo, keyArg: 1, limit: 0, periodMs: 0, burst: 0, gcra: newGcraMsParams(), force: false, slot: -1, decision: newDecision() };
}

/** The command family: how the key's state is read and the reply written. */
export type CallKind = 'cl.throttle' | 'gcra' | 'rl';

export interface LimiterCall {
  kind: CallKind;
  /** The request's arguments: the keys are read from them, by argument number. */
  argv: CommandArgs;
  /** RL.*: limits[0, count), each naming its key's argument. CL.THROTTLE and GCRA: the key is argument 1. */
  limits: Limit[];
  count: number;
  /** RL.ALL: nothing is spent unless every limit allows; the reply is [limited, reply per limit]. */
  allOrNothing: boolean;
  /** RL.*'s COST (every limit's, for RL.ALL), CL.THROTTLE's quantity; GCRA's is in its parameters. */
  cost: number;
  /** RL.*'s `REFUND n`, 0 when none: units given back, not a decision. */
  refund: number;
  /** CL.THROTTLE's parameters. */
  cell: CellParams | null;
  /** GCRA's parameters (null with lateError). */
  gcra: GcraParams | null;
  /**
   * GCRA: an argument error found, locally, after the key lookup (its overflow errors): a key of
   * another type answers WRONGTYPE first. '' when none.
   */
  lateError: string;
  /** The decision counter (INFO limiter, metrics); null for a refund, which decides nothing. */
  counter: LimiterCounter | null;
}

export function newLimiterCall(kind: CallKind, limits: Limit[]): LimiterCall {
  return {
    kind, argv: new CommandArgs(), limits, count: 1, allOrNothing: false, cost: 1, refund: 0,
    cell: null, gcra: null, lateError: '', counter: null,
  };
}

/**
 * A copy of `call` that outlives this turn: its own limits, and arguments holding only the keys,
 * viewed in `keys[n]` from `skip` on (the backend's prefixed copies: nothing copied twice).
 */
export function detachCall(call: LimiterCall, keys: readonly Buffer[], skip: number): LimiterCall {
  const argv = new CommandArgs();
  const copy: LimiterCall = { ...call, argv, limits: [] };
  if (call.kind !== 'rl') {
    // The key stays argument 1.
    argv.push(keys[0], 0, 0);
    argv.push(keys[0], skip, keys[0].length);
    return copy;
  }
  for (let n = 0; n < call.count; n++) {
    const l = call.limits[n];
    argv.push(keys[n], skip, keys[n].length);
    copy.limits.push({ ...l, keyArg: n, gcra: { ...l.gcra }, slot: -1, decision: newDecision() });
  }
  return copy;
}
