/**
 * The `backend-unavailable` policy as a store (docs/backend.md): the shared backend's store hands it
 * the calls the backend did not decide (down, slow, failing, or too many calls pending), as parsed:
 * - `local`: this process's own keyspace decides, as without a backend;
 * - `allow`: the reply a fresh key would give (decided on an empty scratch keyspace, nothing kept);
 * - `deny`: limited, remaining 0, retry and reset 1 second.
 */
import { Keyspace, type KeyType } from '../keyspace/keyspace.js';
import { algorithmOfType } from '../limiters/registry.js';
import type { Stats } from '../server/stats.js';
import type { LimiterCall } from './limiter-call.js';
import { replyFive, writeSix } from './limiter-replies.js';
import { LocalLimiterStore } from './local-limiter.js';
import type { LimiterStore, StoreSink, UnitKeyCheck } from './store.js';

export type UnavailablePolicy = 'local' | 'allow' | 'deny';

export class PolicyLimiterStore implements LimiterStore {
  private scratch: LocalLimiterStore | null = null;

  constructor(
    /** The process's own store (`local`). */
    private readonly local: LocalLimiterStore,
    private readonly stats: Stats,
    /** Where the policy is read, at each call (CONFIG SET backend-unavailable changes it). */
    private readonly setting: { readonly policy: UnavailablePolicy },
  ) {}

  /** Answers `call` by the policy into the sink, at once. */
  decide(call: LimiterCall, sink: StoreSink): void {
    const policy = this.setting.policy;
    if (policy === 'deny') {
      writeDenied(sink, call);
      call.counter?.count(this.stats, true);
      return;
    }
    if (policy === 'local') {
      this.local.decide(call, sink);
      return;
    }
    // An empty keyspace for answers that must leave no trace: flushed after each use.
    const scratch = this.scratch ?? (this.scratch = new LocalLimiterStore(new Keyspace(), this.stats));
    try {
      scratch.decide(call, sink);
    } finally {
      scratch.keyspace.clear();
    }
  }

  // Each answer is given at once, on this process: a unit needs nothing more.
  beginUnit(): void {}
  endUnit(): void {}
  unitKeys(): UnitKeyCheck | null {
    return null;
  }
}

/** The limit a reply reports for an RL.* limit (its second field). */
function rlReplyLimit(type: KeyType, limit: number, burst: number): number {
  return algorithmOfType(type)!.acceptsBurst ? burst : limit;
}

/** `deny`: limited, nothing remaining, come back in a second. */
function writeDenied(sink: StoreSink, call: LimiterCall): void {
  const w = sink.reply;
  if (call.kind === 'cl.throttle') {
    replyFive(w, true, call.cell!.limit, 0, 1, 1);
    return;
  }
  if (call.kind === 'gcra') {
    replyFive(w, true, call.gcra!.limit, 0, 1, 1);
    return;
  }
  const one = (n: number): void => {
    const l = call.limits[n];
    writeSix(w, 1, rlReplyLimit(l.algo.type, l.limit, l.burst), 0, 1000, 1000, 0);
  };
  if (!call.allOrNothing) {
    one(0);
    return;
  }
  w.arrayHeader(call.count + 1);
  w.integer(1);
  for (let n = 0; n < call.count; n++) one(n);
}
