import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 30_000,
    // Two cores: run test files two at a time; each starts its own servers on free ports.
    maxWorkers: 2,
    reporters: ['default', './test/helpers/summary-reporter.ts'],
    // Every fast-check property from a seed of its test's name (CELLGATE_FC_SEED / CELLGATE_SOAK=1 to vary).
    setupFiles: ['./test/helpers/fast-check-seed.ts'],
  },
});
