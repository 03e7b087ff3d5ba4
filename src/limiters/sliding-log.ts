/**
 * Sliding window log (`RL.SLIDINGLOG`), exact: a request of cost c is allowed when the units
 * accepted in (now − period_ms, now] plus c are at most `limit`. So no interval of period_ms ever
 * admits more than `limit` units.
 *
 * The log is a list of (timestamp ms, units) entries, oldest first. Units accepted in the same
 * millisecond share one entry, so a key never holds more than `limit` entries, however large the
 * costs. Two layouts, chosen on every write:
 * - one entry (the common case for a mostly idle key) lives in the state fields, no blob:
 *     A = its timestamp, B = 1, C = its units;
 * - two or more live in a ring in the key's Float64Array blob, entry i at [2i, 2i+1] (16 bytes):
 *     A = ring index of the oldest entry, B = number of entries, C = units in all entries.
 *   The ring starts at 2 entries and doubles as needed, never beyond `limit`; when a write leaves a
 *   single live entry the key goes back to the inline layout and the blob is dropped.
 * Entries that slid out of the window are dropped on the next write (a refused call or a peek writes
 * nothing). The key expires when its newest entry slides out of the window.
 *
 * `slidingLogDecide` only reads the log; when it allows, `slidingLogRecord` prunes and appends.
 */
import { peekDecision, type RateDecision } from './rate-decision.js';

/**
 * The largest sliding log limit: the log keeps up to `limit` 16-byte entries per key (the snapshot
 * loader bounds a stored log by it too).
 */
export const MAX_SLIDING_LOG_LIMIT = 1_000_000;

// A view of the log being read, set by `load` (module scratch: no allocation per call).
let viewLog: Float64Array | undefined;
let viewHead = 0;
let viewCapacity = 0;
let inlineMs = 0;
let inlineUnits = 0;

/** Points the view at a key's log and returns its number of entries. */
function load(hasKey: boolean, a: number, b: number, c: number, log: Float64Array | undefined): number {
  viewLog = log;
  viewHead = 0;
  viewCapacity = 0;
  if (!hasKey || b === 0) return 0;
  if (log === undefined) {
    inlineMs = a;
    inlineUnits = c;
    return 1;
  }
  viewHead = a;
  viewCapacity = log.length >> 1;
  return b;
}

/** Timestamp of the k-th oldest entry. */
function msAt(k: number): number {
  return viewLog === undefined ? inlineMs : viewLog[2 * ((viewHead + k) % viewCapacity)];
}

/** Units of the k-th oldest entry. */
function unitsAt(k: number): number {
  return viewLog === undefined ? inlineUnits : viewLog[2 * ((viewHead + k) % viewCapacity) + 1];
}

/**
 * Decides one call. `a`, `b`, `c` and `log` are the key's state fields and blob (see above); `hasKey`
 * whether it exists.
 */
export function slidingLogDecide(
  limit: number, periodMs: number, cost: number,
  hasKey: boolean, a: number, b: number, c: number, log: Float64Array | undefined, nowMs: number,
  out: RateDecision,
): void {
  const entries = load(hasKey, a, b, c, log);
  let expiredEntries = 0;
  let expiredUnits = 0;
  let atMs = nowMs;
  let newestMs = -Infinity;
  if (entries > 0) {
    newestMs = msAt(entries - 1);
    // A clock set backwards (DEBUG CLOCK SET) is treated as no time passing.
    if (newestMs > atMs) atMs = newestMs;
    const cutoffMs = atMs - periodMs;
    while (expiredEntries < entries && msAt(expiredEntries) <= cutoffMs) {
      expiredUnits += unitsAt(expiredEntries);
      expiredEntries++;
    }
  }
  const live = entries > 0 ? c - expiredUnits : 0;
  const spendable = Math.max(0, limit - live);
  const resetAfterMs = live > 0 ? newestMs + periodMs - nowMs : 0;
  out.delayMs = 0;
  if (cost === 0) {
    peekDecision(out, limit, spendable, resetAfterMs);
  } else if (cost <= spendable) {
    out.limit = limit;
    out.limited = false;
    out.retryAfterMs = -1;
    out.remaining = spendable - cost;
    out.resetAfterMs = atMs + periodMs - nowMs;
    out.write = true;
    out.expireAtMs = atMs + periodMs;
  } else {
    out.limit = limit;
    out.limited = true;
    out.write = false;
    out.remaining = spendable;
    out.resetAfterMs = resetAfterMs;
    out.retryAfterMs = -1; // COST above limit: never
    if (cost <= limit) {
      // Wait until enough of the oldest live units have slid out: entry by entry, oldest first.
      const mustLeave = live + cost - limit;
      let left = 0;
      for (let k = expiredEntries; k < entries; k++) {
        left += unitsAt(k);
        if (left >= mustLeave) {
          out.retryAfterMs = msAt(k) + periodMs - nowMs;
          break;
        }
      }
    }
  }
  viewLog = undefined;
}

/**
 * Records an allowed call that `slidingLogDecide` just decided (same arguments): drops the entries
 * that slid out, appends `cost` units at the decision's time, writes the new A/B/C into `out` and
 * returns the blob to store: undefined for the inline layout, else the same ring or a larger one.
 */
export function slidingLogRecord(
  limit: number, periodMs: number, cost: number,
  hasKey: boolean, a: number, b: number, c: number, log: Float64Array | undefined, nowMs: number,
  out: RateDecision,
): Float64Array | undefined {
  const entries = load(hasKey, a, b, c, log);
  let units = entries > 0 ? c : 0;
  let whenMs = nowMs;
  if (entries > 0 && msAt(entries - 1) > whenMs) whenMs = msAt(entries - 1);
  const cutoffMs = whenMs - periodMs;
  let first = 0;
  while (first < entries && msAt(first) <= cutoffMs) {
    units -= unitsAt(first);
    first++;
  }
  const live = entries - first;
  const merge = live > 0 && msAt(entries - 1) === whenMs;
  const after = merge ? live : live + 1;
  out.c = units + cost;
  out.b = after;
  let result: Float64Array | undefined;
  if (after === 1) {
    // One entry: inline, no blob.
    out.a = whenMs;
    result = undefined;
  } else if (log !== undefined && after <= viewCapacity) {
    // In place: advance the head past what slid out, then merge or append.
    const head = (viewHead + first) % viewCapacity;
    viewHead = head;
    if (merge) log[2 * ((head + live - 1) % viewCapacity) + 1] += cost;
    else {
      const i = 2 * ((head + live) % viewCapacity);
      log[i] = whenMs;
      log[i + 1] = cost;
    }
    out.a = head;
    result = log;
  } else {
    // A new ring, twice the old one (at least 2 entries, at most limit), oldest entry at 0.
    const capacity = Math.min(limit, Math.max(2, 2 * viewCapacity, after));
    const ring = new Float64Array(2 * capacity);
    for (let k = first; k < entries; k++) {
      ring[2 * (k - first)] = msAt(k);
      ring[2 * (k - first) + 1] = unitsAt(k);
    }
    if (merge) ring[2 * (live - 1) + 1] += cost;
    else {
      ring[2 * live] = whenMs;
      ring[2 * live + 1] = cost;
    }
    out.a = 0;
    result = ring;
  }
  viewLog = undefined;
  return result;
}
