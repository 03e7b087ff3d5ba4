/**
 * What the limiter commands answer, written the same way by every store: this process's
 * (src/store/local-limiter.ts), the shared backend's (src/backend/backend-limiter.ts) and its
 * policy's (src/store/policy-limiter.ts).
 */
import type { ReplyWriter } from '../protocol/reply-writer.js';

export const WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value';

/** A CL.THROTTLE / GCRA reply: five integers (also the backend's replies). */
export function replyFive(r: ReplyWriter, limited: boolean, limit: number, remaining: number, retry: number, reset: number): void {
  r.arrayHeader(5);
  r.integer(limited ? 1 : 0);
  r.integer(limit);
  r.integer(remaining);
  r.integer(retry);
  r.integer(reset);
}

/** An RL.* reply: six integers in RESP2, a map with their names in RESP3 (also the backend's replies). */
export function writeSix(r: ReplyWriter, limited: number, limit: number, remaining: number, retryAfterMs: number, resetAfterMs: number, delayMs: number): void {
  if (r.proto === 3) {
    r.mapHeader(6);
    r.bulk('limited');
    r.integer(limited);
    r.bulk('limit');
    r.integer(limit);
    r.bulk('remaining');
    r.integer(remaining);
    r.bulk('retry_after_ms');
    r.integer(retryAfterMs);
    r.bulk('reset_after_ms');
    r.integer(resetAfterMs);
    r.bulk('delay_ms');
    r.integer(delayMs);
  } else {
    r.arrayHeader(6);
    r.integer(limited);
    r.integer(limit);
    r.integer(remaining);
    r.integer(retryAfterMs);
    r.integer(resetAfterMs);
    r.integer(delayMs);
  }
}

/** The start of Redis's GCRA overflow errors (then `TOKENS` or `max_burst` ` would cause an overflow`). */
export const GCRA_OVERFLOW = 'ERR GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and';
