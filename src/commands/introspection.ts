/**
 * COMMAND [COUNT | INFO | DOCS | LIST | HELP], generated from the command table, in Redis 7's reply
 * shapes (redis-cli builds its hints from COMMAND DOCS).
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { globMatch } from '../glob.js';
import { replyHelp } from './help.js';
import { noKeys, type ArgDoc, type CommandContext, type CommandSpec } from './types.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import { memoryCommands } from './memory.js';

/** ACL categories as COMMAND INFO shows them (`@write`); the table computes them (src/acl/categories.ts). */
function aclCategories(spec: CommandSpec): string[] {
  return spec.aclCategories!.map((c) => '@' + c);
}

function writeInfo(r: ReplyWriter, spec: CommandSpec): void {
  r.arrayHeader(10);
  r.bulk(spec.fullName ?? spec.name);
  r.integer(spec.arity);
  r.setHeader(spec.flags.length);
  for (const f of spec.flags) r.status(f);
  r.integer(spec.firstKey);
  r.integer(spec.lastKey);
  r.integer(spec.keyStep);
  const cats = aclCategories(spec);
  r.setHeader(cats.length);
  for (const c of cats) r.status(c);
  r.setHeader(0); // tips
  // Redis 7.0 replies key specs and subcommands as sets (RESP3 `~`).
  if (spec.firstKey > 0) {
    // The key spec's flags as the table declares them (RW access update for a limiter, OW update
    // for RL.BLOCK, RM delete for DEL), as Redis's COMMAND INFO shows its own.
    const keyFlags = spec.keyFlags ?? [];
    r.setHeader(1);
    r.mapHeader(3);
    r.bulk('flags');
    r.setHeader(keyFlags.length);
    for (const f of keyFlags) r.status(f);
    r.bulk('begin_search');
    r.mapHeader(2);
    r.bulk('type');
    r.bulk('index');
    r.bulk('spec');
    r.mapHeader(1);
    r.bulk('index');
    r.integer(spec.firstKey);
    r.bulk('find_keys');
    r.mapHeader(2);
    r.bulk('type');
    r.bulk('range');
    r.bulk('spec');
    r.mapHeader(3);
    r.bulk('lastkey');
    r.integer(spec.lastKey < 0 ? -1 : 0);
    r.bulk('keystep');
    r.integer(spec.keyStep);
    r.bulk('limit');
    r.integer(0);
  } else {
    r.setHeader(0);
  }
  const subs = spec.subcommands ?? [];
  r.setHeader(subs.length);
  for (const s of subs) writeInfo(r, s);
}

function writeArgDoc(r: ReplyWriter, arg: ArgDoc): void {
  const fields: [string, () => void][] = [
    ['name', () => r.bulk(arg.name)],
    ['type', () => r.bulk(arg.type)],
  ];
  if (arg.type === 'key') fields.push(['key_spec_index', () => r.integer(0)]);
  if (arg.token !== undefined) fields.push(['token', () => r.bulk(arg.token!)]);
  const flags = [arg.optional ? 'optional' : '', arg.multiple ? 'multiple' : ''].filter(Boolean);
  if (flags.length > 0) fields.push(['flags', () => { r.setHeader(flags.length); for (const f of flags) r.status(f); }]);
  if (arg.arguments !== undefined) {
    const nested = arg.arguments;
    fields.push(['arguments', () => { r.arrayHeader(nested.length); for (const a of nested) writeArgDoc(r, a); }]);
  }
  r.mapHeader(fields.length);
  for (const [k, write] of fields) {
    r.bulk(k);
    write();
  }
}

function writeDocs(r: ReplyWriter, spec: CommandSpec): void {
  const fields: [string, () => void][] = [
    ['summary', () => r.bulk(spec.summary)],
    ['since', () => r.bulk(spec.since)],
    ['group', () => r.bulk(spec.group)],
  ];
  if (spec.complexity !== undefined) fields.push(['complexity', () => r.bulk(spec.complexity!)]);
  if (spec.args.length > 0) fields.push(['arguments', () => { r.arrayHeader(spec.args.length); for (const a of spec.args) writeArgDoc(r, a); }]);
  if (spec.subcommands !== undefined) {
    const subs = spec.subcommands;
    fields.push(['subcommands', () => {
      r.mapHeader(subs.length);
      for (const s of subs) {
        r.bulk(s.fullName ?? s.name);
        writeDocs(r, s);
      }
    }]);
  }
  r.mapHeader(fields.length);
  for (const [k, write] of fields) {
    r.bulk(k);
    write();
  }
}

const COMMAND_HELP = [
  'COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  '(no subcommand)',
  '    Return details about all commands.',
  'COUNT',
  '    Return the total number of commands in this server.',
  'LIST',
  '    Return a list of all commands in this server.',
  'INFO [<command-name> ...]',
  '    Return details about multiple commands.',
  '    If no command names are given, documentation details for all',
  '    commands are returned.',
  'DOCS [<command-name> ...]',
  '    Return documentation details about multiple commands.',
  '    If no command names are given, documentation details for all',
  '    commands are returned.',
  'HELP',
  '    Prints this help.',
];

function commandInfo(ctx: CommandContext, argv: CommandArgs): void {
  replyCommandInfo(ctx, argv.lowerFrom(2));
}

/** COMMAND INFO for `names` (all commands when empty; a null bulk, as Redis, for unknown names). */
function replyCommandInfo(ctx: CommandContext, names: string[]): void {
  const specs = names.length === 0 ? ctx.commands.allCommands() : names.map((n) => ctx.commands.lookupCommand(n));
  ctx.reply.arrayHeader(specs.length);
  for (const s of specs) {
    if (s === undefined) ctx.reply.nullBulk();
    else writeInfo(ctx.reply, s);
  }
}

function commandDocs(ctx: CommandContext, argv: CommandArgs): void {
  const names = argv.lowerFrom(2);
  const specs = names.length === 0 ? ctx.commands.allCommands() : names.map((n) => ctx.commands.lookupCommand(n)).filter((s): s is CommandSpec => s !== undefined);
  ctx.reply.mapHeader(specs.length);
  for (const s of specs) {
    ctx.reply.bulk(s.name);
    writeDocs(ctx.reply, s);
  }
}

function commandList(ctx: CommandContext, argv: CommandArgs): void {
  let filter: (s: CommandSpec) => boolean = () => true;
  if (argv.length === 5 && argv.lower(2) === 'filterby') {
    const kind = argv.lower(3);
    const value = argv.str(4);
    if (kind === 'pattern') filter = (s) => globMatch(value, s.fullName ?? s.name, true);
    else if (kind === 'aclcat') filter = (s) => aclCategories(s).includes('@' + value.toLowerCase());
    else if (kind === 'module') filter = () => false;
    else {
      ctx.reply.error('ERR syntax error');
      return;
    }
  } else if (argv.length !== 2) {
    ctx.reply.error('ERR syntax error');
    return;
  }
  const names: string[] = [];
  for (const s of ctx.commands.allCommands()) {
    if (filter(s)) names.push(s.name);
    for (const sub of s.subcommands ?? []) if (filter(sub)) names.push(sub.fullName!);
  }
  ctx.reply.bulkArray(names);
}

const sub = (name: string, arity: number, summary: string, run: CommandSpec['run'], args: CommandSpec['args'] = []): CommandSpec => ({
  name, arity, flags: ['loading', 'stale'], aclExtra: ['connection'], ...noKeys(), group: 'server', since: '2.8.13', summary, args, run,
});

export const introspectionCommands: CommandSpec[] = [
  ...memoryCommands,
  { name: 'command', arity: -1, flags: ['loading', 'stale'], ...noKeys(), group: 'server', since: '2.8.13', complexity: 'O(N) where N is the total number of commands',
    summary: 'Returns detailed information about all commands.', args: [],
    run: (ctx) => replyCommandInfo(ctx, []),
    subcommands: [
      sub('count', 2, 'Returns a count of commands.', (ctx) => ctx.reply.integer(ctx.commands.allCommands().length)),
      sub('info', -2, 'Returns information about one, multiple or all commands.', commandInfo, [{ name: 'command-name', type: 'string', optional: true, multiple: true }]),
      sub('docs', -2, 'Returns documentary information about one, multiple or all commands.', commandDocs, [{ name: 'command-name', type: 'string', optional: true, multiple: true }]),
      sub('list', -2, 'Returns a list of command names.', commandList, [{ name: 'filterby', type: 'oneof', token: 'FILTERBY', optional: true, arguments: [
        { name: 'module-name', type: 'string', token: 'MODULE' }, { name: 'category', type: 'string', token: 'ACLCAT' }, { name: 'pattern', type: 'pattern', token: 'PATTERN' }] }]),
      sub('help', 2, 'Returns helpful text about the different subcommands.', (ctx) => replyHelp(ctx, COMMAND_HELP)),
    ] },
];
