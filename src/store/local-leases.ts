/**
 * Concurrency limits decided on this process's keyspace (see lease-store.ts). In progress.
 */
import type { Keyspace } from '../keyspace/keyspace.js';
import type { Stats } from '../server/stats.js';
import type { AttemptDone, LeaseCall } from './lease-call.js';
import type { LeaseStore } from './lease-store.js';
import type { StoreSink } from './store.js';

export class LocalLeaseStore implements LeaseStore {
  onFreed: ((key: Buffer) => void) | null = null;

  constructor(
    readonly keyspace: Keyspace,
    private readonly stats: Stats,
  ) {}

  acquire(_call: LeaseCall, sink: StoreSink): void {
    sink.reply.error('ERR not yet');
  }
  release(_call: LeaseCall, sink: StoreSink): void {
    sink.reply.error('ERR not yet');
  }
  renew(_call: LeaseCall, sink: StoreSink): void {
    sink.reply.error('ERR not yet');
  }
  attempt(_call: LeaseCall, _nowMs: number, done: AttemptDone): void {
    void this.stats;
    done('ERR not yet');
  }
  watch(_key: Buffer): void {}
  unwatch(_key: Buffer): void {}
}
