/**
 * Sliding window log (`RL.SLIDINGLOG`), exact: a request of cost c is allowed when the units
 * accepted in (now − period_ms, now] plus c are at most `limit`. So no interval of period_ms ever
 * admits more than `limit` units.
 *
 * The log is a list of (timestamp ms, units) entries, oldest first, timestamps strictly increasing.
 * Units accepted in the same millisecond share one entry, so a key never holds more than `limit`
 * entries, however large the costs. Two layouts, chosen on every write:
 * - one entry (the common case for a mostly idle key) lives in the state fields, no blob:
 *     A = its timestamp, B = 1, C = its units;
 * - two or more live in a ring in the key's Float64Array blob, entry i at [2i, 2i+1] (16 bytes):
 *     A = ring index of the oldest entry, B = number of entries, C = units in all entries;
 *   each entry holds its timestamp and a running total: the units of this entry and of every older
 *   one, plus an offset (the newest entry's total minus C, ≥ 0). Running totals, not units per entry,
 *   so that a call that writes nothing (a refusal, a COST 0 peek) finds by (galloping) binary search
 *   both where the live entries begin and when enough units will have slid out: O(log n), however
 *   long the log.
 *   The ring starts at 2 entries and doubles as needed, never beyond `limit`; when a write leaves a
 *   single live entry the key goes back to the inline layout and the blob is dropped.
 * Entries that slid out of the window are dropped on the next write (a refused call or a peek writes
 * nothing). The key expires when its newest entry slides out of the window.
 *
 * A ring written by an older build held units per entry; `load` recognises it (its newest value is
 * then below C, which a running total never is) and rewrites it as running totals, once.
 *
 * `slidingLogDecide` only reads the log; when it allows, `slidingLogRecord` prunes and appends.
 *
 * A forced charge (`COST n FORCE`) is logged even when it does not fit. Only the newest `limit` units
 * of a log can ever matter (a call is allowed when the live units plus its cost are at most `limit`,
 * and the oldest slide out first): so a log driven past the limit keeps its newest entries holding
 * exactly `limit` units, the oldest of them in part (C = limit; the running totals' offset absorbs
 * the part dropped). Every later decision is the one the whole log would give, and a key still holds
 * at most `limit` units and entries. A REFUND after such a charge gives back from what was kept.
 */
import { MAX_SCALED } from './rate-decision.js';
import { peekDecision, RefundEffect, type Decision } from './decision.js';
import { limitProduct, luaSections, type Algorithm } from './algorithm.js';
import { lua } from './sliding-log.lua.js';

/**
 * The largest sliding log limit: the log keeps up to `limit` 16-byte entries per key (the snapshot
 * loader bounds a stored log by it too).
 */
export const MAX_SLIDING_LOG_LIMIT = 1_000_000;

// A view of the log being read, set by `load` (module scratch: no allocation per call).
let viewLog: Float64Array | undefined;
let viewHead = 0;
let viewCapacity = 0;
/** What the ring's running totals count before its oldest entry. */
let viewOffset = 0;
let inlineMs = 0;
let inlineUnits = 0;

/** Points the view at a key's log and returns its number of entries. */
function load(hasKey: boolean, a: number, b: number, c: number, log: Float64Array | undefined): number {
  viewLog = log;
  viewHead = 0;
  viewCapacity = 0;
  viewOffset = 0;
  if (!hasKey || b === 0) return 0;
  if (log === undefined) {
    inlineMs = a;
    inlineUnits = c;
    return 1;
  }
  viewHead = a;
  viewCapacity = log.length >> 1;
  let newestTotal = log[2 * ((a + b - 1) % viewCapacity) + 1];
  if (newestTotal < c) newestTotal = toRunningTotals(log, a, b, viewCapacity);
  viewOffset = newestTotal - c;
  return b;
}

/** Rewrites a ring of units per entry (an older build's layout) as running totals; returns the last. */
function toRunningTotals(log: Float64Array, head: number, entries: number, capacity: number): number {
  let total = 0;
  for (let k = 0; k < entries; k++) {
    const i = 2 * ((head + k) % capacity) + 1;
    total += log[i];
    log[i] = total;
  }
  return total;
}

/** Timestamp of the k-th oldest entry. */
function msAt(k: number): number {
  return viewLog === undefined ? inlineMs : viewLog[2 * ((viewHead + k) % viewCapacity)];
}

/** Units in the k+1 oldest entries (entries 0..k). */
function unitsThrough(k: number): number {
  return viewLog === undefined ? inlineUnits : viewLog[2 * ((viewHead + k) % viewCapacity) + 1] - viewOffset;
}

/**
 * How many of the `entries` oldest entries are at or before `cutoffMs` (slid out). A galloping
 * search from the oldest entry: O(log k) for k slid out, so the usual few cost a read or two, and a
 * log of any length costs O(log n).
 */
function countExpired(entries: number, cutoffMs: number): number {
  if (entries === 0 || msAt(0) > cutoffMs) return 0;
  // msAt(lo − 1) ≤ cutoff; find hi with msAt(hi) > cutoff (or hi = entries).
  let lo = 1;
  let step = 1;
  let hi = 1;
  while (hi < entries && msAt(hi) <= cutoffMs) {
    lo = hi + 1;
    step *= 2;
    hi = Math.min(entries, lo + step - 1);
  }
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (msAt(mid) <= cutoffMs) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * The first entry from `from` on (of `entries`) whose running total reaches `target` units, which
 * the last one does. Galloping from `from` too: a refusal usually waits for the oldest entry or two.
 */
function firstReaching(from: number, entries: number, target: number): number {
  if (unitsThrough(from) >= target) return from;
  // unitsThrough(lo − 1) < target; find hi with unitsThrough(hi) ≥ target.
  let lo = from + 1;
  let step = 1;
  let hi = Math.min(entries - 1, lo);
  while (hi < entries - 1 && unitsThrough(hi) < target) {
    lo = hi + 1;
    step *= 2;
    hi = Math.min(entries - 1, lo + step - 1);
  }
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (unitsThrough(mid) >= target) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/**
 * Decides one call. `a`, `b`, `c` and `log` are the key's state fields and blob (see above); `hasKey`
 * whether it exists.
 */
export function slidingLogDecide(
  limit: number, periodMs: number, cost: number,
  hasKey: boolean, a: number, b: number, c: number, log: Float64Array | undefined, nowMs: number,
  out: Decision, force = false,
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
    expiredEntries = countExpired(entries, atMs - periodMs);
    if (expiredEntries > 0) expiredUnits = unitsThrough(expiredEntries - 1);
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
    out.retryAfter = -1;
    out.remaining = spendable - cost;
    out.resetAfter = atMs + periodMs - nowMs;
    out.write = true;
    out.expireAtMs = atMs + periodMs;
  } else if (force) {
    out.limit = limit;
    out.limited = true;
    out.remaining = 0;
    out.resetAfter = atMs + periodMs - nowMs;
    out.write = true;
    out.expireAtMs = atMs + periodMs;
    // Until one unit fits again: the oldest entry slidingLogRecord keeps has slid out (the new entry
    // itself when the cost alone fills the log).
    out.retryAfter = atMs + periodMs - nowMs;
    if (cost < limit) out.retryAfter = msAt(firstReaching(expiredEntries, entries, expiredUnits + live + cost + 1 - limit)) + periodMs - nowMs;
  } else {
    out.limit = limit;
    out.limited = true;
    out.write = false;
    out.remaining = spendable;
    out.resetAfter = resetAfterMs;
    out.retryAfter = -1; // COST above limit: never
    if (cost <= limit) {
      // Wait until the oldest live entries holding live + cost − limit units have slid out: the
      // first entry whose running total reaches them (totals strictly increase).
      const k = firstReaching(expiredEntries, entries, expiredUnits + live + cost - limit);
      out.retryAfter = msAt(k) + periodMs - nowMs;
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
  out: Decision,
): Float64Array | undefined {
  const entries = load(hasKey, a, b, c, log);
  let whenMs = nowMs;
  if (entries > 0 && msAt(entries - 1) > whenMs) whenMs = msAt(entries - 1);
  let first = countExpired(entries, whenMs - periodMs);
  let expiredUnits = first > 0 ? unitsThrough(first - 1) : 0;
  let units = entries > 0 ? c - expiredUnits : 0;
  // A forced charge past the limit: its units beyond `limit` change no decision, and the entries
  // older than the newest `limit` units are dropped as if slid out (see the top of this file).
  let kept = units + cost;
  if (kept > limit) {
    if (cost >= limit) {
      cost = limit;
      first = entries;
    } else {
      first = firstReaching(first, entries, expiredUnits + units + cost + 1 - limit);
    }
    expiredUnits = first > 0 ? unitsThrough(first - 1) : 0;
    units = entries > 0 ? c - expiredUnits : 0;
    kept = limit;
  }
  const live = entries - first;
  const merge = live > 0 && msAt(entries - 1) === whenMs;
  const after = merge ? live : live + 1;
  out.c = kept;
  out.b = after;
  let result: Float64Array | undefined;
  if (after === 1) {
    // One entry: inline, no blob.
    out.a = whenMs;
    result = undefined;
  } else if (log !== undefined && after <= viewCapacity) {
    // In place: advance the head past what slid out, then merge or append.
    const head = (viewHead + first) % viewCapacity;
    let newestTotal = log[2 * ((viewHead + entries - 1) % viewCapacity) + 1];
    if (newestTotal + cost > MAX_SCALED) {
      // Keep the totals exact integers: restart them from the oldest live entry (once per ~2^52
      // units accepted, so O(1) amortized).
      const dropped = newestTotal - units;
      for (let k = 0; k < live; k++) log[2 * ((head + k) % viewCapacity) + 1] -= dropped;
      newestTotal = units;
    }
    if (merge) log[2 * ((head + live - 1) % viewCapacity) + 1] = newestTotal + cost;
    else {
      const i = 2 * ((head + live) % viewCapacity);
      log[i] = whenMs;
      log[i + 1] = newestTotal + cost;
    }
    out.a = head;
    result = log;
  } else {
    // A new ring, twice the old one (at least 2 entries, at most limit), oldest entry at 0, totals
    // counted from it.
    const capacity = Math.min(limit, Math.max(2, 2 * viewCapacity, after));
    const ring = new Float64Array(2 * capacity);
    for (let k = first; k < entries; k++) {
      ring[2 * (k - first)] = msAt(k);
      ring[2 * (k - first) + 1] = unitsThrough(k) - expiredUnits;
    }
    if (merge) ring[2 * (live - 1) + 1] = units + cost;
    else {
      ring[2 * live] = whenMs;
      ring[2 * live + 1] = units + cost;
    }
    out.a = 0;
    result = ring;
  }
  viewLog = undefined;
  return result;
}

/** The blob slidingLogRefund leaves to store (undefined: the inline layout), reused between calls. */
export const slidingLogRefunded: { log: Float64Array | undefined } = { log: undefined };

/**
 * Gives `units` (≥ 1) back: the newest `units` units still in the window are dropped (whole entries,
 * newest first, and the last one touched only in part), and what slid out is dropped with them. When
 * it writes, the new A/B/C and expiry (the newest kept entry's time + period_ms, as after a decision)
 * go in `out` and the blob to store in `slidingLogRefunded.log` (the same ring, changed in place, or
 * undefined when one entry is left). O(log n).
 */
export function slidingLogRefund(
  periodMs: number, units: number,
  hasKey: boolean, a: number, b: number, c: number, log: Float64Array | undefined, nowMs: number,
  out: Decision,
): RefundEffect {
  const entries = load(hasKey, a, b, c, log);
  let effect = RefundEffect.None;
  if (entries > 0) {
    let atMs = msAt(entries - 1);
    if (nowMs > atMs) atMs = nowMs;
    const first = countExpired(entries, atMs - periodMs);
    const expiredUnits = first > 0 ? unitsThrough(first - 1) : 0;
    const live = c - expiredUnits;
    if (live > 0 && units >= live) effect = RefundEffect.Delete;
    else if (live > 0) {
      const keep = live - units;
      // The newest kept entry: the first whose running total reaches the units kept.
      const k = firstReaching(first, entries, expiredUnits + keep);
      const kept = k - first + 1;
      out.c = keep;
      out.b = kept;
      out.expireAtMs = msAt(k) + periodMs;
      if (kept === 1) {
        out.a = msAt(k);
        slidingLogRefunded.log = undefined;
      } else {
        // Entries after k are left in the ring's memory, past the B counted ones: never read.
        (log as Float64Array)[2 * ((viewHead + k) % viewCapacity) + 1] = expiredUnits + keep + viewOffset;
        out.a = (viewHead + first) % viewCapacity;
        slidingLogRefunded.log = log;
      }
      effect = RefundEffect.Write;
    }
  }
  viewLog = undefined;
  return effect;
}

/**
 * Why a stored sliding log state (A, B, C and blob, e.g. read from a snapshot) is not one this
 * module can have written, or null when it is: integers in range, at most MAX_SLIDING_LOG_LIMIT
 * units and entries, timestamps strictly increasing, at least one unit per entry, and the ring's
 * second column running totals (or an older build's units per entry, which `load` rewrites). Any
 * state it accepts is decided in bounded time with integer replies. O(B).
 */
export function slidingLogStateError(a: number, b: number, c: number, log: Float64Array | undefined): string | null {
  const isInt = (x: number, min: number, max: number) => Number.isSafeInteger(x) && x >= min && x <= max;
  if (log === undefined) {
    if (b !== 1) return `sliding log with no ring must have 1 entry, not ${b}`;
    if (!isInt(a, 0, Number.MAX_SAFE_INTEGER)) return `sliding log timestamp ${a} is not an integer ms`;
    if (!isInt(c, 1, MAX_SLIDING_LOG_LIMIT)) return `sliding log units ${c} not in 1..${MAX_SLIDING_LOG_LIMIT}`;
    return null;
  }
  const capacity = log.length >> 1;
  if (log.length % 2 !== 0 || capacity < 2 || capacity > MAX_SLIDING_LOG_LIMIT) return `sliding log ring of ${log.length} numbers (2 x 2..${MAX_SLIDING_LOG_LIMIT} entries expected)`;
  if (!isInt(a, 0, capacity - 1)) return `sliding log head ${a} not in 0..${capacity - 1}`;
  if (!isInt(b, 2, capacity)) return `sliding log of ${b} entries in a ring of ${capacity}`;
  if (!isInt(c, b, MAX_SLIDING_LOG_LIMIT)) return `sliding log units ${c} not in ${b}..${MAX_SLIDING_LOG_LIMIT} (at least one per entry)`;
  const at = (k: number) => 2 * ((a + k) % capacity);
  const newest = log[at(b - 1) + 1];
  const perEntry = newest < c;
  const offset = perEntry ? 0 : newest - c;
  if (!isInt(newest, 1, MAX_SCALED + MAX_SLIDING_LOG_LIMIT)) return `sliding log total ${newest} out of range`;
  let previousMs = -1;
  let previous = offset;
  let sum = 0;
  for (let k = 0; k < b; k++) {
    const ms = log[at(k)];
    const v = log[at(k) + 1];
    if (!isInt(ms, previousMs + 1, Number.MAX_SAFE_INTEGER)) return `sliding log entry ${k}: timestamp ${ms} not an integer after ${previousMs}`;
    if (perEntry) {
      if (!isInt(v, 1, c)) return `sliding log entry ${k}: ${v} units`;
      sum += v;
    } else if (!isInt(v, previous + 1, newest)) return `sliding log entry ${k}: running total ${v} not above ${previous}`;
    previousMs = ms;
    previous = v;
  }
  if (perEntry && sum !== c) return `sliding log entries hold ${sum} units, not ${c}`;
  return null;
}

/** `RL.SLIDINGLOG`: the only algorithm with a blob (the ring, beyond one entry). */
export const slidingLog: Algorithm = {
  name: 'SLIDINGLOG', typeName: 'slidinglog', configName: 'sliding_log', type: 5, op: 's', ...luaSections(lua), reply: 'rl-ms',
  acceptsBurst: false, maxLimit: MAX_SLIDING_LOG_LIMIT, readsC: true, hasBlob: true,
  checkParams: limitProduct,
  decide: (p, cost, has, a, b, c, blob, nowMs, _nowUs, out) => slidingLogDecide(p.limit, p.periodMs, cost, has, a, b, c, blob, nowMs, out, p.force),
  commit: (p, cost, has, a, b, c, blob, nowMs, _nowUs, out) => {
    out.blob = slidingLogRecord(p.limit, p.periodMs, cost, has, a, b, c, blob, nowMs, out);
  },
  refund: (p, units, has, a, b, c, blob, nowMs, _nowUs, out) => {
    const effect = slidingLogRefund(p.periodMs, units, has, a, b, c, blob, nowMs, out);
    if (effect === RefundEffect.Write) out.blob = slidingLogRefunded.log;
    return effect;
  },
  stateProblem: (expireAtMs, a, b, c, blob) => {
    // The log's own rules (its ring layout is this module's business), then its newest entry's time.
    const problem = slidingLogStateError(a, b, c, blob);
    if (problem !== null) return problem;
    const newestMs = blob === undefined ? a : blob[2 * ((a + b - 1) % (blob.length / 2))];
    if (newestMs > expireAtMs) return `slidinglog newest entry time ${newestMs} ms is after the expiry ${expireAtMs}`;
    return null;
  },
  summary: 'Sliding window log: exactly at most limit in any period_ms interval.',
  complexity: 'O(log limit); an accepted call O(1) amortized, O(limit) when it grows the log',
  warmupArgs: ['20', '60000'],
};
