/**
 * Redis's gcraCommand (src/gcra.c) after argument parsing, every step in BigInt microseconds, with
 * its three overflow checks and Redis's key expiry: the reference both GCRA test files compare the
 * limiter with (the everyday ranges in cell-throttle.test.ts, the whole 64-bit range in
 * redis-gcra-range.test.ts).
 */
export const LLONG_MAX = 2n ** 63n - 1n;

export type GcraReferenceReply =
  | { limited: number; limit: bigint; remaining: bigint; retryAfterSec: number; resetAfterSec: number }
  | 'tokens-overflow'
  | 'burst-overflow';

export class GcraReferenceKey {
  tat: bigint | null = null;
  expireAtMs = 0n;

  call(burst: bigint, tokensPerPeriod: bigint, period: number, tokens: bigint, nowUs: bigint): GcraReferenceReply {
    const nowMs = nowUs / 1000n;
    if (this.tat !== null && nowMs > this.expireAtMs) this.tat = null;
    const now = nowMs * 1000n; // commandTimeSnapshot() * 1000
    const maxBurst = burst < LLONG_MAX ? burst + 1n : burst;
    let emission = BigInt(Math.trunc((period * 1e6) / Number(tokensPerPeriod) + 0.5));
    if (emission === 0n) emission = 1n;
    if (emission > LLONG_MAX / tokens) return 'tokens-overflow';
    if (emission > LLONG_MAX / maxBurst) return 'burst-overflow';
    const variance = emission * maxBurst;
    const increment = emission * tokens;
    const tat = this.tat ?? now;
    const base = now > tat ? now : tat;
    if (LLONG_MAX - base < increment) return 'tokens-overflow';
    const newTat = base + increment;
    const diff = now - (newTat - variance);
    let limited = 0;
    let retry = -1;
    let ttl: bigint;
    if (diff < 0n) {
      limited = 1;
      if (increment <= variance) retry = Math.ceil(Number(-diff) / 1e6);
      ttl = tat - now;
    } else {
      ttl = newTat - now;
      this.tat = newTat;
      this.expireAtMs = newTat / 1000n;
    }
    const next = variance - ttl;
    const remaining = next > -emission ? next / emission : 0n; // C division truncates toward zero
    return { limited, limit: maxBurst, remaining, retryAfterSec: retry, resetAfterSec: Math.ceil(Number(ttl) / 1e6) + 0 };
  }

  /** PTTL after the call at `nowUs`: −2 when there is no key. */
  pttl(nowUs: bigint): number {
    return this.tat === null ? -2 : Number(this.expireAtMs - nowUs / 1000n);
  }
}
