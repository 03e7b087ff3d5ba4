/**
 * A client's MULTI state (its queue of commands) and its WATCHed keys, as Redis's multiState and
 * watched_keys. The commands themselves (MULTI, EXEC, ...) are in src/commands/transactions.ts; the
 * dispatcher (Server.execute) queues, and the keyspace marks watches dirty on its write paths.
 */
import { CommandArgs } from '../protocol/command-args.js';
import type { KeyWatch, WatchOwner } from '../keyspace/keyspace.js';
import type { CommandSpec } from '../commands/types.js';

/**
 * What one queued command is counted for beyond its argument bytes (CLIENT LIST multi-mem, the
 * query buffer bound): its CommandArgs (two Int32Arrays of 16) and queue entry. An estimate, as
 * Redis's multi-mem is its allocator's figure.
 */
export const QUEUED_COMMAND_OVERHEAD_BYTES = 256;

export interface QueuedCommand {
  readonly spec: CommandSpec;
  /** A copy: the parser's buffers, which a CommandArgs points into, are reused for later input. */
  readonly args: CommandArgs;
}

export class Transaction {
  readonly commands: QueuedCommand[] = [];
  /** Bytes the queue holds (argument bytes + QUEUED_COMMAND_OVERHEAD_BYTES each): CLIENT LIST multi-mem. */
  bytes = 0;
  /** A command was refused while queuing: EXEC answers EXECABORT (Redis's CLIENT_DIRTY_EXEC). */
  flagged = false;
  /**
   * Set by the dispatcher when the command being dispatched got past every refusal to the queue
   * step; a command that ends before it was refused (see Server.executeInMulti).
   */
  admitted = false;

  /** Queues a copy of `argv` (all its arguments in one new buffer). */
  push(spec: CommandSpec, argv: CommandArgs): void {
    let total = 0;
    for (let i = 0; i < argv.length; i++) total += argv.byteLength(i);
    const bytes = Buffer.allocUnsafe(total);
    const args = new CommandArgs();
    let at = 0;
    for (let i = 0; i < argv.length; i++) {
      const n = argv.source(i).copy(bytes, at, argv.start(i), argv.end(i));
      args.push(bytes, at, at + n);
      at += n;
    }
    this.commands.push({ spec, args });
    this.bytes += total + QUEUED_COMMAND_OVERHEAD_BYTES;
  }
}

/** A client's WATCHed keys: dirty once any of them changed (Redis's CLIENT_DIRTY_CAS). */
export class Watching implements WatchOwner {
  dirty = false;
  readonly keys: KeyWatch[] = [];
}
