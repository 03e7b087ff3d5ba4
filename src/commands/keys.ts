/**
 * Generic keyspace commands, as Redis: DEL, UNLINK, EXISTS, TYPE, TTL, PTTL, SCAN, KEYS, DBSIZE,
 * FLUSHDB, FLUSHALL.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { typeName } from '../limiters/registry.js';
import { globMatch } from '../glob.js';
import { backendDbsize, backendDel, backendExists, backendFlush, backendKeys, backendScan, backendTtl, backendType } from './backend-keys.js';
import { parseScanArgs } from './scan-args.js';
import { firstKeyOnly, noKeys, type CommandContext, type CommandSpec } from './types.js';

// Keys are looked up by their bytes as received, never as strings: a key may be as long as
// proto-max-bulk-len (512 MiB), longer than V8's longest string.

/** The slot of the live key in argument `i`, or -1. */
function lookupArg(ctx: CommandContext, argv: CommandArgs, i: number): number {
  return ctx.server.keyspace.lookupKey(argv.source(i), argv.start(i), argv.end(i), ctx.nowMs);
}

function del(ctx: CommandContext, argv: CommandArgs): void {
  const ks = ctx.server.keyspace;
  let removed = 0;
  for (let i = 1; i < argv.length; i++) if (ks.deleteKey(argv.source(i), argv.start(i), argv.end(i), ctx.nowMs)) removed++;
  // With a backend the local keys (the `local` policy's) go too, and the reply counts the backend's.
  if (ctx.backend !== null) backendDel(ctx, argv, ctx.backend);
  else ctx.reply.integer(removed);
}

function exists(ctx: CommandContext, argv: CommandArgs): void {
  if (ctx.backend !== null) {
    backendExists(ctx, argv, ctx.backend);
    return;
  }
  let found = 0;
  for (let i = 1; i < argv.length; i++) if (lookupArg(ctx, argv, i) !== -1) found++;
  ctx.reply.integer(found);
}

function type(ctx: CommandContext, argv: CommandArgs): void {
  if (ctx.backend !== null) {
    backendType(ctx, argv, ctx.backend);
    return;
  }
  const ks = ctx.server.keyspace;
  const slot = lookupArg(ctx, argv, 1);
  ctx.reply.status(slot === -1 ? 'none' : typeName(ks.typeOf(slot)));
}

/** TTL/PTTL: −2 no key, −1 no expiry; TTL rounds to the nearest second as Redis does. */
function ttlReply(ctx: CommandContext, argv: CommandArgs, inMs: boolean): void {
  if (ctx.backend !== null) {
    backendTtl(ctx, argv, ctx.backend, inMs);
    return;
  }
  const ks = ctx.server.keyspace;
  const slot = lookupArg(ctx, argv, 1);
  if (slot === -1) {
    ctx.server.stats.keyspaceMisses++;
    ctx.reply.integer(-2);
    return;
  }
  ctx.server.stats.keyspaceHits++;
  const ms = Math.max(0, ks.expireAtMs(slot) - ctx.nowMs);
  ctx.reply.integer(inMs ? ms : Math.floor((ms + 500) / 1000));
}

function scan(ctx: CommandContext, argv: CommandArgs): void {
  if (ctx.backend !== null) {
    backendScan(ctx, argv, ctx.backend);
    return;
  }
  const args = parseScanArgs(ctx, argv);
  if (args === null) return;
  const { cursor, count, pattern, typeFilter } = args;
  const r = ctx.reply;
  const ks = ctx.server.keyspace;
  const found: string[] = [];
  const next = ks.scan(cursor, count, ctx.nowMs, (slot) => {
    const key = ks.keyOf(slot);
    if (pattern !== null && !globMatch(pattern, key)) return;
    if (typeFilter !== null && typeName(ks.typeOf(slot)) !== typeFilter) return;
    found.push(key);
  });
  r.arrayHeader(2);
  r.bulk(String(next));
  r.bulkArray(found);
}

function keys(ctx: CommandContext, argv: CommandArgs): void {
  if (ctx.backend !== null) {
    backendKeys(ctx, argv, ctx.backend);
    return;
  }
  const pattern = argv.str(1);
  const all = pattern === '*';
  const found: string[] = [];
  const ks = ctx.server.keyspace;
  let cursor = 0;
  do {
    cursor = ks.scan(cursor, 1 << 20, ctx.nowMs, (slot) => {
      const key = ks.keyOf(slot);
      if (all || globMatch(pattern, key)) found.push(key);
    });
  } while (cursor !== 0);
  ctx.reply.bulkArray(found);
}

function flush(ctx: CommandContext, argv: CommandArgs): void {
  if (argv.length > 2 || (argv.length === 2 && !['async', 'sync'].includes(argv.lower(1)))) {
    ctx.reply.error('ERR syntax error');
    return;
  }
  ctx.server.keyspace.clear();
  if (ctx.backend !== null) backendFlush(ctx, ctx.backend);
  else ctx.reply.ok();
}

function dbsize(ctx: CommandContext): void {
  if (ctx.backend !== null) backendDbsize(ctx, ctx.backend);
  else ctx.reply.integer(ctx.server.keyspace.size);
}

const keyArg = [{ name: 'key', type: 'key' as const, multiple: true }];
const flushArgs = [{
  name: 'flush-type', type: 'oneof' as const, optional: true,
  arguments: [{ name: 'async', type: 'pure-token' as const, token: 'ASYNC' }, { name: 'sync', type: 'pure-token' as const, token: 'SYNC' }],
}];

export const keyCommands: CommandSpec[] = [
  { name: 'del', arity: -2, flags: ['write'], aclExtra: ['keyspace'], firstKey: 1, lastKey: -1, keyStep: 1, group: 'generic', since: '1.0.0', complexity: 'O(N) where N is the number of keys',
    summary: 'Deletes one or more keys.', args: keyArg, run: del },
  { name: 'unlink', arity: -2, flags: ['write', 'fast'], aclExtra: ['keyspace'], firstKey: 1, lastKey: -1, keyStep: 1, group: 'generic', since: '4.0.0', complexity: 'O(N) where N is the number of keys',
    summary: 'Deletes one or more keys (limiter state is small, so this is DEL).', args: keyArg, run: del },
  { name: 'exists', arity: -2, flags: ['readonly', 'fast'], aclExtra: ['keyspace'], firstKey: 1, lastKey: -1, keyStep: 1, group: 'generic', since: '1.0.0', complexity: 'O(N) where N is the number of keys',
    summary: 'Determines whether one or more keys exist.', args: keyArg, run: exists },
  { name: 'type', arity: 2, flags: ['readonly', 'fast'], aclExtra: ['keyspace'], ...firstKeyOnly(), group: 'generic', since: '1.0.0', complexity: 'O(1)',
    summary: 'Returns the limiter algorithm of the value stored at a key.', args: [{ name: 'key', type: 'key' }], run: type },
  { name: 'ttl', arity: 2, flags: ['readonly', 'fast'], aclExtra: ['keyspace'], ...firstKeyOnly(), group: 'generic', since: '1.0.0', complexity: 'O(1)',
    summary: 'Returns the expiration time in seconds of a key.', args: [{ name: 'key', type: 'key' }], run: (ctx, argv) => ttlReply(ctx, argv, false) },
  { name: 'pttl', arity: 2, flags: ['readonly', 'fast'], aclExtra: ['keyspace'], ...firstKeyOnly(), group: 'generic', since: '2.6.0', complexity: 'O(1)',
    summary: 'Returns the expiration time in milliseconds of a key.', args: [{ name: 'key', type: 'key' }], run: (ctx, argv) => ttlReply(ctx, argv, true) },
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
