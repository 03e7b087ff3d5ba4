/**
 * A client's MULTI state (its queue of commands) and its WATCHed keys, as Redis's multiState and
 * watched_keys. The commands themselves (MULTI, EXEC, ...) are in src/commands/transactions.ts; the
 * dispatcher (src/server/dispatch.ts) queues, and the keyspace marks watches dirty on its write paths.
 *
 * Memory: what a queue and a watch set hold is counted in the client's memory account
 * (src/server/client-memory.ts) at its real size. A queued command is packed into the queue's byte
 * arena (one int32 end offset per argument, then the argument bytes), not kept as a CommandArgs:
 * a CommandArgs copy cost ~920 bytes (V8 heap plus array buffers) per command and ~20 to ~280 bytes
 * per argument beyond the argument bytes (its arrays, views and their growth slack), so a queue of
 * PINGs or of many-key DELs held 3.5× to 19× what a byte count said. Packed, a command costs one small object and its bytes.
 */
import { CommandArgs } from '../protocol/command-args.js';
import type { KeyWatch, WatchOwner } from '../keyspace/keyspace.js';
import type { CommandSpec } from '../commands/types.js';

/**
 * What one queued command costs beyond its arena bytes, measured with V8 11 on x64 (node
 * --expose-gc, heapUsed + arrayBuffers over 100k queued commands): the QueuedCommand object (4
 * fields, 56 bytes) and its slot in the queue array with the array's growth slack.
 */
export const QUEUED_COMMAND_OVERHEAD_BYTES = 72;
/** Bytes an arena chunk costs beyond its capacity: the Buffer view, its ArrayBuffer and backing-store record. */
export const BUFFER_OVERHEAD_BYTES = 240;
/** The first arena chunk of a queue; each next one doubles, up to ARENA_MAX_CHUNK_BYTES. */
const ARENA_FIRST_CHUNK_BYTES = 1024;
const ARENA_MAX_CHUNK_BYTES = 64 * 1024;

export interface QueuedCommand {
  readonly spec: CommandSpec;
  /** The chunk holding it: `argc` int32 end offsets (relative to the bytes' start) at `at`, then the bytes. */
  readonly chunk: Buffer;
  readonly at: number;
  readonly argc: number;
}

export class Transaction {
  readonly commands: QueuedCommand[] = [];
  /** Bytes the queue holds: its arena chunks and QUEUED_COMMAND_OVERHEAD_BYTES each (CLIENT LIST multi-mem). */
  bytes = 0;
  /** A command was refused while queuing: EXEC answers EXECABORT (Redis's CLIENT_DIRTY_EXEC). */
  flagged = false;
  /**
   * Set by the dispatcher when the command being dispatched got past every refusal to the queue
   * step; a command that ends before it was refused (see Dispatcher.executeInMulti).
   */
  admitted = false;
  private chunk: Buffer | null = null;
  private used = 0;
  private nextChunkBytes = ARENA_FIRST_CHUNK_BYTES;

  /** Queues a copy of `argv`; returns the bytes it added to the account. */
  push(spec: CommandSpec, argv: CommandArgs): number {
    const argc = argv.length;
    let need = argc * 4;
    for (let i = 0; i < argc; i++) need += argv.byteLength(i);
    // 4-byte alignment for the offsets.
    need = (need + 3) & ~3;
    let added = QUEUED_COMMAND_OVERHEAD_BYTES;
    let chunk = this.chunk;
    let at = this.used;
    if (chunk === null || at + need > chunk.length) {
      if (need * 2 > ARENA_MAX_CHUNK_BYTES) {
        // A big command gets a buffer of its own; the current chunk stays open for small ones.
        chunk = Buffer.allocUnsafeSlow(need);
        at = 0;
        added += need + BUFFER_OVERHEAD_BYTES;
      } else {
        const size = Math.max(need, this.nextChunkBytes);
        this.nextChunkBytes = Math.min(ARENA_MAX_CHUNK_BYTES, size * 2);
        chunk = this.chunk = Buffer.allocUnsafeSlow(size);
        at = 0;
        this.used = need;
        added += size + BUFFER_OVERHEAD_BYTES;
      }
    } else {
      this.used = at + need;
    }
    let pos = at + argc * 4;
    const base = pos;
    for (let i = 0; i < argc; i++) {
      pos += argv.source(i).copy(chunk, pos, argv.start(i), argv.end(i));
      chunk.writeInt32LE(pos - base, at + i * 4);
    }
    this.commands.push({ spec, chunk, at, argc });
    this.bytes += added;
    return added;
  }
}

/** Fills `into` with the arguments of a queued command (views of the queue's bytes); returns it. */
export function queuedArgs(c: QueuedCommand, into: CommandArgs): CommandArgs {
  into.reset();
  const { chunk, at, argc } = c;
  const base = at + argc * 4;
  let start = base;
  for (let i = 0; i < argc; i++) {
    const end = base + chunk.readInt32LE(at + i * 4);
    into.push(chunk, start, end);
    start = end;
  }
  return into;
}

/**
 * What one WATCHed key costs beyond its key's bytes, measured as above over 1M keys watched by one
 * client: its KeyWatch object (56), the key string's header (16, bytes rounded up to 8), its entry
 * in the keyspace's watch index (a Map entry with the table's growth slack, ~40) and its slot in the
 * client's list (~12). A key watched by several clients adds a list to the index (see Keyspace.watch).
 */
export const WATCHED_KEY_OVERHEAD_BYTES = 128;

/** The account bytes of one watch of `key` (a binary string: one byte per char). */
export function watchBytes(key: string): number {
  return WATCHED_KEY_OVERHEAD_BYTES + ((key.length + 7) & ~7);
}

/**
 * The most keys one client may WATCH (until UNWATCH, EXEC, DISCARD): ~17 MB of account at most. Redis
 * has no such cap; here a WATCH beyond it is refused whole (nothing of it is watched), so one
 * client cannot grow the watch index by millions of keys.
 */
export const MAX_WATCHED_KEYS = 100_000;
/** Watches freed per event-loop turn when a big watch set ends, at most (src/server/watch-release.ts)... */
export const WATCH_FREE_SLICE_KEYS = 8192;
/** ...and for at most this long, the clock read every WATCH_FREE_CHECK_KEYS watches. */
export const WATCH_FREE_SLICE_MS = 2;
export const WATCH_FREE_CHECK_KEYS = 512;

/** A client's WATCHed keys: dirty once any of them changed (Redis's CLIENT_DIRTY_CAS). */
export class Watching implements WatchOwner {
  dirty = false;
  readonly keys: KeyWatch[] = [];
  /** Bytes these watches hold (watchBytes each): the client's memory account. */
  bytes = 0;
}
