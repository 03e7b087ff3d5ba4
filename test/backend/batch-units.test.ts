/**
 * Units in batches (LimiterBatches.addUnit): the calls of a unit (a transaction's, a rate limit
 * service request's limits) are never cut between two batches, so one script run decides them all
 * with nothing in between. A fake backend keeps the bytes of each script the class sends (no socket,
 * no Redis), read back into the calls each carried, in order.
 */
import { describe, expect, it } from 'vitest';
import { BatchStats } from '../../src/backend/batch-stats.js';
import { LimiterBatches, MAX_BATCH_BYTES, MAX_BATCH_CALLS, type BatchedCall } from '../../src/backend/limiter-batches.js';
import { LIMITER_SCRIPT } from '../../src/backend/limiter-script.js';
import { newNode, type NodeState } from '../../src/backend/node-state.js';
import type { RedisBackend } from '../../src/backend/redis-backend.js';

/** A script sent: the ids of the calls it carried, in order, and its ARGV bytes. */
interface Sent {
  ids: number[];
  bytes: number;
}

/** The bulk strings of one RESP array (a command's frame). */
function elementsOf(frame: Buffer): Buffer[] {
  let at = frame.indexOf(0x0a) + 1;
  const n = Number(frame.toString('latin1', 1, at - 2));
  const out: Buffer[] = [];
  for (let i = 0; i < n; i++) {
    const end = frame.indexOf(0x0d, at);
    const len = Number(frame.toString('latin1', at + 1, end));
    out.push(frame.subarray(end + 2, end + 2 + len));
    at = end + 4 + len;
  }
  return out;
}

/** A batches object on a fake backend; each call's ARGV element carries its id, and it has one key. */
function setUp() {
  const sent: Sent[] = [];
  const connection = {
    sendCommand: (command: { toWritable(): Buffer }) => {
      // EVAL(SHA), the script or its SHA1, 0 (no KEYS), the batch's header; then per call its element and key.
      const elements = elementsOf(command.toWritable()).slice(4);
      const ids: number[] = [];
      let bytes = 0;
      for (let i = 0; i < elements.length; i += 2) {
        ids.push(elements[i].readUInt32LE(9));
        bytes += elements[i].length + elements[i + 1].length;
      }
      sent.push({ ids, bytes });
    },
  };
  const backend = {
    calls: 0,
    batchStats: new BatchStats(),
    connectionOf: () => connection,
    // Never answered: only what each script carried matters here.
    track: () => undefined,
    refreshSlots: () => undefined,
  } as unknown as RedisBackend;
  const batches = new LimiterBatches<BatchedCall>(backend, LIMITER_SCRIPT, { answer: () => undefined, sendAlone: () => undefined });
  const node = newNode('standalone');
  let next = 0;
  const call = (keyBytes = 8, on: NodeState = node): BatchedCall & { id: number } => {
    const id = next++;
    const argv = Buffer.alloc(58);
    argv.writeUInt32LE(id, 9);
    return { id, keys: [Buffer.alloc(keyBytes, 0x6b)], argv, node: on, frozen: true };
  };
  const ids = (calls: { id: number }[]): number[] => calls.map((c) => c.id);
  return { batches, sent, call, ids, node };
}

describe('LimiterBatches.addUnit', () => {
  it('a unit joins the open batch after the calls before it, and the calls after it follow in the same batch', () => {
    const { batches, sent, call, ids, node } = setUp();
    const a = call();
    batches.add(a);
    const unit = [call(), call(), call(), call()];
    expect(batches.addUnit(unit)).toBe(true);
    const b = call();
    batches.add(b);
    expect(node.queued).toBe(6);
    batches.flush();
    expect(sent.map((s) => s.ids)).toEqual([[a.id, ...ids(unit), b.id]]);
    expect(node.queued).toBe(0);
  });

  it('sent at the end of the turn when nothing else sends it', async () => {
    const { batches, sent, call, ids } = setUp();
    const unit = [call(), call()];
    batches.addUnit(unit);
    expect(sent).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(sent.map((s) => s.ids)).toEqual([ids(unit)]);
  });

  it('hostile: 256 limits (a request\'s most) beside a batch 10 calls from full: that batch is sent first, the unit whole in the next', () => {
    const { batches, sent, call, ids } = setUp();
    const before = Array.from({ length: MAX_BATCH_CALLS - 10 }, () => call());
    for (const c of before) batches.add(c);
    const unit = Array.from({ length: MAX_BATCH_CALLS }, () => call());
    expect(batches.addUnit(unit)).toBe(true);
    // The unit filled a batch of its own: sent at once.
    expect(sent.map((s) => s.ids)).toEqual([ids(before), ids(unit)]);
    const after = call();
    batches.add(after);
    batches.flush();
    expect(sent.map((s) => s.ids)).toEqual([ids(before), ids(unit), [after.id]]);
  });

  it('hostile, by bytes: 256 limits of 3.9 KB keys beside a batch of 900 KB go whole in the next batch', () => {
    const { batches, sent, call, ids } = setUp();
    const before = Array.from({ length: 15 }, () => call(60_000));
    for (const c of before) batches.add(c);
    const unit = Array.from({ length: 256 }, () => call(3_900));
    expect(batches.addUnit(unit)).toBe(true);
    batches.flush();
    expect(sent.map((s) => s.ids)).toEqual([ids(before), ids(unit)]);
    for (const s of sent) expect(s.bytes).toBeLessThanOrEqual(MAX_BATCH_BYTES);
  });

  it('a unit larger than a batch carries (calls or bytes), or on several nodes, is refused whole: nothing added', () => {
    const { batches, sent, call, node } = setUp();
    const a = call();
    batches.add(a);
    expect(batches.addUnit(Array.from({ length: MAX_BATCH_CALLS + 1 }, () => call()))).toBe(false);
    expect(batches.addUnit(Array.from({ length: 129 }, () => call(Math.ceil(MAX_BATCH_BYTES / 128))))).toBe(false);
    expect(batches.addUnit([call(), call(8, newNode('10.0.0.2:6379'))])).toBe(false);
    expect(node.queued).toBe(1);
    batches.flush();
    expect(sent.map((s) => s.ids)).toEqual([[a.id]]);
    expect(node.queued).toBe(0);
  });

  it('bounded fuzz: calls and units of random sizes; each unit in one batch, consecutive; order kept; no batch past its bounds', () => {
    let seed = 20261203;
    const random = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return Math.floor((seed / 2147483648) * n);
    };
    const { batches, sent, call, ids, node } = setUp();
    const order: number[] = [];
    const units: number[][] = [];
    let largestCall = 0;
    for (let step = 0; step < 1500; step++) {
      if (random(5) === 0) {
        const unit = Array.from({ length: 2 + random(300) }, () => call(random(4) === 0 ? 6_000 : 20));
        if (batches.addUnit(unit)) {
          units.push(ids(unit));
          order.push(...ids(unit));
        }
      } else {
        const c = call(random(20) === 0 ? 64 * 1024 : 20);
        largestCall = Math.max(largestCall, 58 + c.keys[0].length);
        batches.add(c);
        order.push(c.id);
      }
      if (random(100) === 0) batches.flush();
    }
    batches.flush();
    expect(node.queued).toBe(0);
    expect(units.length).toBeGreaterThan(50);
    expect(sent.flatMap((s) => s.ids)).toEqual(order);
    const batchOf = new Map<number, number>();
    sent.forEach((s, b) => s.ids.forEach((id) => batchOf.set(id, b)));
    for (const unit of units) expect(new Set(unit.map((id) => batchOf.get(id))).size).toBe(1);
    for (const s of sent) {
      expect(s.ids.length).toBeLessThanOrEqual(MAX_BATCH_CALLS);
      // A plain call may take a batch past the bound by itself (then it is sent); a unit never does.
      expect(s.bytes).toBeLessThan(MAX_BATCH_BYTES + largestCall);
    }
  });
});
