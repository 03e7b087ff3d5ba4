/**
 * What the limiter commands answer, written the same way whether the decision was taken locally
 * (src/commands/throttle.ts, src/commands/ratelimit.ts) or by the shared backend
 * (src/commands/backend-limiter.ts), which all import it from here.
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
