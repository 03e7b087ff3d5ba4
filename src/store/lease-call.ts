/**
 * A concurrency-limit command parsed (RL.ACQUIRE, RL.RELEASE, RL.RENEW): what a LeaseStore
 * (lease-store.ts) decides. As with LimiterCall, the command fills one record per command and reuses
 * it from call to call; a store that answers after this turn copies what it keeps (the argument
 * views die with the turn).
 */
import { CommandArgs } from '../protocol/command-args.js';
import type { LimiterCounter } from '../server/stats.js';

export type LeaseOp = 'acquire' | 'release' | 'renew';

export interface LeaseCall {
  op: LeaseOp;
  /** The request's arguments: the key is argument 1, the id argument `idArg`. */
  argv: CommandArgs;
  /** ACQUIRE: at most this many live leases on the key, 1 ≤ limit ≤ MAX_LEASE_LIMIT. */
  limit: number;
  /** ACQUIRE and RENEW: the lease ends this many ms from now, 1 ≤ leaseMs ≤ MAX_LEASE_MS. */
  leaseMs: number;
  /**
   * The argument holding the lease id (1..MAX_LEASE_ID_BYTES bytes, any bytes): ACQUIRE's `ID`,
   * RELEASE's and RENEW's `id` (argument 2). −1: ACQUIRE without ID, the store makes one (newLeaseId).
   */
  idArg: number;
  /**
   * ACQUIRE's `WAIT timeout_ms` (0: no end), −1 without WAIT. Stores never wait: a waiting ACQUIRE
   * is retried by the waiters (src/commands/lease-waiters.ts) through LeaseStore.attempt.
   */
  waitMs: number;
  /** The decision counter (INFO limiter, metrics): ACQUIRE only (RELEASE and RENEW decide nothing), else null. */
  counter: LimiterCounter | null;
}

export function newLeaseCall(op: LeaseOp): LeaseCall {
  return { op, argv: new CommandArgs(), limit: 0, leaseMs: 0, idArg: -1, waitMs: -1, counter: null };
}

/**
 * An ACQUIRE's answer, as a waiting ACQUIRE's attempt gets it (LeaseStore.attempt) and as the reply
 * writes it (writeLeaseReply): the RL.* fields, then the id.
 */
export interface LeaseOutcome {
  limited: boolean;
  /** The call's limit. */
  limit: number;
  /** Leases that could still be granted now: limit − live leases (after this grant), at least 0. */
  remaining: number;
  /** Granted: −1. Limited: ms until the earliest live lease ends (its slot frees then), at least 1. */
  retryAfterMs: number;
  /** ms until every live lease has ended: the key's expiry (0 when limited on no lease: never, as limit ≥ 1). */
  resetAfterMs: number;
  /** Granted: the lease's id (the caller's ID or one the store made), a binary string. Limited: null. */
  id: string | null;
}

export function newLeaseOutcome(): LeaseOutcome {
  return { limited: false, limit: 0, remaining: 0, retryAfterMs: -1, resetAfterMs: 0, id: null };
}

/** A waiting ACQUIRE's attempt answered: its outcome, or an error reply's text (WRONGTYPE, a backend error...). */
export type AttemptDone = (outcome: LeaseOutcome | string) => void;

/**
 * A copy of `call` that outlives this turn (a waiting ACQUIRE, a backend call): its own arguments,
 * holding the command name, the key and, when given, the id (argument 2 of the copy).
 */
export function detachLeaseCall(call: LeaseCall): LeaseCall {
  const argv = new CommandArgs();
  const parts = [Buffer.from(call.argv.buffer(0)), Buffer.from(call.argv.buffer(1))];
  if (call.idArg !== -1) parts.push(Buffer.from(call.argv.buffer(call.idArg)));
  argv.setBuffers(parts);
  return { ...call, argv, idArg: call.idArg === -1 ? -1 : 2 };
}
