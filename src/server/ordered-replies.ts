/**
 * A client's replies kept in command order when some of them come later: a limiter call answered by
 * the backend (Client.defer) marks its place in the batch's output, later commands go on running,
 * and their replies wait behind the missing one. When the batch's replies are taken they are cut at
 * the marks: what comes before goes out as usual, the rest waits in the queue, and the queue's ready
 * prefix (up to the first reply still missing) is sent as replies arrive.
 */

/** A deferred reply's place in the output: its bytes once written. */
export interface DeferredSlot {
  bytes: Buffer | null;
}

export class OrderedReplies {
  /** Offsets in the shared writer (this batch) where a deferred reply belongs. */
  private offsets: number[] = [];
  private slots: DeferredSlot[] = [];
  /** Replies waiting behind a deferred one: bytes, or a slot (filled or not). */
  private queue: (Buffer | DeferredSlot)[] = [];
  /** Bytes waiting in the queue (the client's unsent output). */
  queuedBytes = 0;
  /** Deferred replies not answered yet. */
  pending = 0;

  /** Marks a reply to come at `offset` of this batch's output; returns its slot. */
  mark(offset: number): DeferredSlot {
    const slot: DeferredSlot = { bytes: null };
    this.offsets.push(offset);
    this.slots.push(slot);
    this.pending++;
    return slot;
  }

  /** A marked reply arrived. */
  fill(slot: DeferredSlot, bytes: Buffer): void {
    slot.bytes = bytes;
    this.pending--;
  }

  /** Whether this batch's output has marks (takeAround must cut it). */
  get marked(): boolean {
    return this.offsets.length > 0;
  }

  /** Whether replies wait behind a missing one (anything written now must wait too). */
  get waiting(): boolean {
    return this.queue.length > 0;
  }

  /** Forgets this batch's marks (its replies are being dropped: the connection closes). */
  dropMarks(): void {
    this.offsets = [];
    this.slots = [];
  }

  /** Cuts a batch's replies at its marks; returns what may go out now (or null). */
  takeAround(out: Buffer): Buffer | null {
    const offsets = this.offsets;
    const slots = this.slots;
    this.offsets = [];
    this.slots = [];
    const head = out.subarray(0, offsets[0]);
    let now: Buffer | null = null;
    if (this.queue.length > 0) {
      // Earlier deferred replies are still missing: the head waits behind them too.
      if (head.length > 0) this.enqueue(head);
    } else if (head.length > 0) {
      now = head;
    }
    for (let i = 0; i < offsets.length; i++) {
      this.queue.push(slots[i]);
      const end = i + 1 < offsets.length ? offsets[i + 1] : out.length;
      if (end > offsets[i]) this.enqueue(out.subarray(offsets[i], end));
    }
    return now;
  }

  /** Queues bytes behind the missing replies. */
  enqueue(bytes: Buffer): void {
    this.queue.push(bytes);
    this.queuedBytes += bytes.length;
  }

  /** Takes the queue's ready prefix (up to the first reply still missing), or null. */
  takeReady(): Buffer | null {
    const q = this.queue;
    let i = 0;
    const ready: Buffer[] = [];
    for (; i < q.length; i++) {
      const item = q[i];
      if (Buffer.isBuffer(item)) {
        ready.push(item);
        this.queuedBytes -= item.length;
      } else {
        const bytes = (item as DeferredSlot).bytes;
        if (bytes === null) break;
        ready.push(bytes);
      }
    }
    if (i > 0) q.splice(0, i);
    if (ready.length === 0) return null;
    return ready.length === 1 ? ready[0] : Buffer.concat(ready);
  }

  /** Drops the queue (the socket is gone). */
  clear(): void {
    this.queue = [];
    this.queuedBytes = 0;
  }
}
