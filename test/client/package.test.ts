/**
 * The application package as a user gets it: `npm pack` of packages/cellgate, the tarball installed
 * into a project of its own, then imported by name as ESM, with require() (CommonJS), and from
 * TypeScript with moduleResolution node10 (typesVersions), node16 and bundler (exports). It brings
 * nothing else into the project (no server dependency: grpc-js, protobufjs, yaml), and no server is
 * needed: importing must not start one.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
let dir: string;
let project: string;

function run(command: string, args: string[], cwd: string): string {
  const r = spawnSync(command, args, { cwd, encoding: 'utf8', timeout: 120_000 });
  if (r.status !== 0) throw new Error(`${command} ${args.join(' ')} exited with ${r.status}: ${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'cellgate-pack-'));
  // dist/ is what `npm run build:packages` made (the test run builds first); prepack would build it again.
  run('npm', ['pack', '--pack-destination', dir, '--ignore-scripts', '--silent'], join(ROOT, 'packages', 'cellgate'));
  const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'))!;
  project = join(dir, 'app');
  mkdirSync(project);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }));
  run('npm', ['install', '--prefer-offline', '--ignore-scripts', '--no-audit', '--no-fund', '--silent', join(dir, tarball)], project);
}, 180_000);
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('the packed package, installed', () => {
  it('installs alone: no dependency of its own', () => {
    expect(readdirSync(join(project, 'node_modules')).filter((f) => !f.startsWith('.'))).toEqual(['cellgate']);
  });

  it('imports as ESM: the client and the three middleware entry points', () => {
    writeFileSync(join(project, 'esm.mjs'), `
      import { CellgateClient, connect } from 'cellgate';
      import * as client from 'cellgate/client';
      import { rateLimit } from 'cellgate/express';
      import { rateLimit as hook, cellgatePlugin } from 'cellgate/fastify';
      import { createRateLimiter } from 'cellgate/http';
      import { CellgateStore } from 'cellgate/express-rate-limit';
      console.log([typeof CellgateClient, typeof connect, typeof client.open, typeof rateLimit, typeof hook, typeof cellgatePlugin, typeof createRateLimiter, typeof CellgateStore].join(' '));
    `);
    expect(run(process.execPath, ['esm.mjs'], project).trim()).toBe('function function function function function function function function');
  });

  it('loads with require() (CommonJS)', () => {
    writeFileSync(join(project, 'cjs.cjs'), `
      const { CellgateClient } = require('cellgate/client');
      const { rateLimit } = require('cellgate/express');
      const { CellgateStore } = require('cellgate/express-rate-limit');
      console.log(typeof CellgateClient, typeof rateLimit, typeof CellgateStore);
    `);
    const r = spawnSync(process.execPath, ['--no-warnings', 'cjs.cjs'], { cwd: project, encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('function function function');
  });

  for (const [module, moduleResolution] of [['commonjs', 'node10'], ['node16', 'node16'], ['esnext', 'bundler']] as const) {
    it(`type-checks from TypeScript with moduleResolution ${moduleResolution}`, () => {
      const sub = join(project, `ts-${moduleResolution}`);
      mkdirSync(sub, { recursive: true });
      // node16 resolves ESM-only packages from an ESM file (a CommonJS one could only import() them).
      writeFileSync(join(sub, 'package.json'), JSON.stringify({ type: module === 'commonjs' ? 'commonjs' : 'module' }));
      writeFileSync(join(sub, 'index.ts'), `
        import { CellgateClient, type Decision } from 'cellgate/client';
        import { rateLimit, type RateLimitInfo } from 'cellgate/express';
        import { createRateLimiter } from 'cellgate/http';
        import { cellgatePlugin } from 'cellgate/fastify';
        import { CellgateStore } from 'cellgate/express-rate-limit';
        const store = new CellgateStore({ client: 'redis://127.0.0.1:6379', prefix: 'api:' });
        const limiter = rateLimit({ client: 'redis://127.0.0.1:6379', policy: { limit: 10, periodMs: 10_000 } });
        const d: Decision | undefined = undefined;
        const info: RateLimitInfo | undefined = undefined;
        // A wrong option must not type-check: the types are really there, not 'any'.
        // @ts-expect-error periodMs is a number
        createRateLimiter({ client: 'redis://x', policy: { limit: 1, periodMs: '1s' } });
        // @ts-expect-error onUnavailable is one of three words
        createRateLimiter({ client: 'redis://x', policy: { limit: 1, periodMs: 1 }, onUnavailable: 'maybe' });
        const source: 'cellgate' | 'onUnavailable' | 'insurance' | undefined = (info as RateLimitInfo | undefined)?.source;
        export { CellgateClient, limiter, d, info, cellgatePlugin, store, source };
      `);
      writeFileSync(join(sub, 'tsconfig.json'), JSON.stringify({
        compilerOptions: {
          strict: true, noEmit: true, module, moduleResolution, target: 'es2022', skipLibCheck: false,
          types: ['node'], typeRoots: [join(ROOT, 'node_modules', '@types')],
        },
        files: ['index.ts'],
      }));
      const r = spawnSync(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: sub, encoding: 'utf8' });
      expect(r.stdout + r.stderr).toBe('');
      expect(r.status).toBe(0);
    }, 120_000);
  }
});
