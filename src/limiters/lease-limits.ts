/**
 * The bounds of concurrency limits (RL.ACQUIRE / RL.RELEASE / RL.RENEW), shared by the commands, the
 * stores (this process's keyspace and the shared backend), the persistence checks and the docs
 * (docs/concurrency.md). A key holds at most `limit` live leases, each with an id of at most
 * MAX_LEASE_ID_BYTES bytes, so a key's memory is bounded by MAX_LEASE_LIMIT × the largest lease.
 */

/** The largest `limit` of RL.ACQUIRE: every call over a key scans its leases, so this bounds its cost too. */
export const MAX_LEASE_LIMIT = 10_000;
/** The longest lease id (ACQUIRE's `ID`, RELEASE's and RENEW's `id`), in bytes; at least 1. */
export const MAX_LEASE_ID_BYTES = 64;
/**
 * The longest lease (`lease_ms`, ACQUIRE and RENEW): 2^40 ms, some 34 years, so now + lease_ms stays an
 * exact integer far below 2^53 whatever the (debug) clock says.
 */
export const MAX_LEASE_MS = 2 ** 40;
/** The longest WAIT (`timeout_ms`; 0 waits without end, as BLPOP's 0): 2^31 − 1 ms, Node's longest timer. */
export const MAX_WAIT_MS = 2 ** 31 - 1;
/** The length of a lease id the server makes (16 lowercase hex digits). */
export const SERVER_ID_LENGTH = 16;
