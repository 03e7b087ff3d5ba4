/**
 * The rate limit service's decisions through the limiter store the RESP commands use
 * (src/store/store.ts): this process's keyspace, or the shared backend with its refusal cache and
 * `backend-unavailable` policy, whichever the server picked at start. Each limit of a request is
 * one `RL.<ALGO> key limit period_ms [BURST n] COST hits` call, answered into a reply writer of its
 * own and read back from its six integers.
 *
 * envoyproxy/ratelimit's fixed window counts every hit, over the limit or not (INCRBY), which no
 * RL.* algorithm does; it goes as RL.FIXEDWINDOW with a limit no window reaches (COUNT_ALL), which
 * always spends (the count then grows as INCRBY's would), and the real limit is compared here with
 * the count it reports (COUNT_ALL minus remaining): the same windows (aligned to the unit), the same
 * counts, on one key per window as there. It goes with FORCE, so hits beyond even COUNT_ALL (a
 * hits_addend up to 2^63 − 1) are counted too, the window's count saturating at COUNT_ALL: over for
 * the rest of the window, as the exact count would be.
 *
 * A limit with `allow_debt` goes with FORCE in every algorithm: hits charged after the fact (a
 * gateway's token count at the end of a response) are recorded beyond the limit, as debt.
 */
import { CommandArgs } from '../protocol/command-args.js';
import { ReplyWriter } from '../protocol/reply-writer.js';
import type { Algorithm } from '../limiters/algorithm.js';
import { MAX_SCALED } from '../limiters/rate-decision.js';
import { newLimit, newLimiterCall, type LimiterCall } from '../store/limiter-call.js';
import type { LimiterStore, StoreSink } from '../store/store.js';
import { LimiterCounter } from '../server/stats.js';
import { ALGORITHMS, rlsAlgorithm, type RlsAlgorithm } from './config.js';
import type { RlsCall, RlsDecider, RlsOutcome } from './decider.js';

const ALGO = Object.fromEntries(ALGORITHMS.map((name) => [name, rlsAlgorithm(name)])) as Record<RlsAlgorithm, Algorithm>;

/**
 * The store counts each call's decision for INFO limiter and cellgate_limiter_decisions_total; the
 * service's calls are not RL.* commands (a fixed window's would all read as allowed) and have their
 * own counters (ratelimit_service_*), so they count nothing there.
 */
class NotCounted extends LimiterCounter {
  override count(): void {}
}
const COUNTER = new NotCounted('rls');

/** Reads `*6\r\n:a\r\n...` (RESP2) into `out`; an error reply gives its text. */
function readSix(bytes: Buffer, out: number[]): string | null {
  if (bytes[0] === 0x2d) return bytes.toString('utf8', 1, bytes.indexOf(0x0d));
  let at = bytes.indexOf(0x0a) + 1;
  for (let i = 0; i < 6; i++) {
    const end = bytes.indexOf(0x0d, at);
    out[i] = Number(bytes.toString('latin1', at + 1, end));
    at = end + 2;
  }
  return null;
}

export class StoreDecider implements RlsDecider {
  /**
   * Where a call's answer is written: `now` for one given during decide (this process), `later`
   * for one the store gives afterwards (the backend). Each answer is read back and emptied at once,
   * so two writers serve every call.
   */
  private readonly now = new ReplyWriter();
  private readonly later = new ReplyWriter();

  constructor(private readonly store: () => LimiterStore) {}

  decide(calls: readonly RlsCall[], out: RlsOutcome[], nowUs: number, done: (error: Error | null) => void): void {
    let pending = calls.length;
    let failed: Error | null = null;
    if (pending === 0) {
      done(null);
      return;
    }
    const store = this.store();
    // One limit is a plain call: on the backend it rides in the turn's batch with every other call
    // of the turn, RESP or gRPC. Several go to the store as one unit where any keys may (this
    // process, one Redis): on the backend one entry of the turn's batch, decided together with
    // nothing in between, each limit still decided on its own (a refused one does not keep the
    // others from counting, as envoyproxy/ratelimit counts them all). On a Cluster, where a unit's
    // keys must share a slot, each goes alone (in its node's batch).
    const unit = calls.length > 1 && store.unitKeys() === null;
    if (unit) store.beginUnit();
    for (let i = 0; i < calls.length; i++) {
      const c = calls[i];
      const finish = (writer: ReplyWriter): void => {
        const six: number[] = [0, 0, 0, 0, 0, 0];
        const error = readSix(writer.take(), six);
        if (error !== null) failed ??= new Error(error);
        else read(c, six, out[i]);
        if (--pending === 0) done(failed);
      };
      let deferred = false;
      const sink: StoreSink = {
        reply: this.now,
        nowUs,
        nowMs: Math.floor(nowUs / 1000),
        client: {
          defer: () => {
            deferred = true;
            return (write) => {
              write(this.later);
              finish(this.later);
            };
          },
        },
      };
      store.decide(limiterCall(c), sink);
      if (!deferred) finish(this.now);
    }
    if (unit) store.endUnit();
  }
}

/**
 * The fixed window's stand-in limit: 2^52, beyond any count a window reaches (an RL.FIXEDWINDOW
 * counts in plain integers, here and in the backend's script, so the product bound the command puts
 * on limit x period_ms does not apply to it), so every call is allowed and counted.
 */
const COUNT_ALL = MAX_SCALED;

function limiterCall(c: RlsCall): LimiterCall {
  const l = newLimit(ALGO[c.algorithm]);
  const call = newLimiterCall('rl', [l]);
  const key = Buffer.from(c.key, 'latin1');
  call.argv = new CommandArgs();
  call.argv.push(key, 0, 0);
  call.argv.push(key, 0, key.length);
  l.keyArg = 1;
  l.periodMs = c.periodMs;
  if (c.algorithm === 'fixed_window') {
    l.limit = COUNT_ALL;
    l.burst = COUNT_ALL;
  } else {
    l.limit = c.limit;
    l.burst = c.burst;
    // Checked when the configuration loaded; this derives RL.GCRA's intervals.
    l.algo.checkParams(c.limit, c.periodMs, c.burst, l.gcra);
  }
  l.force = c.force || c.algorithm === 'fixed_window';
  call.count = 1;
  call.cost = c.hits;
  call.counter = COUNTER;
  return call;
}

/** `limited, limit, remaining, retry_after_ms, reset_after_ms, delay_ms` into an outcome. */
function read(c: RlsCall, six: number[], o: RlsOutcome): void {
  if (c.algorithm === 'fixed_window') {
    if (six[0] === 1) {
      // 2^52 hits or more in one window (counted, saturated): over, whatever requests_per_unit says.
      o.over = true;
      o.remaining = 0;
      o.before = o.after = COUNT_ALL;
      o.resetAfterMs = six[4];
      return;
    }
    // Allowed: the count after this call's hits is what the largest limit has not left.
    const after = six[1] - six[2];
    o.after = after;
    o.before = after - c.hits;
    o.over = after > c.limit;
    o.remaining = o.over ? 0 : c.limit - after;
    o.resetAfterMs = six[4];
    return;
  }
  // A look (no hits) on a limit with debt allowed is over while nothing is left: the check a gateway
  // makes before the work it charges afterwards refuses while the debt lasts. (A plain peek reports
  // allowed; without debt, the algorithms but the fixed window keep that.)
  o.over = six[0] === 1 || (c.force && c.hits === 0 && six[2] === 0);
  o.remaining = o.over ? 0 : six[2];
  o.resetAfterMs = six[4];
  o.before = 0;
  o.after = 0;
}
