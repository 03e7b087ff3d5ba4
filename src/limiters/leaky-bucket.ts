/**
 * Leaky bucket as a queue (`RL.LEAKYBUCKET`): nginx's `limit_req` without `nodelay`. At most
 * `burst` accepted requests wait or are being served; one drains every `period_ms / limit` ms
 * (the drain interval I). An accepted request is told `delay_ms`, the wait until its turn; it holds
 * its place until its turn plus one drain interval. A request that finds no free place is refused
 * and spends nothing. `RL.LEAKYBUCKET k 5 1000 BURST 6` ≡ `limit_req rate=5r/s burst=5`.
 *
 * Exact scheme: with Q the instant the queue is empty again (last turn + I), the state is the
 * backlog Q − t scaled by `limit` (so one place is worth `period_ms` scaled units):
 *   A = time of the last write (ms), B = backlog in scaled units (0 ≤ B ≤ burst·period_ms).
 * Places taken = ⌈B / period_ms⌉; the next request's turn is in ⌈B / limit⌉ ms. This is the token
 * bucket's deficit exactly (the meter is the same; only the reply differs), so the decision is the
 * token bucket's plus the delay. A request with COST n takes n consecutive places; its delay is the
 * wait until the first of them comes up.
 */
import { ceilDiv, MAX_SCALED } from './rate-decision.js';
import { type Decision } from './decision.js';
import { burstProduct, meterStateProblem, noCommit, type Algorithm } from './algorithm.js';
import { drainedDeficit, tokenBucketDecide, tokenBucketRefund } from './token-bucket.js';

/**
 * Frees `units` queued places (the backlog shrinks by units·period_ms, never below empty): the token
 * bucket's refund, as the meter is the same.
 */
export const leakyBucketRefund = tokenBucketRefund;

export function leakyBucketDecide(
  limit: number, periodMs: number, burst: number, cost: number,
  hasKey: boolean, a: number, b: number, nowMs: number, out: Decision, force = false,
): void {
  // A forced charge that did not fit is told it was limited (and queued as debt): no delay.
  tokenBucketDecide(limit, periodMs, burst, cost, hasKey, a, b, nowMs, out, force);
  if (out.limited || cost === 0 || !hasKey) return;
  // After a clock set backwards the queue is read at its last write (atMs): the turn comes that much
  // later than now.
  const atMs = a > nowMs ? a : nowMs;
  out.delayMs = atMs - nowMs + ceilDiv(drainedDeficit(b, a, atMs, limit), limit);
}

/** `RL.LEAKYBUCKET`: the script runs it in the token bucket's branch (op 'l' there adds the delay). */
export const leakyBucket: Algorithm = {
  name: 'LEAKYBUCKET', typeName: 'leakybucket', configName: 'leaky_bucket', type: 3, op: 'l', luaDecide: '', luaRefund: '', reply: 'rl-ms',
  acceptsBurst: true, maxLimit: MAX_SCALED, readsC: false, hasBlob: false,
  checkParams: burstProduct,
  decide: (p, cost, has, a, b, _c, _blob, nowMs, _nowUs, out) => leakyBucketDecide(p.limit, p.periodMs, p.burst, cost, has, a, b, nowMs, out, p.force),
  commit: noCommit,
  refund: (p, units, has, a, b, _c, _blob, nowMs, _nowUs, out) => leakyBucketRefund(p.limit, p.periodMs, units, has, a, b, nowMs, out),
  stateProblem: (expireAtMs, a, b, c) => meterStateProblem('leakybucket', false, expireAtMs, a, b, c),
  summary: 'Leaky bucket as a queue (nginx limit_req): at most BURST waiting, one drained every period_ms/limit; replies delay_ms.',
  complexity: 'O(1)',
  warmupArgs: ['100', '60000', 'BURST', '10'],
};
