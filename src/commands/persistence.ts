/**
 * SAVE, BGSAVE [SCHEDULE], LASTSAVE and BGREWRITEAOF, as Redis. The work is in
 * src/persistence/snapshotter.ts and src/persistence/journal.ts.
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
  if (ctx.server.journal.rewriteInProgress) {
    // One point-in-time copy at a time, as Redis's one child process.
    if (schedule) {
      snapshots.schedule();
      ctx.reply.status('Background saving scheduled');
    } else {
      ctx.reply.error('ERR Another child process is active (AOF?): can\'t BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.');
    }
    return;
  }
  snapshots.bgsave();
  ctx.reply.status('Background saving started');
}

function bgrewriteaof(ctx: CommandContext): void {
  const journal = ctx.server.journal;
  if (!journal.on) {
    // Redis would write a journal even with appendonly no; here one is started with CONFIG SET appendonly yes.
    ctx.reply.error('ERR the journal is off (appendonly no): CONFIG SET appendonly yes starts one from a rewrite');
    return;
  }
  if (journal.rewriteInProgress) {
    ctx.reply.error('ERR Background append only file rewriting already in progress');
    return;
  }
  if (ctx.server.snapshots.bgsaveInProgress) {
    journal.schedule();
    ctx.reply.status('Background append only file rewriting scheduled');
    return;
  }
  if (journal.startRewrite()) ctx.reply.status('Background append only file rewriting started');
  else ctx.reply.error("ERR Can't execute an AOF background rewriting. Please check the server logs for more information.");
}

export const persistenceCommands: CommandSpec[] = [
  { name: 'save', arity: 1, flags: ['admin', 'noscript', 'no-multi'], ...noKeys(), group: 'server', since: '1.0.0',
    complexity: 'O(N) where N is the total number of keys in all databases',
    summary: 'Synchronously saves the database(s) to disk.', args: [], run: save },
  { name: 'bgsave', arity: -1, flags: ['admin', 'noscript'], ...noKeys(), group: 'server', since: '1.0.0',
    complexity: 'O(N) where N is the total number of keys in all databases',
    summary: 'Asynchronously saves the database(s) to disk.',
    args: [{ name: 'schedule', type: 'pure-token', token: 'SCHEDULE', optional: true }], run: bgsave },
  { name: 'bgrewriteaof', arity: 1, flags: ['admin', 'noscript'], ...noKeys(), group: 'server', since: '1.0.0',
    complexity: 'O(1)', summary: 'Asynchronously rewrites the append-only file to disk.', args: [], run: bgrewriteaof },
  { name: 'lastsave', arity: 1, flags: ['loading', 'stale', 'fast'], aclExtra: ['admin', 'dangerous'], ...noKeys(), group: 'server', since: '1.0.0', complexity: 'O(1)',
    summary: 'Returns the Unix timestamp of the last successful save to disk.', args: [],
    run: (ctx) => ctx.reply.integer(Math.floor(ctx.server.snapshots.lastSaveMs / 1000)) },
];
