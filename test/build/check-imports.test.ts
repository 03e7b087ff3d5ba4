/**
 * scripts/check-import-cycles.mjs (npm run check:imports, part of npm test) over small made-up
 * module trees: it must fail, naming the modules, on each fault it exists to catch, and pass a tree
 * that keeps the rooms in order. The real tree is checked by npm test itself.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const SCRIPT = join(import.meta.dirname, '../../scripts/check-import-cycles.mjs');
const made: string[] = [];

/** A dist/-like tree: path → module text. */
function tree(modules: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'cellgate-imports-'));
  made.push(root);
  for (const [path, text] of Object.entries(modules)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

function check(root: string): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, [SCRIPT, root], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout };
}

afterEach(() => {
  for (const root of made.splice(0)) rmSync(root, { recursive: true, force: true });
});

describe('check-import-cycles', () => {
  it('passes rooms in order: commands on keyspace and protocol, the server on commands, http on client', () => {
    const r = check(tree({
      'protocol/reply-writer.js': 'export const a = 1;\n',
      'keyspace/keyspace.js': "import { VERSION } from '../version.js';\nexport const b = VERSION;\n",
      'version.js': "export const VERSION = '0';\n",
      'commands/keys.js': "import { a } from '../protocol/reply-writer.js';\nimport { b } from '../keyspace/keyspace.js';\nimport { c } from '../server/stats.js';\nexport const d = a + b + c;\n",
      'server/stats.js': 'export const c = 3;\n',
      'server/server.js': "import { d } from '../commands/keys.js';\nexport { d };\n",
      'client/index.js': "import { e } from './errors.js';\nexport { e };\n",
      'client/errors.js': 'export const e = 5;\n',
      'http/core.js': "import { e } from '../client/index.js';\nexport { e };\n",
    }));
    expect(r.out).toContain('import cycles: none among 9 modules');
    expect(r.out).toContain('room order: every import is of the same room or a lower one');
    expect(r.status).toBe(0);
  });

  it('fails on a cycle, static or through a dynamic import, and names its modules', () => {
    const r = check(tree({
      'commands/a.js': "import { b } from './b.js';\nexport const a = () => b;\n",
      'commands/b.js': "export const b = () => import('./a.js');\n",
    }));
    expect(r.out).toContain('import cycles: 1 group(s)');
    expect(r.out).toContain('  - commands/a.js, commands/b.js');
    expect(r.status).toBe(1);
  });

  it('fails when a lower room imports a higher one, a sibling, or the server proper', () => {
    const r = check(tree({
      'protocol/command-args.js': "import { n } from '../commands/args.js';\nexport const x = n;\n",
      'commands/args.js': 'export const n = 1;\n',
      'keyspace/keyspace.js': "import { y } from '../limiters/rate.js';\nexport const k = y;\n",
      'limiters/rate.js': 'export const y = 2;\n',
      'commands/info.js': "import { v } from '../server/server.js';\nexport const i = v;\n",
      'server/server.js': 'export const v = 3;\n',
      'client/index.js': "import { s } from '../server/stats.js';\nexport const c = s;\n",
      'server/stats.js': 'export const s = 4;\n',
    }));
    expect(r.out).toContain('import cycles: none');
    expect(r.out).toContain('room order: 4 import(s) of a higher or sibling room');
    expect(r.out).toContain('  - protocol/command-args.js (protocol) imports commands/args.js (commands)');
    expect(r.out).toContain('  - keyspace/keyspace.js (keyspace) imports limiters/rate.js (limiters)');
    expect(r.out).toContain('  - commands/info.js (commands) imports server/server.js (server)');
    expect(r.out).toContain('  - client/index.js (client) imports server/stats.js (server-parts)');
    expect(r.status).toBe(1);
  });

  it('fails on a module in no room, so that a new top-level file gets a place in the order', () => {
    const r = check(tree({ 'stray.js': 'export const s = 1;\n' }));
    expect(r.out).toContain('room order: 1 module(s) in no room');
    expect(r.out).toContain('  - stray.js');
    expect(r.status).toBe(1);
  });
});
