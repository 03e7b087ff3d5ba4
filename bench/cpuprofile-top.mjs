#!/usr/bin/env node
/**
 * node bench/cpuprofile-top.mjs FILE.cpuprofile [N]
 *
 * The top N (default 25) functions of a `node --cpu-prof` profile by self time, idle left out of the
 * shares: what a CPU-per-op change should be aimed at.
 */
import { readFileSync } from 'node:fs';

const [file, topArg] = process.argv.slice(2);
if (!file) {
  process.stderr.write('usage: node bench/cpuprofile-top.mjs FILE.cpuprofile [N]\n');
  process.exit(2);
}
const top = Number(topArg ?? 25);
const prof = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const self = new Map();
let total = 0;
let idle = 0;
for (let i = 0; i < prof.samples.length; i++) {
  const dt = prof.timeDeltas[i] ?? 0;
  const cf = byId.get(prof.samples[i])?.callFrame;
  if (!cf) continue;
  if (cf.functionName === '(idle)') {
    idle += dt;
    continue;
  }
  const where = cf.url ? `${cf.url.replace(/^file:\/\/.*?\/(dist|src)\//, '$1/')}:${cf.lineNumber + 1}` : '';
  const key = `${cf.functionName || '(anonymous)'}\t${where}`;
  self.set(key, (self.get(key) ?? 0) + dt);
  total += dt;
}
process.stdout.write(`busy ${(total / 1000).toFixed(0)} ms, idle ${(idle / 1000).toFixed(0)} ms\n`);
for (const [key, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) {
  const [name, where] = key.split('\t');
  process.stdout.write(`${((100 * us) / total).toFixed(1).padStart(5)}%  ${(us / 1000).toFixed(0).padStart(6)} ms  ${name.padEnd(28)} ${where}\n`);
}
