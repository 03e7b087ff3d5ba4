/**
 * The reply of `RL.ACQUIRE` in any shape a connection library gives it: the six `RL.*` fields then
 * the lease's id (RESP2 an array of seven, nil id when refused; RESP3 a map with `id` last, which
 * ioredis's legacy mapping flattens into `[name, value, ...]`, node-redis makes an object, others a
 * `Map`). Kept apart from index.ts: one reply shape per file.
 */
import { CellgateArgumentError, CellgateError } from './errors.js';

/** `RL.ACQUIRE`'s answer: a rate-limiter decision whose `id` is the lease held (null when refused). */
export interface Lease {
  limited: boolean;
  limit: number;
  /** Slots free after this call. */
  remaining: number;
  /** −1 when granted; else ms until the earliest live lease ends (a slot frees then at the latest). */
  retryAfterMs: number;
  /** ms until every live lease has ended (the key's expiry). */
  resetAfterMs: number;
  /** The lease's id (the caller's `id`, or one the server made); null when refused. */
  id: string | null;
}

const NAMES = ['limited', 'limit', 'remaining', 'retry_after_ms', 'reset_after_ms', 'delay_ms', 'id'] as const;

function bad(reply: unknown): CellgateError {
  return new CellgateError(`unexpected RL.ACQUIRE reply: ${JSON.stringify(reply, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v instanceof Map ? Object.fromEntries(v) : Buffer.isBuffer(v) ? v.toString('latin1') : v))}`);
}

function int(v: unknown, reply: unknown): number {
  const n = typeof v === 'number' ? v : typeof v === 'bigint' || typeof v === 'string' ? Number(v) : NaN;
  if (!Number.isFinite(n)) throw bad(reply);
  return n;
}

function id(v: unknown, reply: unknown): string | null {
  if (v === null || v === undefined) return null;
  if (typeof v === 'string') return v;
  if (Buffer.isBuffer(v)) return v.toString('latin1');
  throw bad(reply);
}

export function leaseFrom(reply: unknown): Lease {
  let values: unknown[];
  if (Array.isArray(reply) && reply.length === 7) values = reply;
  else if (Array.isArray(reply) && reply.length === 14) {
    const byName = new Map<string, unknown>();
    for (let i = 0; i < 14; i += 2) byName.set(String(reply[i]), reply[i + 1]);
    values = NAMES.map((n) => byName.get(n));
  } else if (reply instanceof Map) values = NAMES.map((n) => reply.get(n));
  else if (reply !== null && typeof reply === 'object' && !Array.isArray(reply)) values = NAMES.map((n) => (reply as Record<string, unknown>)[n]);
  else throw bad(reply);
  const limited = int(values[0], reply) === 1;
  const lease: Lease = {
    limited,
    limit: int(values[1], reply),
    remaining: int(values[2], reply),
    retryAfterMs: int(values[3], reply),
    resetAfterMs: int(values[4], reply),
    id: id(values[6], reply),
  };
  if (!limited && lease.id === null) throw bad(reply);
  return lease;
}

export function checkId(id: unknown): void {
  if (typeof id !== 'string' || id.length === 0) throw new CellgateArgumentError('id', `invalid id '${String(id)}': must be a non-empty string`);
}
