import type { Keyspace } from '../keyspace/keyspace.js';
import { OP_DEL, OP_FLUSH } from './journal-format.js';
import type { JournalRecord } from './journal-parse.js';

/**
 * Applies records to a keyspace: a SET makes the key hold exactly the recorded state (created, or
 * replaced when it held another type), unless that state has expired by `nowMs` (then the key is
 * gone, as it would be by now); a DEL removes it; a FLUSH empties the keyspace. The keyspace's own
 * journal must be detached meanwhile.
 */
export class JournalReplay {
  sets = 0;
  dels = 0;
  flushes = 0;
  expired = 0;

  constructor(
    private readonly ks: Keyspace,
    private readonly nowMs: number,
  ) {}

  readonly apply = (rec: JournalRecord, buf: Buffer): void => {
    const ks = this.ks;
    switch (rec.op) {
      case OP_FLUSH:
        ks.clear();
        this.flushes++;
        return;
      case OP_DEL:
        ks.deleteKey(buf, rec.keyStart, rec.keyEnd, this.nowMs);
        this.dels++;
        return;
      default: {
        this.sets++;
        let slot = ks.lookupKey(buf, rec.keyStart, rec.keyEnd, this.nowMs);
        if (this.nowMs > rec.expireAtMs) {
          if (slot !== -1) ks.deleteKey(buf, rec.keyStart, rec.keyEnd, this.nowMs);
          this.expired++;
          return;
        }
        if (slot !== -1 && ks.typeOf(slot) !== rec.type) {
          ks.deleteKey(buf, rec.keyStart, rec.keyEnd, this.nowMs);
          slot = -1;
        }
        if (slot === -1) slot = ks.createKey(buf, rec.keyStart, rec.keyEnd, rec.type);
        // A blob to set, or one to drop (the key held a blob): no Map lookup when no key has a blob.
        if (rec.blob !== undefined || (ks.anyBlobs && ks.getBlob(slot) !== undefined)) ks.setBlob(slot, rec.blob);
        ks.setState(slot, rec.a, rec.b, rec.c);
        ks.setExpireAtMs(slot, rec.expireAtMs);
      }
    }
  };
}
