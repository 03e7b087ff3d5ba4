/**
 * The periodic task, as Redis's serverCron: active expiry (in short steps between I/O turns), the
 * memory check, the snapshot and journal crons, the clock's resync, TLS handshake timeouts, idle
 * client timeouts and the soft output limit. It runs `hz` times a second.
 */
import { performance } from 'node:perf_hooks';
import type { Server } from './server.js';

/**
 * Time budget of one active-expiry step. Short, because every client with a request in flight waits
 * for it: 2 ms steps put the p99 of a pipelined CL.THROTTLE load with expiring keys at 3–3.4 ms,
 * 0.5 ms steps at 2–2.3 ms (same reclaim rate: more steps per tick).
 */
const EXPIRE_CYCLE_MAX_MS = 0.5;
/** Slots one active-expiry step examines at most (~0.2 ms when none has expired). */
const EXPIRE_STEP_SLOTS = 65536;
/**
 * While steps find more than 10% of the keys they examine expired (Redis's
 * ACTIVE_EXPIRE_CYCLE_ACCEPTABLE_STALE), more steps follow between I/O turns, up to this many per
 * periodic tick: at hz 10, 48 × 0.5 ms is a quarter of the time, Redis's bound for its slow expiry
 * cycle. A million keys expiring together are then reclaimed in seconds, not minutes, and no client
 * ever waits more than one 0.5 ms step. Under a steady trickle of expiring keys one step per tick is
 * enough (lookups remove the expired keys they meet); sweeping again and again for the few found each
 * time took a tenth of the CPU at 100k busy keys.
 */
const EXPIRE_STEPS_PER_TICK = 48;

export class Cron {
  /** Periodic task runs since start (INFO stats periodic_task_runs: proof that it goes on). */
  runs = 0;
  /** Active expiry steps run since the last periodic tick. */
  private expireSteps = 0;
  private timer: NodeJS.Timeout | null = null;
  private readonly expireTask: () => void;

  constructor(private readonly server: Server) {
    this.expireTask = server.tasks.guard('active expiry', () => this.expireCycle());
  }

  /** (Re)starts the periodic task at `hz` runs a second (at start and after CONFIG SET hz). */
  schedule(hz: number): void {
    this.stop();
    this.timer = this.server.tasks.every('periodic task', Math.max(1, Math.floor(1000 / hz)), () => this.periodic());
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * One step (≤ EXPIRE_CYCLE_MAX_MS) of the active expiry cycle; if more than 10% of what it examined
   * had expired, another step is queued behind pending I/O (setImmediate), up to
   * EXPIRE_STEPS_PER_TICK per tick.
   */
  private expireCycle(): void {
    const server = this.server;
    // Not while the snapshot loads (as Redis): the loader finds duplicate keys by looking them up.
    if (server.shuttingDown || server.snapshots.loading) return;
    // Replies of this turn go out first: the step may take its whole 2 ms budget.
    server.flushPending();
    const deadline = performance.now() + EXPIRE_CYCLE_MAX_MS;
    const ks = server.keyspace;
    const removed = ks.expireStep(server.clock.nowMs(), EXPIRE_STEP_SLOTS, () => performance.now() > deadline);
    this.expireSteps++;
    const stale = removed * 10 > ks.lastStepKeys;
    if (removed > 0 && stale && this.expireSteps < EXPIRE_STEPS_PER_TICK) setImmediate(this.expireTask);
  }

  /**
   * The periodic task: active expiry, idle timeouts, metrics (Redis's serverCron). Each part runs
   * guarded: one that throws (process.memoryUsage() with no descriptor left, say) is logged and
   * counted, and the others still run.
   */
  private periodic(): void {
    const server = this.server;
    this.runs++;
    const nowMs = server.clock.nowMs();
    this.expireSteps = 0;
    this.expireCycle();
    // Not while the snapshot loads: a key evicted then would let a later duplicate of it in the file pass.
    if (!server.snapshots.loading) server.runPart('memory check', () => server.memory.periodic());
    server.stats.sampleOps();
    server.runPart('snapshot cron', () => server.snapshots.cron(nowMs));
    server.runPart('journal cron', () => server.journal.cron(nowMs));
    server.runPart('degraded modes', () => server.degraded.check());
    server.clock.resync();
    const now = Date.now();
    server.listeners.expireTlsHandshakes(now);
    const timeoutSec = server.config.int('timeout');
    const cutoff = timeoutSec > 0 ? now - timeoutSec * 1000 : -Infinity;
    for (const client of server.clients.values()) {
      // A client blocked in a wait is not idle (as Redis's clientsCronHandleTimeout): its wait has its own timeout.
      if (client.lastInteractionMs < cutoff && !client.blocked) {
        server.log.verbose('closing idle client', { id: client.id, addr: client.addr });
        client.kill();
      } else if (client.checkSoftOutputLimit(now)) {
        // Sockets drain without a batch: the accounts follow here, as Redis's clientsCron.
        client.accountBuffers();
      }
    }
  }
}
