/**
 * Sliding window log (`RL.SLIDINGLOG`), exact: a request of cost c is allowed when the units
 * accepted in (now − period_ms, now] plus c are at most `limit`. So no interval of period_ms ever
 * admits more than `limit` units.
 *
 * The log is a ring of (timestamp ms, units) entries in the key's Float64Array blob: entry i is at
 * [2i, 2i+1]. Units accepted in the same millisecond share one entry, so a key never holds more than
 * `limit` entries (16 bytes each), however large the costs. The ring starts at 2 entries and doubles
 * as needed, never beyond `limit`.
 *   A = index of the oldest entry, B = number of entries, C = units in all entries (some of the
 *   oldest may have slid out of the window; they are dropped on the next write).
 * The key expires when its newest entry slides out of the window.
 *
 * `slidingLogDecide` only reads the log; when it allows, `slidingLogRecord` prunes and appends.
 */
import { peekDecision, type RateDecision } from './rate-decision.js';


export function slidingLogDecide(
  limit: number, periodMs: number, cost: number,
  hasKey: boolean, head: number, entries: number, units: number, log: Float64Array | undefined, nowMs: number,
  out: RateDecision,
): void {
  let expiredEntries = 0;
  let expiredUnits = 0;
  let atMs = nowMs;
  let newestMs = -Infinity;
  const capacity = log === undefined ? 0 : log.length >> 1;
  if (hasKey && log !== undefined && entries > 0) {
    newestMs = log[2 * ((head + entries - 1) % capacity)];
    // A clock set backwards (DEBUG CLOCK SET) is treated as no time passing.
    if (newestMs > atMs) atMs = newestMs;
    const cutoffMs = atMs - periodMs;
    while (expiredEntries < entries) {
      const i = 2 * ((head + expiredEntries) % capacity);
      if (log[i] > cutoffMs) break;
      expiredUnits += log[i + 1];
      expiredEntries++;
    }
  }
  const live = hasKey ? units - expiredUnits : 0;
  const spendable = Math.max(0, limit - live);
  const resetAfterMs = live > 0 ? newestMs + periodMs - nowMs : 0;
  if (cost === 0) {
    peekDecision(out, limit, spendable, resetAfterMs);
    return;
  }
  out.limit = limit;
  out.delayMs = 0;
  if (cost <= spendable) {
    out.limited = false;
    out.retryAfterMs = -1;
    out.remaining = spendable - cost;
    out.resetAfterMs = atMs + periodMs - nowMs;
    out.write = true;
    out.expireAtMs = atMs + periodMs;
    return;
  }
  out.limited = true;
  out.write = false;
  out.remaining = spendable;
  out.resetAfterMs = resetAfterMs;
  if (cost > limit) {
    out.retryAfterMs = -1;
    return;
  }
  // Wait until enough of the oldest live units have slid out: entry by entry, oldest first.
  const mustLeave = live + cost - limit;
  let left = 0;
  for (let k = expiredEntries; k < entries; k++) {
    const i = 2 * ((head + k) % capacity);
    left += log![i + 1];
    if (left >= mustLeave) {
      out.retryAfterMs = log![i] + periodMs - nowMs;
      return;
    }
  }
  out.retryAfterMs = -1; // unreachable: live + cost − limit ≤ live
}

/**
 * Records an allowed call that `slidingLogDecide` just decided (same arguments): drops the entries
 * that slid out, appends `cost` units at the decision's time, and returns the log to store (the same
 * array, or a larger one). Writes the new A/B/C into `out`.
 */
export function slidingLogRecord(
  limit: number, periodMs: number, cost: number,
  hasKey: boolean, head: number, entries: number, units: number, log: Float64Array | undefined, nowMs: number,
  out: RateDecision,
): Float64Array {
  let capacity = log === undefined ? 0 : log.length >> 1;
  if (!hasKey || log === undefined || entries === 0) {
    head = 0;
    entries = 0;
    units = 0;
  }
  let whenMs = nowMs;
  if (entries > 0) {
    const newestMs = log![2 * ((head + entries - 1) % capacity)];
    if (newestMs > whenMs) whenMs = newestMs;
    // Drop what slid out of (when − period, when].
    const cutoffMs = whenMs - periodMs;
    while (entries > 0 && log![2 * head] <= cutoffMs) {
      units -= log![2 * head + 1];
      head = (head + 1) % capacity;
      entries--;
    }
  }
  const lastIndex = 2 * ((head + entries - 1) % capacity);
  if (entries > 0 && log![lastIndex] === whenMs) {
    log![lastIndex + 1] += cost;
  } else {
    if (log === undefined || entries === capacity) {
      const bigger = new Float64Array(2 * Math.min(limit, Math.max(2, capacity * 2)));
      for (let k = 0; k < entries; k++) {
        const from = 2 * ((head + k) % capacity);
        bigger[2 * k] = log![from];
        bigger[2 * k + 1] = log![from + 1];
      }
      log = bigger;
      head = 0;
      capacity = bigger.length >> 1;
    }
    const i = 2 * ((head + entries) % capacity);
    log[i] = whenMs;
    log[i + 1] = cost;
    entries++;
  }
  out.a = head;
  out.b = entries;
  out.c = units + cost;
  return log!;
}
