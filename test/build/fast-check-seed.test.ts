/**
 * The suite's fast-check properties are deterministic: the setup file (test/helpers/fast-check-seed.ts)
 * gives each test a seed of its own name, so a property without its own seed draws the same cases
 * on every run, whatever ran before it.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { seedOf } from '../helpers/random.js';

const fixedByEnv = (process.env.CELLGATE_FC_SEED ?? '') !== '' || process.env.CELLGATE_SOAK === '1';

describe('fast-check seeding', () => {
  it.skipIf(fixedByEnv)('a property without a seed runs from the seed of its test\'s name', ({ task }) => {
    expect(fc.readConfigureGlobal().seed).toBe(seedOf(task.fullName));
    const failing = fc.check(fc.property(fc.integer(), (n) => n !== n));
    expect(failing.failed).toBe(true);
    expect(failing.seed, 'the seed fast-check reports on failure').toBe(seedOf(task.fullName));
  });

  it('the same cases twice in one test, in any order of tests', () => {
    const seen: number[][] = [];
    for (let i = 0; i < 2; i++) {
      const cases: number[] = [];
      fc.assert(fc.property(fc.integer(), (n) => {
        cases.push(n);
      }));
      seen.push(cases);
    }
    expect(seen[0]).toHaveLength(fc.readConfigureGlobal().numRuns!);
    expect(seen[1]).toEqual(seen[0]);
  });

  it('another test, another seed', ({ task }) => {
    expect(seedOf(task.fullName)).not.toBe(seedOf(`${task.fullName} `));
    expect(fc.readConfigureGlobal().seed).toBeDefined();
  });
});
