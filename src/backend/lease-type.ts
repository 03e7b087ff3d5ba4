/**
 * The type tag of a concurrency-lease value on the backend: the local key type's tag
 * (src/limiters/concurrency.ts), so TYPE and the snapshot tooling name it the same everywhere.
 */
export const BACKEND_LEASE_TYPE = 8;
