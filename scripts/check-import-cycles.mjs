#!/usr/bin/env node
/**
 * Checks the runtime imports among the compiled modules (dist/, so type-only imports, which
 * TypeScript erases, do not count) and exits 1 on either fault:
 *   - an import cycle: modules that import each other, directly or through others;
 *   - a room imported from below: each top folder of src/ is a room (docs/development.md, "Layout"), rooms
 *     are ranked, and a module imports only its own room, lower rooms, and never a sibling room of
 *     the same rank.
 * A small script rather than madge or dependency-cruiser: the compiled ESM has one import form to
 * read, and this needs no dependency.
 * Usage: node scripts/check-import-cycles.mjs [dist]
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';

const root = resolve(process.argv[2] ?? 'dist');
const files = [];
(function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (name.endsWith('.js')) files.push(path);
  }
})(root);
const known = new Set(files);

// `import x from './a.js'`, `import './a.js'`, `export { y } from './a.js'`, and `import('./a.js')`
// (a dynamic import is a runtime edge too, though it cannot deadlock module evaluation).
const IMPORT =
  /(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s*['"](\.[^'"]+)['"]|(?:^|\n)\s*import\s*['"](\.[^'"]+)['"]|\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g;
const graph = new Map();
for (const file of files) {
  const text = readFileSync(file, 'utf8');
  const edges = [];
  for (const m of text.matchAll(IMPORT)) edges.push(resolve(dirname(file), m[1] ?? m[2] ?? m[3]));
  graph.set(file, edges.filter((e) => known.has(e)));
}

/*
 * The rooms, lowest first. Rooms of one rank are siblings: neither imports the other. Modules at the
 * top of src/ are the base (leaves everything may use) or main; the server's folder holds two rooms:
 * its parts, which the commands use (the stats, memory, TLS, MULTI state, slow log...), below the
 * commands, and the server proper (every other module there: server, listeners, dispatch, gates,
 * cron, watch-release, client, ordered-replies, metrics, metrics-stream, degraded, warmup), above them. A module
 * in no room (a new top-level file) is an error until it is given one here and in docs/development.md.
 */
const RANKS = [
  ['base'],
  ['protocol', 'limiters', 'keyspace', 'files'],
  ['persistence'],
  ['store'],
  ['acl', 'backend'],
  ['server-parts'],
  ['config'],
  ['commands'],
  ['rls'],
  ['server'],
  ['main'],
];
const BASE = new Set(['clock.js', 'log.js', 'log-text.js', 'glob.js', 'version.js']);
const SERVER_PARTS = new Set(['client-memory.js', 'fd-limit.js', 'memory.js', 'slowlog.js', 'stats.js', 'tasks.js', 'tls.js', 'transaction.js']);
/** Rooms outside the ranks, with the rooms each may import besides itself: the client library ships alone. */
const APART = new Map([
  ['client', []],
  ['http', ['client']],
]);
const rankOf = new Map(RANKS.flatMap((rooms, rank) => rooms.map((room) => [room, rank])));

function roomOf(file) {
  const parts = relative(root, file).split(sep);
  if (parts.length === 1) {
    if (BASE.has(parts[0])) return 'base';
    // src/config.ts, with the folder src/config/ (its parts: the rank's name), is the config room.
    if (parts[0] === 'config.js') return 'config';
    if (parts[0] === 'main.js') return 'main';
    return null;
  }
  if (parts[0] === 'server') return SERVER_PARTS.has(parts[1]) ? 'server-parts' : 'server';
  return rankOf.has(parts[0]) || APART.has(parts[0]) ? parts[0] : null;
}

function mayImport(from, to) {
  if (from === to) return true;
  if (APART.has(from)) return APART.get(from).includes(to);
  if (APART.has(to)) return false;
  return rankOf.get(to) < rankOf.get(from);
}

const roomless = [];
const upward = [];
for (const [file, edges] of graph) {
  const from = roomOf(file);
  if (from === null) {
    roomless.push(file);
    continue;
  }
  for (const target of edges) {
    const to = roomOf(target);
    if (to !== null && !mayImport(from, to)) upward.push(`${relative(root, file)} (${from}) imports ${relative(root, target)} (${to})`);
  }
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

const where = relative(process.cwd(), root) || '.';
if (cycles.length === 0) console.log(`import cycles: none among ${files.length} modules of ${where}`);
else {
  console.log(`import cycles: ${cycles.length} group(s) of modules that import each other at run time`);
  for (const c of cycles) console.log(`  - ${c.map((f) => relative(root, f)).sort().join(', ')}`);
}
if (roomless.length === 0 && upward.length === 0) console.log('room order: every import is of the same room or a lower one');
else {
  if (upward.length > 0) console.log(`room order: ${upward.length} import(s) of a higher or sibling room`);
  for (const line of upward.sort()) console.log(`  - ${line}`);
  if (roomless.length > 0) console.log(`room order: ${roomless.length} module(s) in no room (scripts/check-import-cycles.mjs RANKS)`);
  for (const file of roomless) console.log(`  - ${relative(root, file)}`);
}
process.exit(cycles.length > 0 || roomless.length > 0 || upward.length > 0 ? 1 : 0);
