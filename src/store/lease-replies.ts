/**
 * What the concurrency-limit commands answer, written the same way by every store (this process's
 * and the shared backend's).
 */
import type { ReplyWriter } from '../protocol/reply-writer.js';
import type { LeaseOutcome } from './lease-call.js';

/**
 * RL.ACQUIRE's reply: the RL.* shape then the id, RESP2 an array of 7 `[limited, limit, remaining,
 * retry_after_ms, reset_after_ms, delay_ms (0), id]`, RESP3 a map of those names in that order. The id
 * is a bulk string, or null when limited (no lease was granted): `o.id`, or when given the id's bytes
 * `idBytes[idStart, idEnd)` (the caller's ID as received, with no string made for it).
 */
export function writeLeaseReply(r: ReplyWriter, o: LeaseOutcome, idBytes?: Uint8Array, idStart = 0, idEnd = 0): void {
  const map = r.proto === 3;
  if (map) r.mapHeader(7);
  else r.arrayHeader(7);
  if (map) r.bulk('limited');
  r.integer(o.limited ? 1 : 0);
  if (map) r.bulk('limit');
  r.integer(o.limit);
  if (map) r.bulk('remaining');
  r.integer(o.remaining);
  if (map) r.bulk('retry_after_ms');
  r.integer(o.retryAfterMs);
  if (map) r.bulk('reset_after_ms');
  r.integer(o.resetAfterMs);
  if (map) r.bulk('delay_ms');
  r.integer(0);
  if (map) r.bulk('id');
  if (o.limited) r.nullBulk();
  else if (idBytes !== undefined) r.bulkRange(idBytes, idStart, idEnd);
  else r.bulk(o.id!);
}
