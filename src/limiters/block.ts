/**
 * A block (`RL.BLOCK key ms`): a key refused outright for a while, whatever limiter asks about it,
 * then fresh. It is a key type of its own beside the algorithms' (its tag in snapshots, the journal
 * and the backend's values), with no state: A = B = C = 0 and no blob; the key's expiry is the
 * block's end.
 *
 * A block ends at its expiry instant: a call at `nowMs < expireAtMs` is refused, one at
 * `nowMs >= expireAtMs` finds the key fresh. The keyspace keeps a key visible through its expiry
 * instant (as Redis does), so at that last millisecond TYPE still says `block` with a PTTL of 0,
 * while a limiter call already treats the key as absent: the same instant at which every algorithm's
 * state reads as fresh (its key expires when it is full again). So `retry_after` and `reset_after`
 * are both the key's PTTL, as for every algorithm, and a block of `ms` refuses for exactly `ms`.
 *
 * Every limiter command answers a blocked key on its key-type mismatch path (its WRONGTYPE test),
 * so a key of the command's own type pays nothing for blocks existing.
 */
import type { Decision } from './decision.js';

/** The block's key type: its tag (never reused) and what TYPE answers. */
export const BLOCK_TYPE = 7;
export const BLOCK_TYPE_NAME = 'block';

/** Whether a block that ends at `expireAtMs` still refuses at `nowMs`. */
export function blockRefuses(expireAtMs: number, nowMs: number): boolean {
  return nowMs < expireAtMs;
}

/**
 * Fills `out` for an `RL.*` call on a blocked key: refused, nothing remaining, nothing written,
 * both waits the block's remaining `waitMs`. `out.limit` is left as the caller set it (the limit the
 * algorithm reports for the call's parameters).
 */
export function blockedDecision(out: Decision, waitMs: number): void {
  out.limited = true;
  out.remaining = 0;
  out.retryAfter = waitMs;
  out.resetAfter = waitMs;
  out.delayMs = 0;
  out.write = false;
}

/**
 * The block's remaining `waitMs` in the seconds CL.THROTTLE and GCRA reply with: rounded up, as both
 * round a wait that is not a whole second (redis-cell adds one for a leftover ms, Redis's GCRA takes
 * the ceiling): a client that waits that long finds the block over.
 */
export function blockedSeconds(waitMs: number): number {
  return Math.ceil(waitMs / 1000);
}

/** What is wrong with a stored block (a snapshot's or journal's entry), or null. */
export function blockStateProblem(a: number, b: number, c: number): string | null {
  if (a !== 0 || b !== 0 || c !== 0) return `block state ${a}, ${b}, ${c}, expected 0, 0, 0`;
  return null;
}
