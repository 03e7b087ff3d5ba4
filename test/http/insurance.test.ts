/**
 * The insurance limiter alone, with a fake clock: GCRA per policy (a full burst, then one unit per
 * emission interval), several policies all-or-nothing, a cost that can never fit, refunds, and the
 * bound on keys under a flood of new ones (fresh keys swept first, then the least recently used).
 */
import { describe, expect, it } from 'vitest';
import { InsuranceLimiter } from '../../src/http/insurance.ts';
import { resolvePolicies } from '../../src/http/policies.ts';

function clock(): { now: () => number; advance(ms: number): void } {
  let t = 1_000_000;
  return { now: () => t, advance: (ms) => { t += ms; } };
}

describe('the insurance limiter', () => {
  it('allows a full burst, then one unit per emission interval, with cellgate\'s fields', () => {
    const c = clock();
    const ins = new InsuranceLimiter(100, c.now);
    const { list } = resolvePolicies({ limit: 10, periodMs: 1000, burst: 3 });
    for (let i = 0; i < 3; i++) {
      const d = ins.decide('{k}:', list, 1);
      expect(d.limited).toBe(false);
      expect(d.results[0]).toMatchObject({ limited: false, limit: 3, remaining: 2 - i, retryAfterMs: -1, resetAfterMs: 100 * (i + 1) });
    }
    const refused = ins.decide('{k}:', list, 1);
    expect(refused.limited).toBe(true);
    expect(refused.results[0]).toMatchObject({ limited: true, remaining: 0, retryAfterMs: 100, resetAfterMs: 300 });
    c.advance(100);
    expect(ins.decide('{k}:', list, 1).results[0]).toMatchObject({ limited: false, remaining: 0 });
    c.advance(300);
    expect(ins.decide('{k}:', list, 0).results[0]).toMatchObject({ limited: false, remaining: 3, resetAfterMs: 0 });
  });

  it('a limit that does not divide its period (3 per second) still gives its whole burst', () => {
    const ins = new InsuranceLimiter(100, clock().now);
    const { list } = resolvePolicies({ limit: 3, periodMs: 1000 });
    expect([1, 2, 3, 4].map(() => ins.decide('{k}:', list, 1).limited)).toEqual([false, false, false, true]);
  });

  it('several policies: spent on all or on none; a cost beyond a capacity never passes (retry -1)', () => {
    const ins = new InsuranceLimiter(100, clock().now);
    const { list } = resolvePolicies([{ name: 's', limit: 2, periodMs: 1000 }, { name: 'h', limit: 5, periodMs: 3_600_000 }]);
    expect(ins.decide('{u}:', list, 1).limited).toBe(false);
    expect(ins.decide('{u}:', list, 1).limited).toBe(false);
    const refused = ins.decide('{u}:', list, 1);
    expect(refused.limited).toBe(true);
    // The hourly policy would have allowed: it shows what it holds, nothing was spent on it.
    expect(refused.results[1]).toMatchObject({ limited: false, remaining: 3 });
    expect(ins.decide('{u}:', list, 0).results[1].remaining).toBe(3);
    const never = ins.decide('{v}:', list, 6);
    expect(never.results[1]).toMatchObject({ limited: true, retryAfterMs: -1 });
  });

  it('refund gives units back, never fresher than fresh', () => {
    const ins = new InsuranceLimiter(100, clock().now);
    const { list } = resolvePolicies({ limit: 2, periodMs: 60_000 });
    ins.decide('{r}:', list, 1);
    ins.decide('{r}:', list, 1);
    expect(ins.decide('{r}:', list, 1).limited).toBe(true);
    ins.refund('{r}:', list, 5);
    expect(ins.size).toBe(0);
    expect(ins.decide('{r}:', list, 0).results[0].remaining).toBe(2);
  });

  it('never holds more than maxKeys keys under a flood of new ones; keys back to fresh go first, then the least recently used', () => {
    const c = clock();
    const ins = new InsuranceLimiter(50, c.now);
    const { list } = resolvePolicies({ limit: 1, periodMs: 1000 });
    for (let i = 0; i < 10_000; i++) {
      ins.decide(`{flood-${i}}:`, list, 1);
      expect(ins.size).toBeLessThanOrEqual(50);
    }
    // A key in use survives a flood as long as it is among the 50 most recently used...
    ins.clear();
    ins.decide('{kept}:', list, 1);
    for (let i = 0; i < 48; i++) ins.decide(`{other-${i}}:`, list, 1);
    expect(ins.decide('{kept}:', list, 1).limited).toBe(true);
    // ...and keys back to fresh make room before any live one is evicted.
    c.advance(1000);
    ins.decide('{live}:', list, 1);
    for (let i = 0; i < 49; i++) ins.decide(`{new-${i}}:`, list, 1);
    expect(ins.decide('{live}:', list, 1).limited).toBe(true);
    expect(ins.size).toBeLessThanOrEqual(50);
  });
});
