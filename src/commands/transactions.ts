/**
 * Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, as Redis 7 (its multi.c). Between MULTI and
 * EXEC the dispatcher queues every command that passes its checks (+QUEUED); EXEC runs the queue
 * in one go, nothing else in between, all with EXEC's time. WATCHed keys are marked by the
 * keyspace's write paths; EXEC after any change of one replies a null array and runs nothing. See
 * docs/commands.md (Transactions).
 */
import { CommandArgs } from '../protocol/command-args.js';
import { MAX_WATCHED_KEYS, queuedArgs, Transaction, Watching, watchBytes, type QueuedCommand } from '../server/transaction.js';
import { ACL_DENIED_CMD, ACL_OK, aclCheck } from '../acl/users.js';
import { noKeys, type CommandContext, type CommandSpec } from './types.js';

function multi(ctx: CommandContext): void {
  const client = ctx.client;
  if (client.multi !== null) {
    ctx.reply.error('ERR MULTI calls can not be nested');
    return;
  }
  client.multi = new Transaction();
  ctx.reply.ok();
}

/**
 * The arguments of the queued command EXEC is running, unpacked from the queue's bytes (one instance:
 * a command keeps nothing of its argv past its run).
 */
const execArgs = new CommandArgs();

/** The watch-count refusal: Redis has no such limit, so the text follows its "max number of clients reached". */
export function watchLimitMessage(): string {
  return `ERR max number of watched keys reached (${MAX_WATCHED_KEYS} per client)`;
}

function exec(ctx: CommandContext): void {
  const { client, server, reply } = ctx;
  const m = client.multi;
  if (m === null) {
    reply.error('ERR EXEC without MULTI');
    return;
  }
  const ks = server.keyspace;
  const watching = client.watching;
  // A watched key that has expired by now counts as touched (Redis's isWatchedKeyExpired).
  const touched = watching !== null && (watching.dirty || ks.watchedKeyExpired(watching.keys, ctx.nowMs));
  if (m.flagged || touched) {
    client.discardTransaction();
    if (m.flagged) reply.error('EXECABORT Transaction discarded because of previous errors.');
    else reply.nullArray();
    return;
  }
  // The watches go before anything runs (the transaction's own writes do not matter); the client
  // stays in MULTI while its commands run (CLIENT INFO in the queue shows flags=x multi=N, as Redis).
  dropWatches(ctx);
  // Redis refuses EXEC itself when the snapshot gate would refuse a queued command (MISCONF for
  // writes after a failed background save, LOADING): nothing runs.
  if (server.snapshots.gated) {
    for (const c of m.commands) {
      const refusal = server.snapshots.refusal(c.spec);
      if (refusal !== null) {
        server.stats.error(refusal.code);
        client.discardTransaction();
        reply.error(`EXECABORT Transaction discarded because of: ${refusal.message}`);
        return;
      }
    }
  }
  // The limiter calls go to the store as one unit (on a backend, one script): a Cluster node takes
  // one only when all their keys share a slot, else EXEC is refused, nothing run, as Redis Cluster
  // refuses a transaction across slots.
  const refusal = unitKeysRefusal(ctx, m.commands);
  if (refusal !== null) {
    client.discardTransaction();
    reply.error(refusal);
    return;
  }
  reply.arrayHeader(m.commands.length);
  const nowUs = ctx.nowUs;
  const limiter = ctx.limiter;
  limiter.beginUnit();
  try {
    for (const c of m.commands) {
      // The user's ACL may have changed since the command was queued (ACL SETUSER, ACL LOAD from
      // another connection): each command is checked again against the rules now, as Redis's
      // execCommand does, and one refused now gets its error in its place of the reply.
      const args = queuedArgs(c, execArgs);
      const user = client.user;
      const result = user.unrestricted ? ACL_OK : aclCheck(user, c.spec, args, 0);
      if (result !== ACL_OK) {
        server.aclDenied(client, c.spec.fullName ?? c.spec.name, args, result, 'multi');
        reply.error(result === ACL_DENIED_CMD ? EXEC_DENIED_CMD : EXEC_DENIED_KEY);
        continue;
      }
      server.callQueued(client, c.spec, args, nowUs);
    }
  } finally {
    limiter.endUnit();
    execArgs.release();
    client.discardTransaction();
  }
}

/** Whether a command is a limiter call (CL.THROTTLE, GCRA, RL.*): its keys go in the transaction's unit. */
function isLimiterCall(spec: CommandSpec): boolean {
  return spec.aclCategories?.includes('limiter') === true && spec.flags.includes('write');
}

/** Why the queued limiter calls cannot go to the store as one unit (CROSSSLOT), or null. */
function unitKeysRefusal(ctx: CommandContext, commands: readonly QueuedCommand[]): string | null {
  const check = ctx.limiter.unitKeys();
  if (check === null) return null;
  try {
    for (const c of commands) {
      const spec = c.spec;
      if (!isLimiterCall(spec)) continue;
      const args = queuedArgs(c, execArgs);
      if (spec.forEachKey !== undefined) {
        spec.forEachKey(args, 0, (i) => {
          check.add(args, i);
          return true;
        });
      } else if (spec.firstKey > 0 && spec.firstKey < args.length) {
        check.add(args, spec.firstKey);
      }
    }
  } finally {
    execArgs.release();
  }
  return check.refusal();
}

/** Redis's execCommand texts for a queued command its user may no longer run. */
const EXEC_DENIED = 'NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: ';
const EXEC_DENIED_CMD = `${EXEC_DENIED}no permission to execute the command or subcommand`;
const EXEC_DENIED_KEY = `${EXEC_DENIED}no permission to touch the specified keys`;

function dropWatches(ctx: CommandContext): void {
  ctx.client.dropWatches();
}

function discard(ctx: CommandContext): void {
  const client = ctx.client;
  if (client.multi === null) {
    ctx.reply.error('ERR DISCARD without MULTI');
    return;
  }
  client.discardTransaction();
  ctx.reply.ok();
}

function watch(ctx: CommandContext, argv: CommandArgs): void {
  const client = ctx.client;
  if (client.multi !== null) {
    ctx.reply.error('ERR WATCH inside MULTI is not allowed');
    return;
  }
  // All or nothing: a WATCH that could pass the cap (duplicates counted; watches still being freed
  // count too) watches no key of it.
  if ((client.watching?.keys.length ?? 0) + client.watchesFreeing + argv.length - 1 > MAX_WATCHED_KEYS) {
    ctx.reply.error(watchLimitMessage());
    return;
  }
  const watching = client.watching ?? (client.watching = new Watching());
  const ks = ctx.server.keyspace;
  let added = 0;
  for (let i = 1; i < argv.length; i++) {
    const w = ks.watch(watching, argv.str(i), ctx.nowMs);
    if (w === null) continue;
    watching.keys.push(w);
    added += watchBytes(w.key);
  }
  watching.bytes += added;
  client.accountWatches();
  ctx.reply.ok();
}

function unwatch(ctx: CommandContext): void {
  // Queued inside MULTI, UNWATCH runs in EXEC, whose watches are already gone.
  dropWatches(ctx);
  ctx.reply.ok();
}

const FLAGS = ['noscript', 'loading', 'stale', 'fast', 'allow-busy'] as const;

export const transactionCommands: CommandSpec[] = [
  { name: 'multi', arity: 1, flags: [...FLAGS], dispatch: ['runs-in-multi'], ...noKeys(), group: 'transactions', since: '1.2.0', complexity: 'O(1)',
    summary: 'Starts a transaction.', args: [], run: multi },
  { name: 'exec', arity: 1, flags: ['noscript', 'loading', 'stale', 'skip_slowlog'], dispatch: ['runs-in-multi', 'leaves-multi', 'runs-queue'], ...noKeys(),
    group: 'transactions', since: '1.2.0', complexity: 'Depends on commands in the transaction', summary: 'Executes all commands in a transaction.', args: [], run: exec },
  { name: 'discard', arity: 1, flags: [...FLAGS], dispatch: ['runs-in-multi', 'leaves-multi'], ...noKeys(), group: 'transactions', since: '2.0.0',
    complexity: 'O(N), when N is the number of queued commands', summary: 'Discards a transaction.', args: [], run: discard },
  { name: 'watch', arity: -2, flags: [...FLAGS], dispatch: ['runs-in-multi'], firstKey: 1, lastKey: -1, keyStep: 1, group: 'transactions', since: '2.2.0',
    complexity: 'O(1) for every key.', summary: 'Monitors changes to keys to determine the execution of a transaction.',
    args: [{ name: 'key', type: 'key', multiple: true }], run: watch },
  { name: 'unwatch', arity: 1, flags: [...FLAGS], ...noKeys(), group: 'transactions', since: '2.2.0', complexity: 'O(1)',
    summary: 'Forgets about watched keys of a transaction.', args: [], run: unwatch },
];
