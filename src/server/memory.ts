/**
 * `maxmemory`: how much memory the server uses, and eviction when it is over the limit (SPEC §4).
 *
 * Measuring: `process.memoryUsage()` costs microseconds (it walks V8's heap spaces), too much to call
 * per command, and its heapUsed counts garbage until V8 collects it. So the figure compared with
 * maxmemory is an estimate refreshed from real measurements:
 *
 *   used ≈ base + (keys now − keys at base) × BYTES_PER_KEY
 *
 * where `base` is `heapUsed + arrayBuffers` (INFO's used_memory) measured (a) when maxmemory is set,
 * (b) right after every major GC (observed with a PerformanceObserver while maxmemory is set: the heap
 * then holds live data only) and
 * (c) by the periodic task whenever a fresh measurement is below the estimate (a minor GC freed
 * garbage). Measuring only downwards between major GCs keeps a burst of short-lived garbage (reply
 * buffers, parsed arguments) from evicting keys that nothing needs to evict; growth that is not keys
 * shows up at the next major GC, which V8 triggers as the old generation grows. BYTES_PER_KEY is
 * bench/RESULTS.md's measured cost of a limiter key (77 B at 1M keys) plus a share of the room the
 * keyspace's arrays keep for growth (they double).
 *
 * Evicting: before a command runs (as Redis's processCommand → performEvictions) and in the periodic
 * task, keys are removed one sampled victim at a time until the estimate is under the limit, at most
 * EVICT_PER_COMMAND keys per command and EVICT_TICK_MS of work per tick, so eviction never stalls the
 * server however far over the limit it is. A denyoom command (the limiter commands, which may create
 * a key) is refused with -OOM under noeviction, or when nothing is left to evict.
 */
import { PerformanceObserver, constants as perfConstants, performance } from 'node:perf_hooks';
import type { EvictionPolicy, Keyspace } from '../keyspace/keyspace.js';
import type { Config } from '../config.js';

/** Estimated bytes per limiter key (bench/RESULTS.md "Memory per key": 77 B at 1M keys, more while its arrays have room to grow; sliding logs more). */
export const BYTES_PER_KEY = 96;
/** At most this many keys are evicted before one command; the periodic task continues the work. */
const EVICT_PER_COMMAND = 64;
/** Time budget of eviction in one periodic tick. */
const EVICT_TICK_MS = 2;

export const OOM_MESSAGE = "OOM command not allowed when used memory > 'maxmemory'.";

/** `heapUsed + arrayBuffers`: INFO used_memory. */
export function usedMemoryNow(): number {
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

export class MemoryGuard {
  private baseBytes = usedMemoryNow();
  private baseKeys = 0;
  private observer: PerformanceObserver | null = null;
  /** xorshift32 state for victim sampling (a fixed seed: evictions reproduce for a given history). */
  private seed = 0x9e3779b9;
  private readonly random = (): number => {
    let x = this.seed;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.seed = x >>> 0;
    return this.seed / 4294967296;
  };

  constructor(
    private readonly config: Config,
    private readonly keyspace: Keyspace,
  ) {}

  /**
   * Watches major GCs (their aftermath is the best measurement of live memory) while maxmemory is
   * set, and not otherwise: a GC observer gets an entry for every scavenge too, which cost ~10% of
   * throughput at 800k PINGs/s (redis-benchmark -P 16). Called at start and after CONFIG SET.
   */
  configure(maxmemory: number): void {
    if (maxmemory > 0 && this.observer === null) {
      this.rebase(usedMemoryNow());
      this.observer = new PerformanceObserver((list) => {
        for (const entry of list.getEntries()) {
          const kind = (entry as unknown as { detail?: { kind?: number } }).detail?.kind;
          if (kind === perfConstants.NODE_PERFORMANCE_GC_MAJOR) {
            this.rebase(usedMemoryNow());
            return;
          }
        }
      });
      this.observer.observe({ entryTypes: ['gc'] });
    } else if (maxmemory === 0 && this.observer !== null) {
      this.observer.disconnect();
      this.observer = null;
    }
  }

  stop(): void {
    this.observer?.disconnect();
    this.observer = null;
  }

  private rebase(bytes: number): void {
    this.baseBytes = bytes;
    this.baseKeys = this.keyspace.size;
  }

  /** The estimate compared with maxmemory (see the file comment). */
  get estimatedBytes(): number {
    return this.baseBytes + (this.keyspace.size - this.baseKeys) * BYTES_PER_KEY;
  }

  /**
   * Called before each command when maxmemory > 0. Evicts a bounded number of keys if over the
   * limit; returns false if a denyoom command must be refused (-OOM).
   */
  beforeCommand(maxmemory: number): boolean {
    if (this.estimatedBytes <= maxmemory) return true;
    const policy = this.config.get('maxmemory-policy');
    if (policy === 'noeviction') return false;
    this.evict(policy as EvictionPolicy, maxmemory, EVICT_PER_COMMAND, Infinity);
    // Still over: refuse only if there is nothing left to evict (otherwise the periodic task and the
    // next commands keep evicting, as Redis lets commands run while eviction is in progress).
    return this.estimatedBytes <= maxmemory || this.keyspace.size > 0;
  }

  /** The periodic task's share: re-measure (downwards only, see above), then evict within a budget. */
  periodic(): void {
    const now = usedMemoryNow();
    if (now < this.estimatedBytes) this.rebase(now);
    const maxmemory = this.config.int('maxmemory');
    const policy = this.config.get('maxmemory-policy');
    if (maxmemory === 0 || policy === 'noeviction' || this.estimatedBytes <= maxmemory) return;
    this.evict(policy as EvictionPolicy, maxmemory, Infinity, performance.now() + EVICT_TICK_MS);
  }

  private evict(policy: EvictionPolicy, maxmemory: number, maxKeys: number, deadline: number): void {
    const samples = this.config.int('maxmemory-samples');
    for (let n = 0; n < maxKeys && this.estimatedBytes > maxmemory; n++) {
      const slot = this.keyspace.sampleVictim(policy, samples, this.random);
      if (slot === -1) return;
      this.keyspace.evictSlot(slot);
      if ((n & 63) === 63 && performance.now() > deadline) return;
    }
  }
}
