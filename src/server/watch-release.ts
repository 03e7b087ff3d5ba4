/**
 * Ending WATCH sets without stalling the server. A small set leaves the keyspace's watch index at
 * once; a big one (a client may watch up to MAX_WATCHED_KEYS) in slices of at most
 * WATCH_FREE_SLICE_KEYS and WATCH_FREE_SLICE_MS, one per event-loop turn, so other clients are
 * served between slices instead of waiting for millions of index removals.
 */
import { performance } from 'node:perf_hooks';
import type { Keyspace } from '../keyspace/keyspace.js';
import type { Client } from './client.js';
import type { Tasks } from './tasks.js';
import { WATCH_FREE_CHECK_KEYS, WATCH_FREE_SLICE_KEYS, WATCH_FREE_SLICE_MS, watchBytes, type Watching } from './transaction.js';

export class WatchRelease {
  /** Watch sets of clients that ended them, still to leave the keyspace's watch index. */
  private readonly toFree: { watching: Watching; client: Client }[] = [];
  /** Position in toFree[0].keys of the next watch to free. */
  private freeAt = 0;
  /** Watches in toFree not freed yet (INFO lazyfree_pending_watches). */
  pending = 0;
  /** Slices run to free watches (INFO lazyfree_watch_slices), and the longest one (µs). */
  slices = 0;
  sliceMaxUs = 0;

  constructor(
    private readonly keyspace: Keyspace,
    private readonly tasks: Tasks,
  ) {}

  /**
   * Ends a client's watch set. The set is detached from its client first: whatever touches its keys
   * meanwhile marks nobody that matters. Until they are freed, the watches stay in their client's
   * memory account and count toward its WATCH cap (Client.watchesFreeing): a client cannot outrun
   * the slices by watching and unwatching.
   */
  release(w: Watching, client: Client): void {
    if (w.keys.length <= WATCH_FREE_SLICE_KEYS && this.toFree.length === 0) {
      this.keyspace.unwatch(w.keys);
      return;
    }
    this.toFree.push({ watching: w, client });
    client.watchesFreeing += w.keys.length;
    client.watchesFreeingBytes += w.bytes;
    this.pending += w.keys.length;
    if (this.toFree.length === 1) this.tasks.soon('watch free', this.freeSlice);
  }

  /** CONFIG RESETSTAT. */
  resetStats(): void {
    this.slices = 0;
    this.sliceMaxUs = 0;
  }

  private readonly freeSlice = (): void => {
    this.slices++;
    const started = performance.now();
    let budget = WATCH_FREE_SLICE_KEYS;
    const ks = this.keyspace;
    // At most WATCH_FREE_SLICE_KEYS, and WATCH_FREE_SLICE_MS (checked every WATCH_FREE_CHECK_KEYS):
    // on a busy machine 8,192 index removals can take far longer than their usual ~2 ms.
    const deadline = started + WATCH_FREE_SLICE_MS;
    while (budget > 0 && this.toFree.length > 0 && performance.now() < deadline) {
      const { watching, client } = this.toFree[0];
      const keys = watching.keys;
      const end = Math.min(keys.length, this.freeAt + Math.min(budget, WATCH_FREE_CHECK_KEYS));
      let bytes = 0;
      for (let i = this.freeAt; i < end; i++) {
        ks.unwatchOne(keys[i]);
        bytes += watchBytes(keys[i].key);
      }
      const freed = end - this.freeAt;
      budget -= freed;
      this.pending -= freed;
      client.watchesFreeing -= freed;
      client.watchesFreeingBytes -= bytes;
      client.accountWatches();
      if (end === keys.length) {
        this.toFree.shift();
        this.freeAt = 0;
      } else {
        this.freeAt = end;
      }
    }
    this.sliceMaxUs = Math.max(this.sliceMaxUs, Math.round((performance.now() - started) * 1000));
    if (this.toFree.length > 0) this.tasks.soon('watch free', this.freeSlice);
  };
}
