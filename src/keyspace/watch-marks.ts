/**
 * WATCH marks: which clients watch which keys, and marking them when a key changes (Redis's
 * watched_keys and touchWatchedKey). The Keyspace owns one and tells it of every change of a watched
 * key; with nobody watching, the Keyspace's write paths skip it with one integer comparison.
 */
import type { Keyspace } from './keyspace.js';

/**
 * One client's WATCH of one key (see Keyspace.watch). `owner.dirty` is set when the key is touched
 * (any change: a write, a delete, expiry, eviction, FLUSH), as Redis's CLIENT_DIRTY_CAS. `expired`
 * is Redis's `wk->expired`: the key was present but already expired when it was watched; its
 * removal is then no logical change (the flag is cleared instead), anything else still is.
 */
export interface KeyWatch {
  readonly key: string;
  expired: boolean;
  readonly owner: WatchOwner;
}

/** What a watch marks when its key is touched: one per client (its WATCHed keys together). */
export interface WatchOwner {
  dirty: boolean;
}

export class WatchMarks {
  /** WATCHed keys (binary strings) and their watches. */
  private watches = new Map<string, KeyWatch | KeyWatch[]>();

  constructor(private readonly keys: Keyspace) {}

  /** Watch index entries (distinct watched keys, whoever watches them). */
  get size(): number {
    return this.watches.size;
  }

  /** See Keyspace.watch. */
  watch(owner: WatchOwner, key: string, nowMs: number): KeyWatch | null {
    const entry = this.watches.get(key);
    if (entry !== undefined) {
      if (Array.isArray(entry)) {
        for (const w of entry) if (w.owner === owner) return null;
      } else if (entry.owner === owner) {
        return null;
      }
    }
    const slot = this.keys.presentSlot(key);
    const w: KeyWatch = { key, expired: slot !== -1 && nowMs > this.keys.expireAtMs(slot), owner };
    // One watcher (the usual case) is kept as it is: a list per key would cost ~180 bytes more.
    if (entry === undefined) this.watches.set(key, w);
    else if (Array.isArray(entry)) entry.push(w);
    else this.watches.set(key, [entry, w]);
    return w;
  }

  drop(w: KeyWatch): void {
    const entry = this.watches.get(w.key);
    if (entry === undefined) return;
    if (!Array.isArray(entry)) {
      if (entry === w) this.watches.delete(w.key);
      return;
    }
    const i = entry.indexOf(w);
    if (i !== -1) entry.splice(i, 1);
    if (entry.length === 1) this.watches.set(w.key, entry[0]);
    else if (entry.length === 0) this.watches.delete(w.key);
  }

  /** See Keyspace.watchedKeyExpired. */
  anyExpired(watches: readonly KeyWatch[], nowMs: number): boolean {
    for (const w of watches) {
      if (w.expired) continue;
      const slot = this.keys.presentSlot(w.key);
      if (slot !== -1 && nowMs > this.keys.expireAtMs(slot)) return true;
    }
    return false;
  }

  /** A change of `key` (made already): Redis's touchWatchedKey. */
  touch(key: string): void {
    const entry = this.watches.get(key);
    if (entry === undefined) return;
    if (!Array.isArray(entry)) {
      this.touchWatch(entry, undefined);
      return;
    }
    let gone: boolean | undefined;
    for (const w of entry) gone = this.touchWatch(w, gone);
  }

  /** Marks one watch of a changed key; `gone` caches whether the key is absent now (it is looked up once). */
  private touchWatch(w: KeyWatch, gone: boolean | undefined): boolean | undefined {
    if (w.expired) {
      // Removing a key that had already expired when watched is no logical change.
      gone ??= this.keys.presentSlot(w.key) === -1;
      if (gone) {
        w.expired = false;
        return gone;
      }
    }
    w.owner.dirty = true;
    return gone;
  }

  /** FLUSHDB/FLUSHALL, before the keys go: Redis's touchAllWatchedKeysInDb (only keys present count). */
  touchAll(): void {
    for (const [key, entry] of this.watches) {
      if (this.keys.presentSlot(key) === -1) continue;
      for (const w of Array.isArray(entry) ? entry : [entry]) {
        if (w.expired) w.expired = false;
        else w.owner.dirty = true;
      }
    }
  }
}
