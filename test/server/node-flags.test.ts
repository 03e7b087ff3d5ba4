/**
 * cellgate's V8 flags are written in four places (npm start, the bin's shebang, the Docker image,
 * the benchmarks); they must say the same thing, or the benchmarks measure something users don't run.
 */
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';

const root = new URL('../../', import.meta.url);
const read = (path: string): string => readFileSync(new URL(path, root), 'utf8');

describe('node flags', () => {
  it('are the same in npm start, the shebang, the Dockerfile and bench/node-flags.mjs (flags and environment)', () => {
    const flags = JSON.parse(/NODE_FLAGS = (\[.*\]);/.exec(read('bench/node-flags.mjs'))![1].replace(/'/g, '"')) as string[];
    expect(flags.length).toBeGreaterThan(0);
    const start = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts.start;
    const shebang = read('src/main.ts').split('\n')[0];
    const entrypoint = /^ENTRYPOINT (.*)$/m.exec(read('Dockerfile'))![1];
    const env = [...read('bench/node-flags.mjs').matchAll(/(\w+): '([^']*)'/g)].map((m) => `${m[1]}=${m[2]}`);
    expect(env.length).toBeGreaterThan(0);
    // `exec`: npm's shell is replaced by node, so npm's SIGTERM reaches the server (test/server/config-npm-start.test.ts).
    expect(start).toBe(`${env.join(' ')} exec node ${flags.join(' ')} dist/main.js`);
    expect(shebang).toBe(`#!/usr/bin/env -S ${env.join(' ')} node ${flags.join(' ')}`);
    expect(JSON.parse(entrypoint)).toEqual(['node', ...flags, '/app/dist/main.js']);
    // The image's ENV instruction: from `ENV ` to the first line not ending in a backslash.
    const envBlock = /^ENV (?:.*\\\n)*.*$/m.exec(read('Dockerfile'))![0];
    for (const e of env) expect(envBlock.split(/\s+/)).toContain(e);
  });
});
