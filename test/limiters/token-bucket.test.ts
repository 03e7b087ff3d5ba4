/**
 * RL.TOKENBUCKET, pure: a textbook token bucket (fractional tokens as exact rationals with
 * denominator period_ms, refilled continuously from the last request) replayed against the
 * implementation over random timelines; replies, TTLs and timing properties must agree.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { caseArb, FakeKey, refundCaseArb, replay, T0, type Model, type Params } from './rl-harness.ts';

/** tokens(t) = min(burst, tokens(s) + (t − s)·limit/period) after the last request at s. */
class TextbookBucket implements Model {
  /** Tokens × period_ms (exact: tokens are multiples of 1/period_ms). */
  private tokensScaled: number;
  private lastMs = -Infinity;
  constructor(private readonly p: Params) {
    this.tokensScaled = p.burst * p.periodMs;
  }
  private tokensAt(t: number): number {
    if (this.lastMs === -Infinity) return this.p.burst * this.p.periodMs;
    return Math.min(this.p.burst * this.p.periodMs, this.tokensScaled + (t - this.lastMs) * this.p.limit);
  }
  allows(cost: number, t: number): boolean {
    return cost * this.p.periodMs <= this.tokensAt(t);
  }
  record(cost: number, t: number): void {
    this.tokensScaled = this.tokensAt(t) - cost * this.p.periodMs;
    this.lastMs = t;
  }
  isFresh(t: number): boolean {
    return this.tokensAt(t) === this.p.burst * this.p.periodMs;
  }
  /** Tokens come back, up to BURST. */
  refund(units: number, t: number): void {
    if (this.lastMs === -Infinity) return;
    this.tokensScaled = Math.min(this.p.burst * this.p.periodMs, this.tokensAt(t) + units * this.p.periodMs);
    this.lastMs = t;
  }
}

describe('RL.TOKENBUCKET (pure)', () => {
  it('REFUND agrees with the textbook bucket (tokens back up to BURST) on random timelines', () => {
    fc.assert(fc.property(refundCaseArb(true), ({ p, startMs, steps }) => {
      expect(replay('tokenbucket', p, new TextbookBucket(p), startMs, steps)).toBeNull();
    }), { numRuns: 300 });
  });

  it('REFUND gives tokens back, never above BURST, deletes a key it makes full, creates none', () => {
    const k = new FakeKey('tokenbucket', { limit: 2, periodMs: 1000, burst: 4 });
    expect(k.refund(3, T0)).toEqual({ limited: 0, limit: 4, remaining: 4, retryAfterMs: -1, resetAfterMs: 0, delayMs: 0, effect: 0 });
    expect(k.exists).toBe(false);
    k.call(4, T0);
    expect(k.refund(1, T0)).toEqual({ limited: 0, limit: 4, remaining: 1, retryAfterMs: -1, resetAfterMs: 1500, delayMs: 0, effect: 1 });
    expect(k.pttl(T0)).toBe(1500);
    expect(k.refund(100, T0 + 10)).toMatchObject({ remaining: 4, resetAfterMs: 0, effect: 2 });
    expect(k.exists).toBe(false);
  });

  it('agrees with the textbook bucket on random timelines (replies, TTL, exact retry/reset)', () => {
    fc.assert(fc.property(caseArb(true), ({ p, startMs, steps }) => {
      expect(replay('tokenbucket', p, new TextbookBucket(p), startMs, steps)).toBeNull();
    }), { numRuns: 300 });
  });

  it('a new key starts full; a burst drains it; it refills at limit/period_ms', () => {
    const k = new FakeKey('tokenbucket', { limit: 2, periodMs: 1000, burst: 4 });
    for (let i = 0; i < 4; i++) expect(k.call(1, T0).limited).toBe(0);
    expect(k.call(1, T0)).toEqual({ limited: 1, limit: 4, remaining: 0, retryAfterMs: 500, resetAfterMs: 2000, delayMs: 0 });
    expect(k.call(1, T0 + 500)).toEqual({ limited: 0, limit: 4, remaining: 0, retryAfterMs: -1, resetAfterMs: 2000, delayMs: 0 });
    expect(k.call(5, T0 + 500).retryAfterMs).toBe(-1); // more than the capacity: never
    expect(k.call(0, T0 + 2500)).toEqual({ limited: 0, limit: 4, remaining: 4, retryAfterMs: -1, resetAfterMs: 0, delayMs: 0 });
  });

  it('does not drift over a long run at a rate with no exact ms interval (7 per 1000 ms)', () => {
    const p = { limit: 7, periodMs: 1000, burst: 1 };
    const k = new FakeKey('tokenbucket', p);
    const m = new TextbookBucket(p);
    let allowed = 0;
    let t = T0;
    // A request every ms for 100 simulated seconds, then compare the count with the exact rate.
    for (let i = 0; i < 100_000; i++, t++) {
      const r = k.call(1, t);
      expect(r.limited).toBe(m.allows(1, t) ? 0 : 1);
      if (r.limited === 0) {
        m.record(1, t);
        allowed++;
      }
    }
    // 1 token at start + 7 per second, refill granted at ceil(k·1000/7) ms.
    expect(allowed).toBe(1 + Math.floor((99_999 * 7) / 1000));
  });
});
