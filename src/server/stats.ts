/**
 * Counters behind INFO stats, commandstats and limiter, and CONFIG RESETSTAT.
 */

export interface CommandStat {
  calls: number;
  usec: number;
  rejectedCalls: number;
  failedCalls: number;
  /**
   * Calls per duration bucket, not cumulative: `durationBuckets[i]` counts the calls that took more
   * than DURATION_BOUNDS_US[i - 1] and at most DURATION_BOUNDS_US[i] µs; the last slot is the
   * overflow (+Inf). Allocated once with the stat, so counting a call allocates nothing.
   */
  durationBuckets: Float64Array;
}

/**
 * Upper bounds (µs) of the `cellgate_command_duration_seconds` histogram buckets. A limiter call takes
 * a few µs, so Prometheus's default buckets (5 ms to 10 s) would put every call in the first one:
 * these start at 10 µs and go to 1 s, in the usual 1-2.5-5 steps.
 */
export const DURATION_BOUNDS_US: readonly number[] = [10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 100_000, 1_000_000];
const DURATION_BUCKETS = DURATION_BOUNDS_US.length;

/**
 * Counts one call of `durationUs` in its histogram bucket: a walk up from the first bound, so a
 * typical call (under 10 or 25 µs) costs one or two comparisons and an increment.
 */
export function recordDuration(stat: CommandStat, durationUs: number): void {
  let b = 0;
  while (b < DURATION_BUCKETS && durationUs > DURATION_BOUNDS_US[b]) b++;
  stat.durationBuckets[b]++;
}

export interface LimiterStat {
  allowed: number;
  limited: number;
}

const OPS_SAMPLES = 16;

/**
 * One limiter's counters, found once and kept until the next CONFIG RESETSTAT (a Map lookup by name
 * on every call was 2% of a CL.THROTTLE).
 */
export class LimiterCounter {
  private stat: LimiterStat | null = null;
  private generation = -1;
  constructor(readonly name: string) {}

  count(stats: Stats, limited: boolean): void {
    if (this.generation !== stats.generation || this.stat === null) {
      this.stat = stats.limiter(this.name);
      this.generation = stats.generation;
    }
    if (limited) this.stat.limited++;
    else this.stat.allowed++;
  }
}

/** The next Stats generation (see Stats.generation). */
let nextGeneration = 1;

export class Stats {
  totalConnections = 0;
  rejectedConnections = 0;
  totalCommands = 0;
  netInputBytes = 0;
  netOutputBytes = 0;
  errorReplies = 0;
  authFailures = 0;
  /** Commands refused by ACL: the command itself, or one of its keys (INFO acl_access_denied_cmd/_key). */
  aclDeniedCmd = 0;
  aclDeniedKey = 0;
  /** Clients closed by client-query-buffer-limit (or the pre-auth 1 MB) and by client-output-buffer-limit. */
  queryBufferLimitDisconnections = 0;
  outputLimitDisconnections = 0;
  keyspaceHits = 0;
  keyspaceMisses = 0;
  /** accept() failures on a listener (EMFILE/ENFILE: no descriptor left), logged and survived. */
  acceptErrors = 0;
  /** TLS connections closed because their handshake took longer than tls-handshake-timeout. */
  tlsHandshakeTimeouts = 0;
  readonly commands = new Map<string, CommandStat>();
  readonly limiters = new Map<string, LimiterStat>();
  readonly errors = new Map<string, number>();
  /**
   * Changed by reset(): counters held outside the maps (LimiterCounter, the server's) are stale.
   * Unique across instances too, so a counter that last counted into another Stats (the warm-up's
   * scratch server, src/server/warmup.ts) never takes this one's generation for its own.
   */
  generation = nextGeneration++;

  private opsSamples = new Float64Array(OPS_SAMPLES);
  private opsIndex = 0;
  private lastSampleMs = Date.now();
  private lastSampleCommands = 0;

  command(name: string): CommandStat {
    let s = this.commands.get(name);
    if (s === undefined) {
      s = { calls: 0, usec: 0, rejectedCalls: 0, failedCalls: 0, durationBuckets: new Float64Array(DURATION_BUCKETS + 1) };
      this.commands.set(name, s);
    }
    return s;
  }

  limiter(name: string): LimiterStat {
    let s = this.limiters.get(name);
    if (s === undefined) {
      s = { allowed: 0, limited: 0 };
      this.limiters.set(name, s);
    }
    return s;
  }

  /** Counts an error reply by its code (INFO errorstats). */
  error(code: string): void {
    this.errorReplies++;
    this.errors.set(code, (this.errors.get(code) ?? 0) + 1);
  }

  /** Called from the server's periodic task, as Redis's trackInstantaneousMetric. */
  sampleOps(): void {
    const now = Date.now();
    const elapsed = now - this.lastSampleMs;
    if (elapsed <= 0) return;
    this.opsSamples[this.opsIndex] = ((this.totalCommands - this.lastSampleCommands) * 1000) / elapsed;
    this.opsIndex = (this.opsIndex + 1) % OPS_SAMPLES;
    this.lastSampleMs = now;
    this.lastSampleCommands = this.totalCommands;
  }

  get instantaneousOps(): number {
    let sum = 0;
    for (const v of this.opsSamples) sum += v;
    return Math.round(sum / OPS_SAMPLES);
  }

  reset(): void {
    this.totalConnections = 0;
    this.rejectedConnections = 0;
    this.totalCommands = 0;
    this.netInputBytes = 0;
    this.netOutputBytes = 0;
    this.errorReplies = 0;
    this.authFailures = 0;
    this.aclDeniedCmd = 0;
    this.aclDeniedKey = 0;
    this.queryBufferLimitDisconnections = 0;
    this.outputLimitDisconnections = 0;
    this.keyspaceHits = 0;
    this.keyspaceMisses = 0;
    this.acceptErrors = 0;
    this.tlsHandshakeTimeouts = 0;
    this.commands.clear();
    this.limiters.clear();
    this.errors.clear();
    this.lastSampleCommands = 0;
    this.generation = nextGeneration++;
  }
}
