#!/usr/bin/env node
/**
 * Lists the runtime import cycles among the compiled modules (dist/, so type-only imports, which
 * TypeScript erases, do not count) and exits 1 if there is any. A small script rather than madge or
 * dependency-cruiser: the compiled ESM has one import form to read, and this needs no dependency.
 * Usage: node scripts/check-import-cycles.mjs [dist]
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const root = resolve(process.argv[2] ?? 'dist');
const files = [];
(function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (name.endsWith('.js')) files.push(path);
  }
})(root);

// `import x from './a.js'`, `import './a.js'`, `export { y } from './a.js'`, and `import('./a.js')`
// (a dynamic import is a runtime edge too, though it cannot deadlock module evaluation).
const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s*['"](\.[^'"]+)['"]|(?:^|\n)\s*import\s*['"](\.[^'"]+)['"]/g;
const graph = new Map();
for (const file of files) {
  const text = readFileSync(file, 'utf8');
  const edges = [];
  for (const m of text.matchAll(IMPORT)) edges.push(resolve(dirname(file), m[1] ?? m[2]));
  graph.set(file, edges.filter((e) => graph.has(e) || files.includes(e)));
}

// Tarjan's strongly connected components: every component of more than one module (or a module
// importing itself) is a cycle.
let index = 0;
const stack = [];
const state = new Map();
const cycles = [];
function connect(v) {
  const s = { index, low: index, onStack: true };
  index++;
  state.set(v, s);
  stack.push(v);
  for (const w of graph.get(v) ?? []) {
    const t = state.get(w);
    if (t === undefined) {
      connect(w);
      s.low = Math.min(s.low, state.get(w).low);
    } else if (t.onStack) s.low = Math.min(s.low, t.index);
  }
  if (s.low === s.index) {
    const component = [];
    let w;
    do {
      w = stack.pop();
      state.get(w).onStack = false;
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) cycles.push(component);
  }
}
for (const v of graph.keys()) if (!state.has(v)) connect(v);

if (cycles.length === 0) {
  console.log(`import cycles: none among ${files.length} modules of ${relative(process.cwd(), root) || '.'}`);
  process.exit(0);
}
console.log(`import cycles: ${cycles.length} group(s) of modules that import each other at run time`);
for (const c of cycles) console.log(`  - ${c.map((f) => relative(root, f)).sort().join(', ')}`);
process.exit(1);
