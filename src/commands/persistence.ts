/**
 * SAVE, BGSAVE [SCHEDULE] and LASTSAVE, as Redis. The work is in src/persistence/snapshotter.ts.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { noKeys, type CommandContext, type CommandSpec } from './types.js';

function save(ctx: CommandContext): void {
  const snapshots = ctx.server.snapshots;
  if (snapshots.bgsaveInProgress) {
    ctx.reply.error('ERR Background save already in progress');
    return;
  }
  try {
    snapshots.save();
    ctx.reply.ok();
  } catch {
    // Redis replies a bare `-ERR` here; the reason is in the log and in INFO's rdb_last_error.
    ctx.reply.error('ERR');
  }
}

function bgsave(ctx: CommandContext, argv: CommandArgs): void {
  const schedule = argv.length === 2 && argv.lower(1) === 'schedule';
  if (argv.length > 2 || (argv.length === 2 && !schedule)) {
    ctx.reply.error('ERR syntax error');
    return;
  }
  const snapshots = ctx.server.snapshots;
  if (snapshots.bgsaveInProgress) {
    if (schedule) {
      snapshots.schedule();
      ctx.reply.status('Background saving scheduled');
    } else {
      ctx.reply.error('ERR Background save already in progress');
    }
    return;
  }
  snapshots.bgsave();
  ctx.reply.status('Background saving started');
}

export const persistenceCommands: CommandSpec[] = [
  { name: 'save', arity: 1, flags: ['admin', 'noscript', 'no-multi'], ...noKeys(), group: 'server', since: '1.0.0',
    complexity: 'O(N) where N is the total number of keys in all databases',
    summary: 'Synchronously saves the database(s) to disk.', args: [], run: save },
  { name: 'bgsave', arity: -1, flags: ['admin', 'noscript'], ...noKeys(), group: 'server', since: '1.0.0',
    complexity: 'O(N) where N is the total number of keys in all databases',
    summary: 'Asynchronously saves the database(s) to disk.',
    args: [{ name: 'schedule', type: 'pure-token', token: 'SCHEDULE', optional: true }], run: bgsave },
  { name: 'lastsave', arity: 1, flags: ['loading', 'stale', 'fast'], aclExtra: ['admin', 'dangerous'], ...noKeys(), group: 'server', since: '1.0.0', complexity: 'O(1)',
    summary: 'Returns the Unix timestamp of the last successful save to disk.', args: [],
    run: (ctx) => ctx.reply.integer(Math.floor(ctx.server.snapshots.lastSaveMs / 1000)) },
];
