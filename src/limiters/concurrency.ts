/**
 * Concurrency limits (RL.ACQUIRE, RL.RELEASE, RL.RENEW): a key holds leases, each an id and the
 * instant it ends; at most `limit` may be live at once. A key type of its own beside the
 * algorithms' (its tag in snapshots, the journal and the backend's values), decided here over the
 * key's state with the time passed in; the store (src/store/local-leases.ts) looks the key up and
 * stores what these functions leave.
 *
 * State: A = the number of leases stored, B = the words of the blob they use, C = 0; the leases live in
 * the key's Float64Array blob, in the order they end (earliest first), each a record of
 *
 *     [end ms, header, w0 .. w(k−1), header]        header = id length + 128 · hash24(id)
 *
 * the id's bytes packed 6 to a word (big-endian, each word < 2^48, an exact double), k = ⌈length/6⌉;
 * the header stays below 2^31, so a walk reads its length with one integer mask.
 * The header at both ends lets a walk step either way: ended leases leave from the front, a new
 * lease (the same lease_ms as the others, usually) goes in from the back, both in O(1) usually; an
 * id is found by one forward walk comparing headers (the hash makes a false match rare). The blob
 * keeps spare words past B (zeros), grown by doubling and shrunk when a quarter full, so an
 * ACQUIRE allocates only when the key grows.
 *
 * A lease is live while now < end: its slot is free at its end instant. The key expires at the
 * latest end, where (as every key at its expiry instant) it still shows to TYPE with a PTTL of 0
 * while every lease in it has ended.
 *
 * Memory per key ∝ its leases: at most MAX_LEASE_LIMIT live ones of at most MAX_LEASE_ID_BYTES, plus
 * ended ones not yet dropped, which a call drops before deciding; a key is thus bounded by the
 * largest limit it was asked with.
 */
import { MAX_LEASE_ID_BYTES, MAX_LEASE_LIMIT } from './lease-limits.js';

/** The key type: its tag (never reused) and what TYPE answers. */
export const CONCURRENCY_TYPE = 8;
export const CONCURRENCY_TYPE_NAME = 'concurrency';

/** Bytes packed in one word of an id. */
const BYTES_PER_WORD = 6;
/** The header's length field: ids are at most 64 bytes, below this. */
const LENGTH_SPAN = 128;
/** The words of a record beside its id's: end, header, header. */
const RECORD_OVERHEAD = 3;
/** The words of the largest record. */
export const MAX_RECORD_WORDS = RECORD_OVERHEAD + Math.ceil(MAX_LEASE_ID_BYTES / BYTES_PER_WORD);
/** The smallest blob, in words: a few leases of short ids. */
const MIN_CAPACITY = 16;
/** The largest blob, in words: MAX_LEASE_LIMIT leases of the longest ids (growth stops there). */
export const MAX_BLOB_WORDS = MAX_LEASE_LIMIT * MAX_RECORD_WORDS;

/**
 * Smallest blobs of deleted keys, zeroed, for the next new key: a key used by one lease at a time is
 * created and deleted by every ACQUIRE and RELEASE, and a typed array costs more to make than the
 * rest of the call. Bounded: at most POOL_SIZE × 128 bytes.
 */
const pool: Float64Array[] = [];
const POOL_SIZE = 256;

/** Gives the blob of a key just deleted (no one else holds it) to the next new key. */
export function recycleBlob(blob: Float64Array | undefined): void {
  if (blob === undefined || blob.length !== MIN_CAPACITY || pool.length >= POOL_SIZE) return;
  zero(blob, 0, MIN_CAPACITY);
  pool.push(blob);
}

/** The words of the record whose header is `header`. */
export function recordWords(header: number): number {
  return RECORD_OVERHEAD + ((((header & (LENGTH_SPAN - 1)) + BYTES_PER_WORD - 1) / BYTES_PER_WORD) | 0);
}

/** The header of the id `bytes[start, end)`: its length and 24 bits of its FNV-1a hash. */
export function leaseHeader(bytes: Uint8Array, start: number, end: number): number {
  let h = 0x811c9dc5;
  for (let i = start; i < end; i++) h = Math.imul(h ^ bytes[i], 0x01000193);
  return (end - start) + LENGTH_SPAN * (h >>> 8);
}

/** Word j of the id `bytes[start, end)`. */
function idWord(bytes: Uint8Array, start: number, end: number, j: number): number {
  let w = 0;
  const from = start + j * BYTES_PER_WORD;
  const to = Math.min(end, from + BYTES_PER_WORD);
  for (let i = from; i < to; i++) w = w * 256 + bytes[i];
  // A short last word is padded on the right, as the full ones are read.
  for (let i = to; i < from + BYTES_PER_WORD; i++) w *= 256;
  return w;
}

/** The offset of the record holding the id `bytes[start, end)` among the first `used` words, or −1. */
export function findLease(blob: Float64Array, used: number, bytes: Uint8Array, start: number, end: number): number {
  const header = leaseHeader(bytes, start, end);
  const k = Math.ceil((end - start) / BYTES_PER_WORD);
  for (let p = 0; p < used; p += recordWords(blob[p + 1])) {
    if (blob[p + 1] !== header) continue;
    let j = 0;
    while (j < k && blob[p + 2 + j] === idWord(bytes, start, end, j)) j++;
    if (j === k) return p;
  }
  return -1;
}

/** The id of the record at `p`, as a binary string (one char per byte): checks and tests. */
export function leaseIdAt(blob: Float64Array, p: number): string {
  const length = blob[p + 1] & (LENGTH_SPAN - 1);
  let s = '';
  for (let i = 0; i < length; i++) {
    const word = blob[p + 2 + Math.floor(i / BYTES_PER_WORD)];
    const shift = BYTES_PER_WORD - 1 - (i % BYTES_PER_WORD);
    s += String.fromCharCode(Math.floor(word / 256 ** shift) % 256);
  }
  return s;
}

/**
 * What a lease call leaves (one record, reused: nothing allocated per call): the key's state to
 * store when `write` (`count` leases in `used` words of `blob`, expiring at `expireAtMs`; count 0:
 * delete the key), and the reply's fields.
 */
export interface LeaseDecision {
  limited: boolean;
  /** ACQUIRE: whether the id was a live lease's, renewed. RELEASE/RENEW: whether the lease was live. */
  found: boolean;
  remaining: number;
  retryAfterMs: number;
  resetAfterMs: number;
  write: boolean;
  count: number;
  used: number;
  blob: Float64Array | undefined;
  expireAtMs: number;
}

export function newLeaseDecision(): LeaseDecision {
  return { limited: false, found: false, remaining: 0, retryAfterMs: -1, resetAfterMs: 0, write: false, count: 0, used: 0, blob: undefined, expireAtMs: 0 };
}

/**
 * Moves `blob[from, to)` to start at `at`, overlapping or not, and zeros the words left behind past
 * the new end when moving down. A loop for the few words a key of a few leases moves: a native
 * copyWithin costs more to call than it copies then.
 */
function move(blob: Float64Array, at: number, from: number, to: number): void {
  const n = to - from;
  if (n > 64) {
    blob.copyWithin(at, from, to);
  } else if (at < from) {
    for (let i = 0; i < n; i++) blob[at + i] = blob[from + i];
  } else {
    for (let i = n - 1; i >= 0; i--) blob[at + i] = blob[from + i];
  }
}

/** Zeros blob[from, to). */
function zero(blob: Float64Array, from: number, to: number): void {
  if (to - from > 64) blob.fill(0, from, to);
  else for (let i = from; i < to; i++) blob[i] = 0;
}

/** Drops the leases ended at `nowMs` from the front of `out`'s state (count, used, blob), in place. */
function dropEnded(out: LeaseDecision, nowMs: number): void {
  const blob = out.blob;
  if (blob === undefined) return;
  let p = 0;
  let dropped = 0;
  while (p < out.used && blob[p] <= nowMs) {
    p += recordWords(blob[p + 1]);
    dropped++;
  }
  if (dropped === 0) return;
  move(blob, 0, p, out.used);
  zero(blob, out.used - p, out.used);
  out.used -= p;
  out.count -= dropped;
  out.write = true;
}

/** Removes the record at `p` from `out`'s state, in place. */
function removeAt(out: LeaseDecision, p: number): void {
  const blob = out.blob!;
  const w = recordWords(blob[p + 1]);
  move(blob, p, p + w, out.used);
  zero(blob, out.used - w, out.used);
  out.used -= w;
  out.count--;
  out.write = true;
}

/** Puts the lease (id `bytes[start, end)`, ending at `endMs`) in its place by end, growing the blob if needed. */
function insert(out: LeaseDecision, endMs: number, bytes: Uint8Array, start: number, end: number): void {
  const header = leaseHeader(bytes, start, end);
  const w = recordWords(header);
  let blob = out.blob;
  const used = out.used;
  if (blob === undefined && w <= MIN_CAPACITY && pool.length > 0) blob = pool.pop()!;
  if (blob === undefined || used + w > blob.length) {
    // Doubling: an ACQUIRE allocates only when the key grows past its blob.
    const grown = new Float64Array(Math.min(MAX_BLOB_WORDS, Math.max(MIN_CAPACITY, 2 * (used + w))));
    if (blob !== undefined) grown.set(blob.subarray(0, used));
    blob = grown;
  }
  // From the back: the new lease usually ends last.
  let p = used;
  while (p > 0) {
    const prev = p - recordWords(blob[p - 1]);
    if (blob[prev] <= endMs) break;
    p = prev;
  }
  move(blob, p + w, p, used);
  blob[p] = endMs;
  blob[p + 1] = header;
  const k = w - RECORD_OVERHEAD;
  for (let j = 0; j < k; j++) blob[p + 2 + j] = idWord(bytes, start, end, j);
  blob[p + w - 1] = header;
  out.blob = blob;
  out.used = used + w;
  out.count++;
  out.write = true;
}

/** A blob a quarter full gives half back (a key that held many leases and holds few now). */
function shrink(out: LeaseDecision): void {
  const blob = out.blob;
  if (blob === undefined || blob.length <= MIN_CAPACITY || 4 * out.used > blob.length) return;
  const smaller = new Float64Array(Math.max(MIN_CAPACITY, blob.length >>> 1));
  smaller.set(blob.subarray(0, out.used));
  out.blob = smaller;
}

/** Fills the expiry and the reply's waits from `out`'s state (at least one lease live). */
function timesOf(out: LeaseDecision, nowMs: number): void {
  const blob = out.blob!;
  const lastEnd = blob[out.used - recordWords(blob[out.used - 1])];
  out.expireAtMs = lastEnd;
  out.resetAfterMs = lastEnd - nowMs;
}

/** Loads the key's state into `out` (has: the key exists with count, used, blob). */
function load(out: LeaseDecision, has: boolean, count: number, used: number, blob: Float64Array | undefined): void {
  out.limited = false;
  out.found = false;
  out.write = false;
  out.retryAfterMs = -1;
  out.remaining = 0;
  out.resetAfterMs = 0;
  out.count = has ? count : 0;
  out.used = has ? used : 0;
  out.blob = has ? blob : undefined;
  out.expireAtMs = 0;
}

/**
 * RL.ACQUIRE over a key's state: the id `bytes[start, end)` (the caller's or one the store made)
 * renews its live lease, or takes a slot if fewer than `limit` leases are live, the lease ending
 * `leaseMs` from `nowMs`; else limited, retrying when the earliest live lease ends. A limited call
 * writes only when it dropped ended leases (the same live state, smaller).
 */
export function leaseAcquire(
  limit: number, leaseMs: number, has: boolean, count: number, used: number, blob: Float64Array | undefined,
  bytes: Uint8Array, start: number, end: number, nowMs: number, out: LeaseDecision,
): void {
  load(out, has, count, used, blob);
  dropEnded(out, nowMs);
  const endMs = nowMs + leaseMs;
  const at = out.count > 0 ? findLease(out.blob!, out.used, bytes, start, end) : -1;
  if (at !== -1) {
    out.found = true;
    removeAt(out, at);
    insert(out, endMs, bytes, start, end);
  } else if (out.count < limit) {
    insert(out, endMs, bytes, start, end);
  } else {
    out.limited = true;
    out.remaining = 0;
    out.retryAfterMs = out.blob![0] - nowMs;
    timesOf(out, nowMs);
    return;
  }
  out.remaining = Math.max(0, limit - out.count);
  timesOf(out, nowMs);
}

/**
 * RL.RELEASE (renewMs −1) or RL.RENEW (the lease then ends `renewMs` from `nowMs`) of the id
 * `bytes[start, end)`: `found` says whether it was a live lease. A release of the last live lease
 * leaves count 0: the key is deleted.
 */
export function leaseRelease(
  renewMs: number, has: boolean, count: number, used: number, blob: Float64Array | undefined,
  bytes: Uint8Array, start: number, end: number, nowMs: number, out: LeaseDecision,
): void {
  load(out, has, count, used, blob);
  dropEnded(out, nowMs);
  const at = out.count > 0 ? findLease(out.blob!, out.used, bytes, start, end) : -1;
  if (at !== -1) {
    out.found = true;
    removeAt(out, at);
    if (renewMs >= 0) insert(out, nowMs + renewMs, bytes, start, end);
  }
  if (out.count === 0) {
    out.blob = undefined;
    out.used = 0;
    return;
  }
  if (out.write) shrink(out);
  timesOf(out, nowMs);
}

/**
 * What is wrong with a stored concurrency state (a snapshot's or journal's entry, its expiry already
 * checked), or null: the records must parse to exactly A leases in B words, ended in order, the last
 * at the expiry, ids of 1..64 bytes, distinct, packed words, and zeros past B.
 */
export function leaseStateProblem(expireAtMs: number, a: number, b: number, c: number, blob: Float64Array | undefined): string | null {
  if (blob === undefined) return 'a concurrency key without leases';
  if (!Number.isInteger(a) || a < 1 || a > MAX_LEASE_LIMIT) return `concurrency lease count ${a} is not an integer in [1, ${MAX_LEASE_LIMIT}]`;
  if (blob.length > MAX_BLOB_WORDS) return `concurrency leases of ${blob.length} words, more than ${MAX_BLOB_WORDS}`;
  if (!Number.isInteger(b) || b < 1 || b > blob.length) return `concurrency used words ${b} is not an integer in [1, ${blob.length}]`;
  if (c !== 0) return `concurrency state C is ${c}, expected 0`;
  const ids = new Set<string>();
  let p = 0;
  let n = 0;
  let prevEnd = -Infinity;
  while (p < b) {
    const header = blob[p + 1];
    if (p + 1 >= b || !Number.isInteger(header) || header < 0 || header >= LENGTH_SPAN * 2 ** 24) return `concurrency lease ${n}: a bad header`;
    const length = header & (LENGTH_SPAN - 1);
    if (length < 1 || length > MAX_LEASE_ID_BYTES) return `concurrency lease ${n}: an id of ${length} bytes`;
    const w = recordWords(header);
    if (p + w > b || blob[p + w - 1] !== header) return `concurrency lease ${n}: its record runs past the leases or its headers differ`;
    const endMs = blob[p];
    if (!Number.isInteger(endMs) || endMs < 0 || endMs < prevEnd || endMs > expireAtMs) {
      return `concurrency lease ${n}: end ${endMs} is not an integer in order up to the expiry ${expireAtMs}`;
    }
    for (let j = 2; j < w - 1; j++) {
      const word = blob[p + j];
      if (!Number.isInteger(word) || word < 0 || word >= 2 ** 48) return `concurrency lease ${n}: id word ${word} is not 6 bytes`;
    }
    const id = leaseIdAt(blob, p);
    const bytes = Buffer.from(id, 'latin1');
    if (leaseHeader(bytes, 0, bytes.length) !== header) return `concurrency lease ${n}: its header does not match its id`;
    if (ids.has(id)) return `concurrency lease ${n}: id stored twice`;
    ids.add(id);
    prevEnd = endMs;
    p += w;
    n++;
  }
  if (n !== a) return `concurrency lease count ${a}, but ${n} leases stored`;
  if (prevEnd !== expireAtMs) return `concurrency key expiry ${expireAtMs} is not its last lease's end ${prevEnd}`;
  for (let i = b; i < blob.length; i++) if (blob[i] !== 0) return 'concurrency spare words are not zero';
  return null;
}
