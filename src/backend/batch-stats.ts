/**
 * What the batches of limiter calls did (src/backend/limiter-batches.ts), for INFO backend and the
 * metrics: how many scripts carried how many calls, and how the batch sizes were spread.
 */

/** Batch sizes counted: 1, 2-3, 4-7, ... , 128-255, 256 (each a power of two up to the next). */
export const BATCH_SIZE_LABELS = ['1', '2-3', '4-7', '8-15', '16-31', '32-63', '64-127', '128-255', '256'];

export class BatchStats {
  /** Batches sent, and the limiter calls they carried. */
  batches = 0;
  calls = 0;
  /** Batches sent by size (BATCH_SIZE_LABELS). */
  readonly sizes: number[] = BATCH_SIZE_LABELS.map(() => 0);

  count(size: number): void {
    this.batches++;
    this.calls += size;
    this.sizes[Math.min(this.sizes.length - 1, 31 - Math.clz32(size))]++;
  }

  /** `1=5,2-3=0,...` (INFO backend_batch_sizes). */
  histogram(): string {
    return BATCH_SIZE_LABELS.map((label, i) => `${label}=${this.sizes[i]}`).join(',');
  }
}
