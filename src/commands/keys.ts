/**
 * Generic keyspace commands, as Redis: DEL, UNLINK, EXISTS, TYPE, TTL, PTTL, SCAN, KEYS, DBSIZE,
 * FLUSHDB, FLUSHALL.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { parseScanArgs } from './scan-args.js';
import { firstKeyOnly, noKeys, type CommandContext, type CommandSpec } from './types.js';

// Each goes to the key store the server picked (src/store/store.ts): this process's keyspace, or
// the shared backend's limiter keys (which also drops this process's own, the `local` policy's).

function del(ctx: CommandContext, argv: CommandArgs): void {
  ctx.keys.del(ctx, argv);
}

function exists(ctx: CommandContext, argv: CommandArgs): void {
  ctx.keys.exists(ctx, argv);
}

function type(ctx: CommandContext, argv: CommandArgs): void {
  ctx.keys.type(ctx, argv);
}

function scan(ctx: CommandContext, argv: CommandArgs): void {
  const args = parseScanArgs(ctx, argv);
  if (args === null) return;
  ctx.keys.scan(ctx, { ...args, cursorText: argv.str(1) });
}

function keys(ctx: CommandContext, argv: CommandArgs): void {
  ctx.keys.keys(ctx, argv.str(1));
}

function flush(ctx: CommandContext, argv: CommandArgs): void {
  if (argv.length > 2 || (argv.length === 2 && !['async', 'sync'].includes(argv.lower(1)))) {
    ctx.reply.error('ERR syntax error');
    return;
  }
  ctx.keys.flush(ctx);
}

function dbsize(ctx: CommandContext): void {
  ctx.keys.dbsize(ctx);
}

const keyArg = [{ name: 'key', type: 'key' as const, multiple: true }];
const flushArgs = [{
  name: 'flush-type', type: 'oneof' as const, optional: true,
  arguments: [{ name: 'async', type: 'pure-token' as const, token: 'ASYNC' }, { name: 'sync', type: 'pure-token' as const, token: 'SYNC' }],
}];

export const keyCommands: CommandSpec[] = [
  { name: 'del', arity: -2, flags: ['write'], keyFlags: ['RM', 'delete'], aclExtra: ['keyspace'], firstKey: 1, lastKey: -1, keyStep: 1, group: 'generic', since: '1.0.0', complexity: 'O(N) where N is the number of keys',
    summary: 'Deletes one or more keys.', args: keyArg, run: del },
  { name: 'unlink', arity: -2, flags: ['write', 'fast'], keyFlags: ['RM', 'delete'], aclExtra: ['keyspace'], firstKey: 1, lastKey: -1, keyStep: 1, group: 'generic', since: '4.0.0', complexity: 'O(N) where N is the number of keys',
    summary: 'Deletes one or more keys (limiter state is small, so this is DEL).', args: keyArg, run: del },
  { name: 'exists', arity: -2, flags: ['readonly', 'fast'], aclExtra: ['keyspace'], firstKey: 1, lastKey: -1, keyStep: 1, group: 'generic', since: '1.0.0', complexity: 'O(N) where N is the number of keys',
    summary: 'Determines whether one or more keys exist.', args: keyArg, run: exists },
  { name: 'type', arity: 2, flags: ['readonly', 'fast'], aclExtra: ['keyspace'], ...firstKeyOnly(), group: 'generic', since: '1.0.0', complexity: 'O(1)',
    summary: 'Returns the limiter algorithm of the value stored at a key.', args: [{ name: 'key', type: 'key' }], run: type },
  { name: 'ttl', arity: 2, flags: ['readonly', 'fast'], aclExtra: ['keyspace'], ...firstKeyOnly(), group: 'generic', since: '1.0.0', complexity: 'O(1)',
    summary: 'Returns the expiration time in seconds of a key.', args: [{ name: 'key', type: 'key' }], run: (ctx, argv) => ctx.keys.ttl(ctx, argv, false) },
  { name: 'pttl', arity: 2, flags: ['readonly', 'fast'], aclExtra: ['keyspace'], ...firstKeyOnly(), group: 'generic', since: '2.6.0', complexity: 'O(1)',
    summary: 'Returns the expiration time in milliseconds of a key.', args: [{ name: 'key', type: 'key' }], run: (ctx, argv) => ctx.keys.ttl(ctx, argv, true) },
  { name: 'scan', arity: -2, flags: ['readonly'], aclExtra: ['keyspace'], ...noKeys(), group: 'generic', since: '2.8.0', complexity: 'O(1) for every call. O(N) for a complete iteration.',
    summary: 'Iterates over the key names in the database.',
    args: [
      { name: 'cursor', type: 'integer' },
      { name: 'pattern', type: 'pattern', token: 'MATCH', optional: true },
      { name: 'count', type: 'integer', token: 'COUNT', optional: true },
      { name: 'type', type: 'string', token: 'TYPE', optional: true },
    ],
    run: scan },
  { name: 'keys', arity: 2, flags: ['readonly'], aclExtra: ['keyspace', 'dangerous'], ...noKeys(), group: 'generic', since: '1.0.0', complexity: 'O(N) with N being the number of keys in the database',
    summary: 'Returns all key names that match a pattern.', args: [{ name: 'pattern', type: 'pattern' }], run: keys },
  { name: 'dbsize', arity: 1, flags: ['readonly', 'fast'], aclExtra: ['keyspace'], ...noKeys(), group: 'server', since: '1.0.0', complexity: 'O(1)',
    summary: 'Returns the number of keys in the database.', args: [], run: dbsize },
  { name: 'flushdb', arity: -1, flags: ['write'], aclExtra: ['keyspace', 'dangerous'], ...noKeys(), group: 'server', since: '1.0.0', complexity: 'O(N) where N is the number of keys in the selected database',
    summary: 'Removes all keys from the current database.', args: flushArgs, run: flush },
  { name: 'flushall', arity: -1, flags: ['write'], aclExtra: ['keyspace', 'dangerous'], ...noKeys(), group: 'server', since: '1.0.0', complexity: 'O(N) where N is the total number of keys in all databases',
    summary: 'Removes all keys from all databases.', args: flushArgs, run: flush },
];
