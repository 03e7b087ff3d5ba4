/**
 * How cellgate is run: these V8 flags, and this environment for glibc's allocator. `npm start`, the
 * `cellgate-server` bin (its shebang) and the Docker image pass the same ones
 * (test/server/node-flags.test.ts keeps them in step), so the benchmarks measure what users run.
 * Why these: see the top of src/main.ts.
 */
export const NODE_FLAGS = ['--max-semi-space-size=8', '--single-threaded-gc'];
export const NODE_ENV = { MALLOC_MMAP_THRESHOLD_: '131072' };
