#!/usr/bin/env node
/**
 * The command index of docs/commands.md, generated from the command table: every command and
 * subcommand with its syntax, summary, flags and ACL categories, between the two marker lines
 * below. The rest of the document is written by hand.
 *
 * Usage (after a build): node scripts/commands-doc.mjs          rewrites the section
 *                        node scripts/commands-doc.mjs --check  exits 1 if it is not up to date
 * `npm run docs:commands` builds and rewrites; test/build/commands-doc.test.ts checks it.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const BEGIN = '<!-- BEGIN command index: generated from the command table by `npm run docs:commands`; do not edit -->';
export const END = '<!-- END command index -->';

/** An argument as Redis's documentation writes it: `[name]`, `name [name ...]`, `TOKEN value`, `a|b`. */
function argText(arg) {
  let text;
  if (arg.type === 'pure-token') text = arg.token;
  else if (arg.type === 'oneof') text = arg.arguments.map(argText).join('|');
  else if (arg.type === 'block') text = arg.arguments.map(argText).join(' ');
  else text = arg.name;
  if (arg.token !== undefined && arg.type !== 'pure-token') text = `${arg.token} ${text}`;
  if (arg.multiple) text = `${text} [${text} ...]`;
  return arg.optional ? `[${text}]` : text;
}

/** The markdown of the command index for `commands` (the table's allCommands()). */
export function renderCommandIndex(commands) {
  const rows = [];
  const specs = commands.flatMap((c) => (c.subcommands === undefined ? [c] : c.subcommands.map((s) => ({ ...s, parent: c }))));
  const key = (s) => s.fullName ?? s.name;
  specs.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  for (const spec of specs) {
    const name = spec.parent === undefined ? spec.name.toUpperCase() : `${spec.parent.name.toUpperCase()} ${spec.name.toUpperCase()}`;
    const syntax = [name, ...spec.args.map(argText)].join(' ');
    const arity = spec.arity > 0 ? `${spec.arity}` : spec.maxArity !== undefined ? `${-spec.arity}..${spec.maxArity}` : `≥ ${-spec.arity}`;
    const flags = [...spec.flags, ...(spec.dispatch ?? [])].join(', ');
    const categories = (spec.aclCategories ?? []).map((c) => `@${c}`).join(' ');
    const cell = (s) => s.replace(/\|/g, '\\|');
    rows.push(`| \`${cell(syntax)}\` | ${arity} | ${cell(flags)} | ${categories} | ${cell(spec.summary)} |`);
  }
  return [
    BEGIN,
    '',
    '| command | arguments (with the name) | flags | ACL categories | summary |',
    '|---|---|---|---|---|',
    ...rows,
    '',
    END,
  ].join('\n');
}

/** `doc` with its command index replaced by `index` (the markers must be there once each). */
export function withCommandIndex(doc, index) {
  const begin = doc.indexOf(BEGIN);
  const end = doc.indexOf(END);
  if (begin === -1 || end === -1 || end < begin) throw new Error('docs/commands.md has no command index markers');
  return doc.slice(0, begin) + index + doc.slice(end + END.length);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { allCommands } = await import('../dist/commands/table.js');
  const path = fileURLToPath(new URL('../docs/commands.md', import.meta.url));
  const doc = readFileSync(path, 'utf8');
  const updated = withCommandIndex(doc, renderCommandIndex(allCommands()));
  if (process.argv.includes('--check')) {
    if (updated !== doc) {
      console.error('docs/commands.md: the command index is out of date; run npm run docs:commands');
      process.exit(1);
    }
  } else if (updated !== doc) {
    writeFileSync(path, updated);
    console.log('docs/commands.md: command index rewritten');
  }
}
