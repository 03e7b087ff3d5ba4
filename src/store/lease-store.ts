/**
 * Where concurrency limits are decided (docs/concurrency.md): this process's keyspace
 * (src/store/local-leases.ts) or the shared backend (src/backend/backend-leases.ts), picked at start
 * with the LimiterStore (store.ts). The commands (src/commands/leases.ts) parse each call into a
 * LeaseCall and hand it here with a sink; the waiters of `RL.ACQUIRE ... WAIT`
 * (src/commands/lease-waiters.ts) retry through `attempt` whenever `onFreed` says a slot may have
 * freed, and when the earliest lease ends.
 */
import type { AttemptDone, LeaseCall } from './lease-call.js';
import type { StoreSink } from './store.js';

export interface LeaseStore {
  /**
   * RL.ACQUIRE: grants a lease if fewer than `limit` are live (re-acquiring the id of a live lease
   * renews it instead, never a second slot). Writes the reply (writeLeaseReply) into the sink, at
   * once or deferred; WRONGTYPE for a key of another type; a blocked key (RL.BLOCK) is limited.
   */
  acquire(call: LeaseCall, sink: StoreSink): void;
  /** RL.RELEASE: replies 1 when that live lease was released (the last one deletes the key), else 0. */
  release(call: LeaseCall, sink: StoreSink): void;
  /** RL.RENEW: replies 1 when the live lease now ends leaseMs from now, 0 when it is gone. */
  renew(call: LeaseCall, sink: StoreSink): void;
  /**
   * A waiting ACQUIRE's attempt: decides `call` (a copy that outlives the command: detachLeaseCall)
   * as acquire does at time `nowMs`, and hands the outcome to `done` (at once or later), writing no
   * reply; the outcome is read during `done` only (a store may reuse it). Called by the waiters
   * only, never inside a transaction. It may throw synchronously (KeyspaceFullError): the waiter
   * gets the error.
   */
  attempt(call: LeaseCall, nowMs: number, done: AttemptDone): void;
  /**
   * From watch(key) until unwatch(key), the store calls onFreed(key) when a slot of `key` may have
   * freed: a lease released, the key deleted, flushed, evicted, expired, or changed from elsewhere
   * (another sidecar on the backend). Spurious calls are fine (the waiters retry and wait again);
   * a missed one is not. A lease that ends by time alone need not be reported: the waiters retry at
   * the outcome's retryAfterMs. `key` is the key as the client named it (no backend prefix).
   */
  watch(key: Buffer): void;
  unwatch(key: Buffer): void;
  onFreed: ((key: Buffer) => void) | null;
}
