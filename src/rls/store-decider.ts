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
import { ReplyWriter } from '../protocol/reply-writer.js';
import type { Algorithm } from '../limiters/algorithm.js';
import { MAX_SCALED } from '../limiters/rate-decision.js';
import { newLimit, newLimiterCall } from '../store/limiter-call.js';
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

/**
 * Reads `*6\r\n:a\r\n...` (RESP2) from `bytes`[0, len) into `out`, digit by digit (no string per
 * integer: this ran once per limit of every request); an error reply gives its text.
 */
function readSix(bytes: Buffer, len: number, out: number[]): string | null {
  if (bytes[0] === 0x2d) return bytes.toString('utf8', 1, bytes.indexOf(0x0d));
  let at = bytes.indexOf(0x0a) + 1;
  for (let i = 0; i < 6; i++) {
    at++; // ':'
    let negative = false;
    if (bytes[at] === 0x2d) {
      negative = true;
      at++;
    }
    let v = 0;
    while (at < len && bytes[at] !== 0x0d) v = v * 10 + (bytes[at++] - 0x30);
    out[i] = negative ? -v : v;
    at += 2;
  }
  return null;
}

/** The decisions of one request: its calls, their outcomes, how many are still to come. */
interface Batch {
  calls: readonly RlsCall[];
  out: RlsOutcome[];
  pending: number;
  failed: Error | null;
  done: (error: Error | null) => void;
}

export class StoreDecider implements RlsDecider {
  /**
   * Where a call's answer is written: `now` for one given during decide (this process), `later`
   * for one the store gives afterwards (the backend). Each answer is read back and emptied at once,
   * so two writers serve every call.
   */
  private readonly now = new ReplyWriter();
  private readonly later = new ReplyWriter();
  private readonly six: number[] = [0, 0, 0, 0, 0, 0];
  /**
   * One limiter call, its limit, its arguments and its sink, refilled for each limit: the store
   * takes what it keeps from them before decide returns (a deferred call is detached, as the RESP
   * commands' own reused call is), so they need not be made per request.
   */
  private readonly limit = newLimit(ALGO.fixed_window);
  private readonly call = newLimiterCall('rl', [this.limit]);
  private readonly sink: StoreSink;
  /** The batch and call being handed to the store now (read by defer, which the store calls synchronously). */
  private batch: Batch | null = null;
  private index = 0;
  private deferred = false;

  constructor(private readonly store: () => LimiterStore) {
    this.call.count = 1;
    this.call.counter = COUNTER;
    this.sink = {
      reply: this.now,
      nowUs: 0,
      nowMs: 0,
      client: {
        defer: () => {
          const batch = this.batch as Batch;
          const i = this.index;
          this.deferred = true;
          return (write) => {
            write(this.later);
            this.finish(batch, i, this.later);
          };
        },
      },
    };
  }

  decide(calls: readonly RlsCall[], out: RlsOutcome[], nowUs: number, done: (error: Error | null) => void): void {
    if (calls.length === 0) {
      done(null);
      return;
    }
    const batch: Batch = { calls, out, pending: calls.length, failed: null, done };
    const store = this.store();
    // One limit is a plain call: on the backend it rides in the turn's batch with every other call
    // of the turn, RESP or gRPC. Several go to the store as one unit where any keys may (this
    // process, one Redis): on the backend one entry of the turn's batch, decided together with
    // nothing in between, each limit still decided on its own (a refused one does not keep the
    // others from counting, as envoyproxy/ratelimit counts them all). On a Cluster, where a unit's
    // keys must share a slot, each goes alone (in its node's batch).
    const unit = calls.length > 1 && store.unitKeys() === null;
    if (unit) store.beginUnit();
    this.sink.nowUs = nowUs;
    this.sink.nowMs = Math.floor(nowUs / 1000);
    for (let i = 0; i < calls.length; i++) {
      this.fill(calls[i]);
      this.batch = batch;
      this.index = i;
      this.deferred = false;
      store.decide(this.call, this.sink);
      this.batch = null;
      if (!this.deferred) this.finish(batch, i, this.now);
    }
    if (unit) store.endUnit();
  }

  /** Reads call `i`'s answer from `writer` (and empties it); the batch's last answer ends it. */
  private finish(batch: Batch, i: number, writer: ReplyWriter): void {
    const error = readSix(writer.bytes(), writer.length, this.six);
    writer.discard();
    if (error !== null) batch.failed ??= new Error(error);
    else read(batch.calls[i], this.six, batch.out[i]);
    if (--batch.pending === 0) batch.done(batch.failed);
  }

  /** The limiter call for `c`, in the reused call. */
  private fill(c: RlsCall): void {
    const l = this.limit;
    const call = this.call;
    const key = Buffer.from(c.key, 'latin1');
    const argv = call.argv;
    argv.reset();
    argv.push(key, 0, 0);
    argv.push(key, 0, key.length);
    l.algo = ALGO[c.algorithm];
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
    l.slot = -1;
    call.cost = c.hits;
  }
}

/**
 * The fixed window's stand-in limit: 2^52, beyond any count a window reaches (an RL.FIXEDWINDOW
 * counts in plain integers, here and in the backend's script, so the product bound the command puts
 * on limit x period_ms does not apply to it), so every call is allowed and counted.
 */
const COUNT_ALL = MAX_SCALED;

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
