/**
 * The keyspace commands on this process's keyspace, as Redis: synchronous. Keys are looked up by
 * their bytes as received, never as strings: a key may be as long as proto-max-bulk-len (512 MiB),
 * longer than V8's longest string.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import type { Keyspace } from '../keyspace/keyspace.js';
import { BLOCK_TYPE } from '../limiters/block.js';
import { typeName } from '../limiters/registry.js';
import { createKeyArg } from './key-args.js';
import { globMatch } from '../glob.js';
import type { Stats } from '../server/stats.js';
import type { KeyStore, ScanRequest, StoreSink } from './store.js';

export class LocalKeyStore implements KeyStore {
  constructor(
    readonly keyspace: Keyspace,
    private readonly stats: Stats,
  ) {}

  /** The slot of the live key in argument `i`, or -1. */
  private lookupArg(sink: StoreSink, argv: CommandArgs, i: number): number {
    return this.keyspace.lookupKey(argv.source(i), argv.start(i), argv.end(i), sink.nowMs);
  }

  /** Deletes the keys of arguments 1..; returns how many there were. */
  deleteKeys(argv: CommandArgs, nowMs: number): number {
    const ks = this.keyspace;
    let removed = 0;
    for (let i = 1; i < argv.length; i++) if (ks.deleteKey(argv.source(i), argv.start(i), argv.end(i), nowMs)) removed++;
    return removed;
  }

  del(sink: StoreSink, argv: CommandArgs): void {
    sink.reply.integer(this.deleteKeys(argv, sink.nowMs));
  }

  /**
   * Makes the key in argument 1 a block ending `ms` from `nowMs` (RL.BLOCK): whatever it held is
   * deleted first (a key's type is fixed for its life), then the block is written as any state is
   * (setState: the journal, WATCH, a running save and the dirty count see it).
   */
  blockKey(argv: CommandArgs, ms: number, nowMs: number): void {
    const ks = this.keyspace;
    ks.deleteKey(argv.source(1), argv.start(1), argv.end(1), nowMs);
    const slot = createKeyArg(ks, argv, 1, BLOCK_TYPE);
    ks.setState(slot, 0, 0, 0);
    ks.setExpireAtMs(slot, nowMs + ms);
  }

  block(sink: StoreSink, argv: CommandArgs, ms: number): void {
    this.blockKey(argv, ms, sink.nowMs);
    sink.reply.ok();
  }

  exists(sink: StoreSink, argv: CommandArgs): void {
    let found = 0;
    for (let i = 1; i < argv.length; i++) if (this.lookupArg(sink, argv, i) !== -1) found++;
    sink.reply.integer(found);
  }

  type(sink: StoreSink, argv: CommandArgs): void {
    const slot = this.lookupArg(sink, argv, 1);
    sink.reply.status(slot === -1 ? 'none' : typeName(this.keyspace.typeOf(slot)));
  }

  /** TTL/PTTL: −2 no key, −1 no expiry; TTL rounds to the nearest second as Redis does. */
  ttl(sink: StoreSink, argv: CommandArgs, inMs: boolean): void {
    const slot = this.lookupArg(sink, argv, 1);
    if (slot === -1) {
      this.stats.keyspaceMisses++;
      sink.reply.integer(-2);
      return;
    }
    this.stats.keyspaceHits++;
    const ms = Math.max(0, this.keyspace.expireAtMs(slot) - sink.nowMs);
    sink.reply.integer(inMs ? ms : Math.floor((ms + 500) / 1000));
  }

  scan(sink: StoreSink, request: ScanRequest): void {
    const { cursor, count, pattern, typeFilter } = request;
    const r = sink.reply;
    const ks = this.keyspace;
    const found: string[] = [];
    const next = ks.scan(cursor, count, sink.nowMs, (slot) => {
      const key = ks.keyOf(slot);
      if (pattern !== null && !globMatch(pattern, key)) return;
      if (typeFilter !== null && typeName(ks.typeOf(slot)) !== typeFilter) return;
      found.push(key);
    });
    r.arrayHeader(2);
    r.bulk(String(next));
    r.bulkArray(found);
  }

  keys(sink: StoreSink, pattern: string): void {
    const all = pattern === '*';
    const found: string[] = [];
    const ks = this.keyspace;
    let cursor = 0;
    do {
      cursor = ks.scan(cursor, 1 << 20, sink.nowMs, (slot) => {
        const key = ks.keyOf(slot);
        if (all || globMatch(pattern, key)) found.push(key);
      });
    } while (cursor !== 0);
    sink.reply.bulkArray(found);
  }

  dbsize(sink: StoreSink): void {
    sink.reply.integer(this.keyspace.size);
  }

  flush(sink: StoreSink): void {
    this.keyspace.clear();
    sink.reply.ok();
  }
}
