/**
 * The refusals a command meets before it runs or is queued, in order, as Redis's processCommand
 * checks them: arity, authentication, the ACL, the snapshot gate (LOADING, MISCONF), maxmemory
 * (OOM), and `no-multi` inside MULTI. Each gate is a function of (dispatcher, client, spec, argv)
 * that returns null to let the command through or the refusal it gets; refusal() at the end of this
 * file runs them in this order and stops at the first refusal, which the dispatcher
 * (src/server/dispatch.ts) counts (INFO commandstats rejected_calls, errorstats `code`) and
 * writes. Inside MULTI a refusal also marks the transaction (EXEC then answers EXECABORT).
 *
 * Two differences from Redis decide only which error a command refused for two reasons gets:
 * LOADING/MISCONF come before OOM here (Redis: OOM first), and `no-multi` is refused last (Redis:
 * right after NOAUTH), which keeps it off the path of clients not in MULTI.
 *
 * Gates are module functions: nothing is allocated per command, and a refusal's message is built
 * only when there is a refusal.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { aclCheck, ACL_OK, noPermMessage } from '../acl/users.js';
import { arityAllows, TRAIT_DENYOOM, TRAIT_LEAVES_MULTI, TRAIT_NO_AUTH, TRAIT_NO_MULTI, TRAIT_RUNS_QUEUE, type CommandSpec } from '../commands/types.js';
import type { Refusal } from '../persistence/snapshotter.js';
import { OOM_MESSAGE } from './memory.js';
import type { Client } from './client.js';
import type { Dispatcher } from './dispatch.js';

export type { Refusal };

const NOAUTH: Refusal = { code: 'NOAUTH', message: 'NOAUTH Authentication required.' };
const OOM: Refusal = { code: 'OOM', message: OOM_MESSAGE };
const NO_MULTI: Refusal = { code: 'ERR', message: 'ERR Command not allowed inside a transaction' };
/** EXEC's own arity refusal carries the reason in EXECABORT form, in MULTI or not (Redis's execCommandAbort). */
const EXEC_ARITY: Refusal = { code: 'ERR', message: "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command" };

/**
 * The arity the table gives (N exactly, or at least −N), and a container called without a
 * subcommand. The most arguments (`maxArity`) is the command's own check (dispatch.ts), as in Redis.
 */
function arity(_d: Dispatcher, _client: Client, spec: CommandSpec, argv: CommandArgs): Refusal | null {
  if (arityAllows(spec, argv.length) && spec.run !== undefined) return null;
  if ((spec.traits! & TRAIT_RUNS_QUEUE) !== 0) return EXEC_ARITY;
  return { code: 'ERR', message: `ERR wrong number of arguments for '${spec.fullName ?? spec.name}' command` };
}

/** NOAUTH before AUTH, for every command not flagged `no-auth`. */
function auth(_d: Dispatcher, client: Client, spec: CommandSpec): Refusal | null {
  return client.authenticated || (spec.traits! & TRAIT_NO_AUTH) !== 0 ? null : NOAUTH;
}

/**
 * The ACL: one test for a user allowed everything (the default user); otherwise a byte per command
 * id, and the keys only when the user's key patterns are restricted. A refusal is logged (ACL LOG,
 * INFO acl_access_denied_*), and the log's client-info names the refused command, as Redis's.
 */
function acl(d: Dispatcher, client: Client, spec: CommandSpec, argv: CommandArgs): Refusal | null {
  const user = client.user;
  if (user.unrestricted) return null;
  const result = aclCheck(user, spec, argv, 0);
  if (result === ACL_OK) return null;
  const fullName = spec.fullName ?? spec.name;
  client.lastCommand = fullName;
  d.logAclDenial(client, fullName, argv, result, 'toplevel');
  return { code: 'NOPERM', message: noPermMessage(result, user, fullName) };
}

/**
 * While the snapshot loads, commands without the `loading` flag are refused (LOADING); with
 * stop-writes-on-bgsave-error, after a failed background save writes are refused until a save
 * succeeds (MISCONF). `gated` is false in normal operation, so this costs one test.
 */
function persistence(d: Dispatcher, _client: Client, spec: CommandSpec): Refusal | null {
  const snapshots = d.server.snapshots;
  return snapshots.gated ? snapshots.refusal(spec) : null;
}

/**
 * maxmemory, as Redis's processCommand: evict (bounded) before any command; a command that may add
 * memory (denyoom) is refused if memory stays over the limit and nothing can be evicted. Nothing is
 * evicted while the snapshot loads (a key evicted then would let a later duplicate of it in the
 * file pass), as Redis does not evict while loading. In MULTI every command but those that end it
 * (EXEC, DISCARD, QUIT, RESET) is refused then, as queuing takes memory (Redis's
 * reject_cmd_on_oom), and EXEC if its queue holds a denyoom command.
 */
function memory(d: Dispatcher, client: Client, spec: CommandSpec): Refusal | null {
  const maxmemoryBytes = d.maxmemoryBytes;
  if (maxmemoryBytes === 0 || d.server.snapshots.loading || d.server.memory.beforeCommand(maxmemoryBytes)) return null;
  const traits = spec.traits!;
  if ((traits & TRAIT_DENYOOM) !== 0) return OOM;
  if (client.multi === null) return null;
  if ((traits & TRAIT_LEAVES_MULTI) === 0) return OOM;
  return (traits & TRAIT_RUNS_QUEUE) !== 0 && client.multi.commands.some((c) => (c.spec.traits! & TRAIT_DENYOOM) !== 0) ? OOM : null;
}

/** Commands flagged `no-multi` (SAVE, SHUTDOWN) are refused inside MULTI. */
function multi(_d: Dispatcher, client: Client, spec: CommandSpec): Refusal | null {
  if (client.multi === null || (spec.traits! & TRAIT_NO_MULTI) === 0) return null;
  client.lastCommand = spec.fullName ?? spec.name;
  return NO_MULTI;
}

/**
 * The gates, in the order they run: the first refusal, or null when the command may run (or be
 * queued). Written as one chain rather than a loop over an array of gates: each call site then sees
 * one function and V8 inlines it, where the loop's one call site for six functions cost ~25 ns more
 * per command (~10% of an in-process CL.THROTTLE, measured with node on this machine).
 */
export function refusal(d: Dispatcher, client: Client, spec: CommandSpec, argv: CommandArgs): Refusal | null {
  return arity(d, client, spec, argv) ?? auth(d, client, spec) ?? acl(d, client, spec, argv) ?? persistence(d, client, spec) ??
    memory(d, client, spec) ?? multi(d, client, spec);
}
