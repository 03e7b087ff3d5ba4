/**
 * The JavaScript code blocks of README.md, docs/*.md, examples/*\/README.md and packages/*\/README.md
 * (the npm page of each package), run as they are
 * against a real cellgate, so the documentation cannot drift from the package: each block is an ES
 * module run by node from the repository (where `cellgate/*` resolves to the workspace package packages/cellgate), with
 * two substitutions only: the cellgate address `127.0.0.1:6379` becomes the test server's, and a
 * `listen(3000` a free port. A block must finish its top-level code without an error, print nothing
 * on stderr, and end by itself; a block that serves (it handles SIGTERM) gets a SIGTERM once its
 * top-level code is done, and must then exit by itself with code 0.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startServer, type RunningServer } from '../helpers/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MARK = '[snippet] top-level code done';

function docs(): string[] {
  const files = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
  for (const folder of ['examples', 'packages']) {
    for (const d of readdirSync(join(ROOT, folder))) if (existsSync(join(ROOT, folder, d, 'README.md'))) files.push(`${folder}/${d}/README.md`);
  }
  return files;
}

/** Every ```js / ```javascript / ```mjs block, with its file and line. */
function blocks(): { where: string; code: string }[] {
  const out: { where: string; code: string }[] = [];
  for (const file of docs()) {
    const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
    for (let i = 0; i < lines.length; i++) {
      if (!/^```(js|javascript|mjs)\s*$/.test(lines[i])) continue;
      const start = i + 1;
      let end = start;
      while (end < lines.length && !/^```\s*$/.test(lines[end])) end++;
      out.push({ where: `${file}:${start}`, code: lines.slice(start, end).join('\n') });
      i = end;
    }
  }
  return out;
}

let server: RunningServer;
beforeAll(async () => {
  server = await startServer();
  const admin = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2 });
  await admin.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
  admin.disconnect();
});
afterAll(async () => {
  await server?.stop();
});

function run(code: string): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }> {
  const source = `${code.replaceAll('127.0.0.1:6379', `127.0.0.1:${server.port}`).replace(/listen\(3000\b/g, 'listen(0')}\nconsole.log(${JSON.stringify(MARK)});\n`;
  const serves = code.includes("process.on('SIGTERM'");
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, ['--input-type=module', '-e', source], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let termed = false;
    proc.stdout.on('data', (c: Buffer) => {
      stdout += c.toString('utf8');
      // A server (it handles SIGTERM) done with its top-level code: ask it to shut down.
      if (!termed && serves && stdout.includes(MARK)) {
        termed = true;
        setImmediate(() => { if (proc.exitCode === null) proc.kill('SIGTERM'); });
      }
    });
    proc.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    const killer = setTimeout(() => proc.kill('SIGKILL'), 30_000); // a hang, not a time limit
    proc.on('exit', (exitCode, signal) => { clearTimeout(killer); resolve({ code: exitCode, signal, stdout, stderr }); });
  });
}

describe('documentation snippets', () => {
  const found = blocks();
  it('finds the snippets: the README\'s Express app, the middleware guide (a checked API key, insurance, the express-rate-limit store), the client, the package\'s page', () => {
    const count = (file: string) => found.filter((b) => b.where.startsWith(`${file}:`)).length;
    expect(count('README.md')).toBeGreaterThanOrEqual(1);
    expect(count('docs/middleware.md')).toBeGreaterThanOrEqual(4);
    expect(count('docs/client.md')).toBeGreaterThanOrEqual(1);
    expect(count('packages/cellgate/README.md')).toBeGreaterThanOrEqual(1);
  });
  for (const { where, code } of found) {
    it(`${where} runs as it is and ends by itself`, async () => {
      const r = await run(code);
      expect(r.stderr).toBe('');
      expect(r.stdout).toContain(MARK);
      expect({ code: r.code, signal: r.signal }).toEqual({ code: 0, signal: null });
    });
  }
});
