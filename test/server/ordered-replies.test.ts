/**
 * The order of a client's replies when some come later (backend calls): what follows a missing
 * reply waits behind it, and goes out as soon as everything before it is there.
 */
import { describe, expect, it } from 'vitest';
import { OrderedReplies } from '../../src/server/ordered-replies.js';

const b = (s: string): Buffer => Buffer.from(s);

describe('OrderedReplies', () => {
  it('sends the head of a batch at once and keeps the rest behind each missing reply, in order', () => {
    const o = new OrderedReplies();
    // A batch: "+A" then a deferred reply, "+B", another deferred one, "+C".
    const first = o.mark(4);
    const second = o.mark(8);
    expect(o.pending).toBe(2);
    expect(o.takeAround(b('+A\r\n+B\r\n+C\r\n'))?.toString()).toBe('+A\r\n');
    expect(o.waiting).toBe(true);
    expect(o.marked).toBe(false);
    expect(o.queuedBytes).toBe(8);
    expect(o.takeReady()).toBeNull();
    o.fill(second, b(':2\r\n')); // the later one first: nothing may go out yet
    expect(o.takeReady()).toBeNull();
    o.fill(first, b(':1\r\n'));
    expect(o.pending).toBe(0);
    expect(o.takeReady()?.toString()).toBe(':1\r\n+B\r\n:2\r\n+C\r\n');
    expect(o.waiting).toBe(false);
    expect(o.queuedBytes).toBe(0);
  });

  it('queues a whole later batch behind a reply still missing from an earlier one', () => {
    const o = new OrderedReplies();
    const slot = o.mark(0);
    expect(o.takeAround(b('+X\r\n'))).toBeNull();
    o.enqueue(b('+Y\r\n'));
    expect(o.takeReady()).toBeNull();
    o.fill(slot, b(':0\r\n'));
    expect(o.takeReady()?.toString()).toBe(':0\r\n+X\r\n+Y\r\n');
  });

  it('forgets the marks of a batch that is dropped, and the queue of a closed socket', () => {
    const o = new OrderedReplies();
    o.mark(0);
    o.dropMarks();
    expect(o.marked).toBe(false);
    o.enqueue(b('+Z\r\n'));
    o.clear();
    expect(o.waiting).toBe(false);
    expect(o.queuedBytes).toBe(0);
  });
});
