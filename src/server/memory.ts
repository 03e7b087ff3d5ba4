/**
 * `maxmemory`: what counts against the limit, and eviction when it is over (docs/security.md).
 *
 * What is counted: the keys, not the process. maxmemory is compared with one figure, the one INFO
 * shows as used_memory (also used_memory_counted_for_evict, the same number):
 *
 *   used_memory = used_memory_startup + used_memory_dataset
 *
 * where used_memory_startup is the V8 heap in use plus array buffers (`heapUsed + arrayBuffers`)
 * measured once after a full GC during start-up (before the warm-up, whose code full collections
 * right after it made slower, and before the snapshot loads: the code and the empty server,
 * without the garbage start-up leaves, which made it read
 * ~17 MB for a process that holds 10-11 MB), and used_memory_dataset is Keyspace.datasetBytes: the
 * bytes of the records in use, the index table, the arena chunks of long keys and the
 * blobs, counted exactly as keys come and go (src/keyspace/key-table.ts). The heap as measured now
 * (keys, client buffers, garbage not yet collected) is INFO used_memory_heap; what it holds beyond
 * used_memory is mem_not_counted_for_evict. A maxmemory below used_memory_startup could never be met
 * by evicting and is refused (at start and by CONFIG SET).
 *
 * Why not a measurement of the process: it drifted and never came back down. The previous version
 * compared an estimate rebased on `process.memoryUsage()` after each major GC; but V8 keeps freed
 * pages, a GC measures whatever garbage and client buffers are live at that moment, and each major GC
 * after a burst of evictions measured higher, so lowering maxmemory below use evicted every key and
 * then refused every limiter call with -OOM for good. And it counted client buffers: a thousand
 * unauthenticated clients holding 1 MiB of unparsed input each evicted every limiter key. Client
 * buffers have their own limits (client-query-buffer-limit, client-output-buffer-limit, the 1 MB
 * before AUTH) and are shown apart (INFO mem_clients_normal); they are never a reason to forget a
 * limiter's state (Redis too leaves replica and AOF buffers out of what it compares with maxmemory:
 * mem_not_counted_for_evict). The counted figure falls by exactly a key's cost when a key goes, so
 * eviction stops at the limit, keeps the keys that fit, and the next call succeeds.
 *
 * Evicting: keys are removed one sampled victim at a time until the count is under the limit:
 * before a command runs (as Redis's processCommand → performEvictions), at most EVICT_PER_COMMAND
 * keys, and in background steps of at most EVICT_PER_STEP keys and EVICT_STEP_MS, chained with
 * setImmediate while the count stays over the limit (started by the periodic task or by a command
 * that left it over), as Redis continues with its evictionTimeProc. Between two steps the event loop
 * reads and answers clients, so eviction never stalls the server however far over the limit it is
 * (INFO eviction_step_max_keys shows the largest step), and lowering maxmemory by a million keys
 * converges in about a second rather than at the periodic task's pace. A denyoom command (the
 * limiter commands, which may create a key) is refused with -OOM under noeviction, or when nothing is
 * left to evict.
 */
import { performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { EvictionPolicy, Keyspace } from '../keyspace/keyspace.js';
import type { Config } from '../config.js';

/** At most this many keys are evicted before one command; the periodic task continues the work. */
const EVICT_PER_COMMAND = 64;
/** At most this many keys, and this much time, per background step. */
const EVICT_PER_STEP = 16_384;
const EVICT_STEP_MS = 2;

/** Full collections, each followed by an event-loop turn, before used_memory_startup is read. */
const STARTUP_GC_ROUNDS = 3;

export const OOM_MESSAGE = "OOM command not allowed when used memory > 'maxmemory'.";

let lastUsage: NodeJS.MemoryUsage | null = null;

/**
 * `process.memoryUsage()`, or the last figures it gave when it fails: it reads /proc/self/stat for
 * the RSS, which needs a file descriptor, so with every descriptor taken (a connection flood) it
 * throws EMFILE, and INFO, a client's ready check, must still answer.
 */
export function processMemory(): NodeJS.MemoryUsage {
  try {
    lastUsage = process.memoryUsage();
  } catch (e) {
    if (lastUsage === null) throw e;
  }
  return lastUsage;
}

/** `heapUsed + arrayBuffers` now: INFO used_memory_heap. */
export function heapBytesNow(): number {
  const m = processMemory();
  return m.heapUsed + m.arrayBuffers;
}

/** V8's full GC, reachable without starting node with --expose-gc (DEBUG GC, the start-up measure). */
export function fullGc(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}

export class MemoryGuard {
  /**
   * INFO used_memory_startup: the process before any key (see the file comment). A first figure
   * when the server is built; measureStartup() replaces it with the one after a full GC.
   */
  startupBytes = heapBytesNow();
  /** The most keys evicted by one step (one command's or one tick's share), INFO eviction_step_max_keys. */
  largestStep = 0;
  /** xorshift32 state for victim sampling (a fixed seed: evictions reproduce for a given history). */
  private seed = 0x9e3779b9;
  /** A background step is scheduled (setImmediate). */
  private stepping = false;
  private readonly stepNow = (): void => this.step();
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

  /** INFO used_memory, what maxmemory is compared with: startup + dataset (O(1): counters, no measurement). */
  get countedBytes(): number {
    return this.startupBytes + this.keyspace.datasetBytes;
  }

  /**
   * Measures used_memory_startup after a full GC, with no key yet (main.ts calls it before the
   * warm-up and before the port opens). Collections separated by event-loop turns: what start-up
   * leaves (configuration, module loading) is freed only once its pending callbacks have run, and
   * array buffers are given back after the collection that found them dead.
   */
  async measureStartup(): Promise<number> {
    for (let i = 0; i < STARTUP_GC_ROUNDS; i++) {
      fullGc();
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    fullGc();
    this.startupBytes = heapBytesNow();
    return this.startupBytes;
  }

  /**
   * Why a maxmemory cannot be used, or null: one below used_memory_startup could never be met by
   * evicting (the empty server is over it), so every limiter call would get -OOM. 0 is no limit.
   */
  refusal(maxmemoryBytes: number): string | null {
    if (maxmemoryBytes === 0 || maxmemoryBytes >= this.startupBytes) return null;
    return `maxmemory ${maxmemoryBytes} is below the ${this.startupBytes} bytes the server holds with no key (INFO used_memory_startup): ` +
      'every limiter call would be refused with OOM; set 0 (no limit) or more';
  }

  /**
   * Called before each command when maxmemory > 0. Evicts a bounded number of keys if over the
   * limit; returns false if a denyoom command must be refused (-OOM).
   */
  beforeCommand(maxmemory: number): boolean {
    if (this.startupBytes + this.keyspace.datasetBytes <= maxmemory) return true;
    const policy = this.config.get('maxmemory-policy');
    if (policy === 'noeviction') return false;
    this.evict(policy as EvictionPolicy, maxmemory, EVICT_PER_COMMAND, Infinity);
    if (this.countedBytes <= maxmemory) return true;
    // Still over: background steps continue, and the command is refused only if there is nothing
    // left to evict (as Redis lets commands run while eviction is in progress).
    this.schedule();
    return this.keyspace.size > 0;
  }

  /** Called by the periodic task: starts background eviction if the count is over the limit. */
  periodic(): void {
    const maxmemory = this.config.int('maxmemory');
    if (maxmemory > 0 && this.countedBytes > maxmemory) this.schedule();
  }

  private schedule(): void {
    if (this.stepping || this.keyspace.size === 0 || this.config.get('maxmemory-policy') === 'noeviction') return;
    this.stepping = true;
    setImmediate(this.stepNow);
  }

  /** One background step; schedules the next while still over the limit. */
  private step(): void {
    this.stepping = false;
    const maxmemory = this.config.int('maxmemory');
    const policy = this.config.get('maxmemory-policy');
    if (maxmemory === 0 || policy === 'noeviction' || this.countedBytes <= maxmemory) return;
    this.evict(policy as EvictionPolicy, maxmemory, EVICT_PER_STEP, performance.now() + EVICT_STEP_MS);
    if (this.countedBytes > maxmemory) this.schedule();
  }

  private evict(policy: EvictionPolicy, maxmemory: number, maxKeys: number, deadline: number): void {
    const samples = this.config.int('maxmemory-samples');
    let n = 0;
    while (n < maxKeys && this.countedBytes > maxmemory) {
      const slot = this.keyspace.sampleVictim(policy, samples, this.random);
      if (slot === -1) break;
      this.keyspace.evictSlot(slot);
      n++;
      if ((n & 63) === 0 && performance.now() > deadline) break;
    }
    if (n > this.largestStep) this.largestStep = n;
  }
}
