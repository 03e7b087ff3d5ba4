/**
 * The loading thread's side of the journal read-ahead: starts the worker (journal-read-worker.ts)
 * on the incremental files, hands its messages over in order, gives ring slots back, and turns the
 * worker's own failure (it threw, it exited, it could not start) into a message too, so the load
 * can go on without it: a failed worker is reported, never fatal. The worker is unref'd and stopped
 * with the load, whatever the load's outcome.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { Server } from '../server/server.js';
import {
  ABORT, allocateReadRing, CONSUMED, WAKE_AT, type ReadRing, type ReadWorkerData, type ReadWorkerMessage,
} from './journal-read-ring.js';

/** The worker failed: what it said, or how it ended. */
export interface ReadAheadFailed {
  kind: 'failed';
  reason: string;
}

export class JournalReadAhead {
  readonly ring: ReadRing = allocateReadRing();
  private readonly worker: Worker;
  private readonly queue: (ReadWorkerMessage | ReadAheadFailed)[] = [];
  private head = 0;
  private wake: (() => void) | null = null;
  private stopped = false;

  /** Starts reading `paths` (in order) ahead; throws when the worker cannot be created. */
  constructor(paths: string[], failAfterBatches = 0) {
    const data: ReadWorkerData = {
      paths,
      control: this.ring.control.buffer as SharedArrayBuffer,
      ints: this.ring.ints.buffer as SharedArrayBuffer,
      numbers: this.ring.numbers.buffer as SharedArrayBuffer,
      failAfterBatches,
    };
    this.worker = new Worker(new URL('./journal-read-worker.js', import.meta.url), { workerData: data });
    this.worker.unref();
    this.worker.on('message', (m: ReadWorkerMessage) => this.push(m));
    this.worker.on('error', (e: Error) => this.push({ kind: 'failed', reason: e.message }));
    this.worker.on('messageerror', (e: Error) => this.push({ kind: 'failed', reason: `a message could not be read: ${e.message}` }));
    // After its last message the worker ends; an exit before that is a failure (the loader reads no further).
    this.worker.on('exit', (code: number) => this.push({ kind: 'failed', reason: `the worker exited (code ${code}) before it was done` }));
  }

  private push(m: ReadWorkerMessage | ReadAheadFailed): void {
    if (this.stopped) return;
    this.queue.push(m);
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  /** The next message, in the worker's order (a failure comes after what the worker posted before it). */
  async next(): Promise<ReadWorkerMessage | ReadAheadFailed> {
    while (this.head === this.queue.length) await new Promise<void>((resolve) => (this.wake = resolve));
    const m = this.queue[this.head];
    this.queue[this.head++] = undefined as never;
    if (this.head === this.queue.length) {
      this.queue.length = 0;
      this.head = 0;
    }
    return m;
  }

  /** The oldest batch is applied: its slot is free for the worker again. */
  release(): void {
    const control = this.ring.control;
    const consumed = Atomics.add(control, CONSUMED, 1) + 1;
    const wakeAt = Atomics.load(control, WAKE_AT);
    if (wakeAt !== 0 && consumed >= wakeAt) Atomics.notify(control, CONSUMED);
  }

  /** Stops the worker (done, refused or failed); idempotent. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    Atomics.store(this.ring.control, ABORT, 1);
    Atomics.notify(this.ring.control, CONSUMED);
    void this.worker.terminate();
  }
}

/**
 * The read-ahead on `paths` (aof-load-worker yes), or null: not asked for, no file, a single CPU to
 * run on (the worker would only take turns with the loading thread), or the worker could not start
 * (logged: the files are then read on the loading thread).
 */
export function startReadAhead(server: Server, paths: string[]): JournalReadAhead | null {
  const mode = server.config.get('aof-load-worker');
  if (mode === 'no' || paths.length === 0 || (mode === 'yes' && availableParallelism() < 2)) return null;
  try {
    return new JournalReadAhead(paths, mode === 'test-fail' ? 1 : 0);
  } catch (e) {
    server.log.warning(`journal read-ahead worker not started (${(e as Error).message}): loading on the main thread`);
    return null;
  }
}
