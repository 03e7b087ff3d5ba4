/**
 * RL.LEAKYBUCKET, pure: a literal queue (every accepted unit gets a turn, one drain interval after
 * the previous one or on arrival, and holds its place until its turn plus one interval) replayed
 * against the implementation; replies (delay_ms included), TTLs and timing properties must agree.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { caseArb, FakeKey, refundCaseArb, replay, T0, type Model, type Params } from './rl-harness.ts';

/** Times in ticks of 1/limit ms, so the drain interval period_ms/limit is exactly period_ms ticks. */
class Queue implements Model {
  private turns: number[] = [];
  constructor(private readonly p: Params) {}
  private occupied(t: number): number {
    const now = t * this.p.limit;
    return this.turns.filter((turn) => turn + this.p.periodMs > now).length;
  }
  private firstTurn(t: number): number {
    const now = t * this.p.limit;
    const last = this.turns.length > 0 ? this.turns[this.turns.length - 1] : -Infinity;
    return Math.max(now, last + this.p.periodMs);
  }
  allows(cost: number, t: number): boolean {
    return this.occupied(t) + cost <= this.p.burst;
  }
  record(cost: number, t: number): void {
    let turn = this.firstTurn(t);
    for (let i = 0; i < cost; i++, turn += this.p.periodMs) this.turns.push(turn);
    const now = t * this.p.limit;
    this.turns = this.turns.filter((x, i) => x + this.p.periodMs > now || i === this.turns.length - 1);
  }
  isFresh(t: number): boolean {
    return this.occupied(t) === 0;
  }
  delay(_cost: number, t: number): number {
    return Math.ceil((this.firstTurn(t) - t * this.p.limit) / this.p.limit);
  }
  /** The newest `units` places still taken are freed (turns are back to back while any is taken). */
  refund(units: number, t: number): void {
    const drop = Math.min(units, this.occupied(t));
    this.turns.splice(this.turns.length - drop, drop);
  }
}

describe('RL.LEAKYBUCKET (pure)', () => {
  it('REFUND agrees with the literal queue (the newest places freed) on random timelines', () => {
    fc.assert(fc.property(refundCaseArb(true), ({ p, startMs, steps }) => {
      expect(replay('leakybucket', p, new Queue(p), startMs, steps)).toBeNull();
    }), { numRuns: 300 });
  });

  it('agrees with a literal queue on random timelines (replies, delay_ms, TTL, exact retry/reset)', () => {
    fc.assert(fc.property(caseArb(true), ({ p, startMs, steps }) => {
      expect(replay('leakybucket', p, new Queue(p), startMs, steps)).toBeNull();
    }), { numRuns: 300 });
  });

  it('nginx limit_req rate=5r/s burst=5: six accepted, delayed 0, 200, ..., 1000 ms; the seventh refused', () => {
    const k = new FakeKey('leakybucket', { limit: 5, periodMs: 1000, burst: 6 });
    const delays = [];
    for (let i = 0; i < 6; i++) {
      const r = k.call(1, T0);
      expect(r.limited).toBe(0);
      expect(r.remaining).toBe(5 - i);
      delays.push(r.delayMs);
    }
    expect(delays).toEqual([0, 200, 400, 600, 800, 1000]);
    expect(k.call(1, T0)).toEqual({ limited: 1, limit: 6, remaining: 0, retryAfterMs: 200, resetAfterMs: 1200, delayMs: 0 });
    // 200 ms later one place is free again; the newcomer's turn is after the five still waiting.
    expect(k.call(1, T0 + 200)).toEqual({ limited: 0, limit: 6, remaining: 0, retryAfterMs: -1, resetAfterMs: 1200, delayMs: 1000 });
  });

  it('a request with COST n takes n places and waits for the first of them', () => {
    const k = new FakeKey('leakybucket', { limit: 10, periodMs: 1000, burst: 5 });
    expect(k.call(3, T0)).toMatchObject({ limited: 0, remaining: 2, delayMs: 0, resetAfterMs: 300 });
    expect(k.call(2, T0)).toMatchObject({ limited: 0, remaining: 0, delayMs: 300, resetAfterMs: 500 });
    expect(k.call(1, T0 + 50)).toMatchObject({ limited: 1, retryAfterMs: 50 });
  });

  it('does not drift: a request every 3 ms at 7 per 100 ms keeps the exact pace for 10^5 requests', () => {
    const p = { limit: 7, periodMs: 100, burst: 3 };
    const k = new FakeKey('leakybucket', p);
    let allowed = 0;
    for (let i = 0; i < 100_000; i++) if (k.call(1, T0 + 3 * i).limited === 0) allowed++;
    // 299997 ms of draining at 7/100 ms, plus the 3 places of the burst at most.
    const drained = Math.floor((3 * 99_999 * 7) / 100);
    expect(allowed).toBeGreaterThanOrEqual(drained);
    expect(allowed).toBeLessThanOrEqual(drained + 3);
  });
});
