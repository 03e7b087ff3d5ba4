/**
 * The copy-on-write view of a background save (Keyspace.beginSave): the keys live at the save's
 * start, each handed to the save's sink exactly once, as they were then, whatever happens to them
 * before the save's walk reaches them.
 *
 * The walk visits the slots in order. A slot it has not reached yet whose record is about to change
 * (state, expiry, blob, delete, eviction, expiry, reuse by a new key) goes to the sink first
 * (preserve) and is then skipped by the walk; a FLUSH sets the storage aside for the walk (the view's
 * `source` becomes it). Keys created during the save are not in it: new slots lie beyond the walk's
 * end, and a reused slot is marked done when the new key takes it. Records never move (the index
 * table's growth moves only its entries), so a slot number names the same record for the whole save.
 */
import type { Keyspace } from './keyspace.js';

/** Receives a key of a background save: `source` holds it (the keyspace, or its storage before a FLUSH). */
export type SaveSink = (source: Keyspace, slot: number) => void;

/** The keyspace's save cursor when no background save runs: above every slot, so the copy-on-write check fails. */
export const NO_SAVE = 0x7fffffff;

/**
 * A background save's point-in-time view. Slots [pos, end) are still to be visited; `done` marks
 * those already written (their pre-image, copied on their first change) or not to be written (a key
 * created during the save in a slot that was free at its start).
 */
export class SaveView {
  pos = 0;
  readonly done: Uint8Array;

  constructor(
    /** Where the slots are read: the keyspace, or the storage a FLUSH during the save set aside. */
    public source: Keyspace,
    readonly end: number,
    readonly startMs: number,
    readonly sink: SaveSink,
  ) {
    this.done = new Uint8Array(end);
  }

  /** Where a walk of up to `maxSlots` more slots stops. */
  stopAfter(maxSlots: number): number {
    return Math.min(this.end, this.pos + maxSlots);
  }

  /** Hands each key of the view in [pos, stop) not yet handed over to the sink; false when the walk is complete. */
  walkTo(stop: number): boolean {
    const { source, done, startMs, sink } = this;
    let slot = this.pos;
    for (; slot < stop; slot++) {
      if (done[slot] === 1) continue;
      if (source.occupied(slot) && startMs <= source.expireAtMs(slot)) sink(source, slot);
    }
    this.pos = slot;
    return slot < this.end;
  }

  /**
   * The first change of a slot of `keys` the walk has not reached: hands its key to the sink if it was
   * live at the save's start (the record is still as it was then), and marks it so the walk skips it.
   */
  preserve(keys: Keyspace, slot: number): void {
    if (slot >= this.end || this.done[slot] === 1) return;
    this.done[slot] = 1;
    if (keys.occupied(slot) && this.startMs <= keys.expireAtMs(slot)) this.sink(keys, slot);
  }
}
