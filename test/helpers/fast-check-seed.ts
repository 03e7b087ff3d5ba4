/**
 * Every fast-check property runs from a fixed seed (vitest setupFiles, both configs): without one,
 * fast-check seeds from the clock, so a rare counterexample shows up in one run of twenty and never
 * again. The seed is derived from the test's file and full name, so it does not depend on which
 * tests ran before or in what order, and differs between tests. A property that passes its own
 * `seed` keeps it.
 *
 * On failure fast-check's message names the seed (`{ seed: N, path: ... }`); to replay it, or to
 * run every property from one seed, set CELLGATE_FC_SEED=N. With CELLGATE_SOAK=1 each test draws a
 * fresh seed (printed) and properties without their own numRuns run 10 times as many cases.
 */
import fc from 'fast-check';
import { beforeEach } from 'vitest';
import { seedOf } from './random.js';

const DEFAULT_RUNS = 100;
const SOAK = process.env.CELLGATE_SOAK === '1';
const FIXED = process.env.CELLGATE_FC_SEED;

beforeEach((ctx) => {
  // The file's path (relative to the project) > the suites > the test.
  const name = ctx.task.fullName;
  let seed: number;
  if (FIXED !== undefined && FIXED !== '') seed = Number(FIXED) | 0;
  else if (SOAK) {
    seed = (Math.random() * 2 ** 32) | 0;
    console.log(`[fast-check] ${name}: seed ${seed} (replay: CELLGATE_FC_SEED=${seed})`);
  } else seed = seedOf(name);
  fc.configureGlobal({ ...fc.readConfigureGlobal(), seed, numRuns: SOAK ? 10 * DEFAULT_RUNS : DEFAULT_RUNS });
});
