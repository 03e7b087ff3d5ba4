/**
 * The algorithm registry (src/limiters/registry.ts): one entry per RL.* algorithm, read by the
 * commands, the backend's script, the snapshot and journal checks, TYPE, INFO, the metrics and the
 * warm-up. These are its invariants: every tag, name and op is an algorithm's alone, and the tags are
 * those earlier files were written with.
 */
import { describe, expect, it } from 'vitest';
import { FREE_TYPE } from '../../src/keyspace/keyspace.ts';
import { ParamsProblem } from '../../src/limiters/algorithm.ts';
import { newGcraMsParams } from '../../src/limiters/gcra-ms.ts';
import { MAX_SCALED } from '../../src/limiters/rate-decision.ts';
import { ALGORITHMS, algorithmOfType, GCRA_KEY, KEY_TYPES, SCRIPT_OPS, typeName } from '../../src/limiters/registry.ts';
import { RefundEffect, newDecision } from '../../src/limiters/decision.ts';

describe('the algorithm registry', () => {
  it('gives every algorithm its own type tag, names and op code; 0 (a free slot) is nobody\'s', () => {
    for (const field of ['type', 'name', 'typeName', 'op'] as const) {
      const values = ALGORITHMS.map((a) => a[field]);
      expect(new Set(values).size, field).toBe(values.length);
    }
    expect(new Set(SCRIPT_OPS.map((o) => o.op)).size).toBe(SCRIPT_OPS.length);
    expect(algorithmOfType(FREE_TYPE)).toBeUndefined();
    expect(algorithmOfType(7)).toBeUndefined();
    for (const a of ALGORITHMS) {
      expect(algorithmOfType(a.type)).toBe(a);
      expect(a.name).toBe(a.typeName.toUpperCase());
      expect(a.op).toMatch(/^[a-z]$/); // uppercase is REFUND on the wire
      expect(a.type).toBeGreaterThanOrEqual(1);
      expect(a.type).toBeLessThanOrEqual(254); // 255 ends a snapshot's entries
    }
  });

  it('keeps the tags and names every earlier snapshot and journal was written with', () => {
    expect(KEY_TYPES).toEqual([[1, 'gcra'], [2, 'tokenbucket'], [3, 'leakybucket'], [4, 'fixedwindow'], [5, 'slidinglog'], [6, 'slidingwindow'], [7, 'block'], [8, 'concurrency']]);
    expect(GCRA_KEY.typeName).toBe('gcra');
    for (const [type, name] of KEY_TYPES) expect(typeName(type)).toBe(name);
  });

  it('checkParams: the buckets bound BURST x period_ms, the windows limit x period_ms, RL.GCRA its intervals', () => {
    const g = newGcraMsParams();
    const byName = Object.fromEntries(ALGORITHMS.map((a) => [a.name, a]));
    for (const name of ['TOKENBUCKET', 'LEAKYBUCKET']) {
      expect(byName[name].checkParams(1, 2 ** 30, 2 ** 22, g)).toBe(ParamsProblem.None);
      expect(byName[name].checkParams(1, 2 ** 30, 2 ** 22 + 1, g)).toBe(ParamsProblem.BurstProduct);
    }
    for (const name of ['FIXEDWINDOW', 'SLIDINGWINDOW', 'SLIDINGLOG']) {
      expect(byName[name].checkParams(2 ** 22, 2 ** 30, 1, g)).toBe(ParamsProblem.None);
      expect(byName[name].checkParams(2 ** 22 + 1, 2 ** 30, 1, g)).toBe(ParamsProblem.LimitProduct);
    }
    expect(byName.GCRA.checkParams(10, 1000, 10, g)).toBe(ParamsProblem.None);
    expect(g.limit).toBe(10);
    expect(byName.GCRA.checkParams(2_000_000, 1, 1, g)).toBe(ParamsProblem.ZeroInterval);
    expect(byName.GCRA.checkParams(1, 1e12, MAX_SCALED, g)).toBe(ParamsProblem.ToleranceOverflow);
  });

  it('every entry decides, stores and refunds through the one signature (a fresh key: full, then one spent, then given back)', () => {
    const d = newDecision();
    for (const a of ALGORITHMS) {
      const p = { limit: 5, periodMs: 1000, burst: 5, gcra: newGcraMsParams(), force: false };
      expect(a.checkParams(p.limit, p.periodMs, p.burst, p.gcra)).toBe(ParamsProblem.None);
      a.decide(p, 1, false, 0, 0, 0, undefined, 10_000, 10_000_000, d);
      expect([a.name, d.limited, d.remaining, d.write]).toEqual([a.name, false, 4, true]);
      d.blob = undefined;
      if (a.hasBlob) a.commit(p, 1, false, 0, 0, 0, undefined, 10_000, 10_000_000, d);
      expect(a.stateProblem(d.expireAtMs, d.a, d.b, d.c, d.blob)).toBeNull();
      const effect = a.refund(p, 1, true, d.a, d.b, d.c, d.blob, 10_000, 10_000_000, d);
      expect([a.name, effect]).toEqual([a.name, RefundEffect.Delete]);
    }
  });

  it('an entry that does not read C decides the same whatever C holds (the command then skips reading it)', () => {
    const d = newDecision();
    for (const a of ALGORITHMS.filter((x) => !x.readsC)) {
      const p = { limit: 5, periodMs: 1000, burst: 5, gcra: newGcraMsParams(), force: false };
      a.checkParams(p.limit, p.periodMs, p.burst, p.gcra);
      a.decide(p, 2, false, 0, 0, 0, undefined, 10_000, 10_000_000, d);
      const [sa, sb] = [d.a, d.b];
      a.decide(p, 1, true, sa, sb, 0, undefined, 10_100, 10_100_000, d);
      const withZero = { ...d };
      a.decide(p, 1, true, sa, sb, 12_345, undefined, 10_100, 10_100_000, d);
      expect({ ...d }, a.name).toEqual(withZero);
    }
  });
});
