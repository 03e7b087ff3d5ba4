/**
 * Walks over the keyspace's slots in slot order: SCAN's resumable walk and the whole walk of a
 * synchronous save. A slot keeps its number for its key's whole life, so a slot number is a stable
 * SCAN cursor: a key present for the whole of a SCAN is returned, whatever else is added or removed.
 */
import type { Keyspace } from './keyspace.js';

/** See Keyspace.scan (which settles the keyspace first). */
export function scanSlots(keys: Keyspace, cursor: number, count: number, nowMs: number, visit: (slot: number) => void): number {
  const slots = keys.slotsUsed;
  let slot = cursor;
  let seen = 0;
  while (slot < slots && seen < count) {
    if (keys.occupied(slot)) {
      seen++;
      if (nowMs > keys.expireAtMs(slot)) keys.removeExpired(slot);
      else visit(slot);
    }
    slot++;
  }
  return slot >= slots ? 0 : slot;
}

/** See Keyspace.forEachLive (which settles the keyspace first). */
export function forEachLiveSlot(keys: Keyspace, nowMs: number, visit: (slot: number) => void): void {
  const slots = keys.slotsUsed;
  for (let slot = 0; slot < slots; slot++) {
    if (keys.occupied(slot) && nowMs <= keys.expireAtMs(slot)) visit(slot);
  }
}
