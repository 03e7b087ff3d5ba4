/**
 * SLOWLOG GET [count] | LEN | RESET | HELP, as Redis: entries are
 * [id, unix time, duration µs, [args...], client addr, client name], newest first.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { replyHelp } from './help.js';
import { noKeys, type CommandContext, type CommandSpec } from './types.js';

const SLOWLOG_HELP = [
  'SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'GET [<count>]',
  '    Return top <count> entries from the slowlog (default: 10, -1 mean all).',
  '    Entries are made of:',
  '    id, timestamp, time in microseconds, arguments array, client IP and port,',
  '    client name',
  'LEN',
  '    Return the length of the slowlog.',
  'RESET',
  '    Reset the slowlog.',
  'HELP',
  '    Prints this help.',
];

function slowlogGet(ctx: CommandContext, argv: CommandArgs): void {
  let count = 10;
  if (argv.length === 3) {
    const n = argv.redisInteger(2);
    if (n === null || n < -1) {
      ctx.reply.error('ERR count should be greater than or equal to -1');
      return;
    }
    count = n;
  }
  const r = ctx.reply;
  const entries = ctx.server.slowlog.newest(count);
  r.arrayHeader(entries.length);
  for (const e of entries) {
    r.arrayHeader(6);
    r.integer(e.id);
    r.integer(e.timestamp);
    r.integer(e.durationUs);
    r.bulkArray(e.args);
    r.bulk(e.clientAddr);
    r.bulk(e.clientName);
  }
}

const sub = (name: string, arity: number, summary: string, run: CommandSpec['run'], args: CommandSpec['args'] = []): CommandSpec => ({
  name, arity, flags: ['admin', 'loading', 'stale'], ...noKeys(), group: 'server', since: '2.2.12', summary, args, run,
});

export const slowlogCommands: CommandSpec[] = [
  { name: 'slowlog', arity: -2, flags: [], ...noKeys(), group: 'server', since: '2.2.12', summary: 'A container for slow log commands.', args: [],
    subcommands: [
      sub('get', -2, 'Returns the slow log\'s entries.', slowlogGet, [{ name: 'count', type: 'integer', optional: true }]),
      sub('len', 2, 'Returns the number of entries in the slow log.', (ctx) => ctx.reply.integer(ctx.server.slowlog.length)),
      sub('reset', 2, 'Clears all entries from the slow log.', (ctx) => { ctx.server.slowlog.reset(); ctx.reply.ok(); }),
      { ...sub('help', 2, 'Show helpful text about the different subcommands.', (ctx) => replyHelp(ctx, SLOWLOG_HELP)), flags: ['loading', 'stale'] },
    ] },
];
