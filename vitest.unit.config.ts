import { defineConfig } from 'vitest/config';

/**
 * The fast tier (`npm run test:unit`): pure tests of the rooms that never touch a socket — limiters
 * with a fake clock, the keyspace, the request parser and reply writer, argument parsing, the
 * snapshot format, the import check — no server process, no Redis. Run it while working; `npm test`
 * runs everything.
 */
export default defineConfig({
  test: {
    include: [
      'test/limiters/**/*.test.ts',
      'test/files/**/*.test.ts',
      'test/keyspace/**/*.test.ts',
      'test/store/**/*.test.ts',
      'test/concurrency/limiter.test.ts',
      'test/protocol/**/*.test.ts',
      'test/commands/**/*.test.ts',
      'test/persistence/format.test.ts',
      'test/persistence/dirty.test.ts',
      'test/persistence/bgsave-point-in-time.property.test.ts',
      'test/persistence/journal-replay.property.test.ts',
      'test/persistence/journal-format.test.ts',
      'test/persistence/journal-encode-bytes.test.ts',
      'test/persistence/journal-warm.test.ts',
      'test/transactions/keyspace-watch.test.ts',
      'test/server/tasks.test.ts',
      'test/server/ordered-replies.test.ts',
      'test/build/check-imports.test.ts',
      'test/build/lua.test.ts',
      'test/build/fast-check-seed.test.ts',
      'test/rls/config.test.ts',
      'test/rls/codec.test.ts',
      'test/rls/examples.test.ts',
      'test/build/commands-doc.test.ts',
      'test/backend/batch-units.test.ts',
      'test/http/insurance.test.ts',
    ],
    testTimeout: 60_000,
    reporters: ['default', './test/helpers/summary-reporter.ts'],
    // Every fast-check property from a seed of its test's name (CELLGATE_FC_SEED / CELLGATE_SOAK=1 to vary).
    setupFiles: ['./test/helpers/fast-check-seed.ts'],
  },
});
