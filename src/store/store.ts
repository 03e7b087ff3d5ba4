/**
 * Where limiter decisions are taken and keys are read and reset (docs/backend.md): the
 * commands parse their arguments into a LimiterCall and hand it to a LimiterStore with a sink for the
 * reply; the keyspace commands go through a KeyStore. A store is picked once, at start: this
 * process's keyspace (src/store/local-limiter.ts, local-keys.ts: synchronous) or the shared backend
 * (src/backend/backend-limiter.ts, backend-keys.ts: asynchronous, each reply in its place through
 * the client's deferred replies), whose `backend-unavailable` policy is a store too
 * (src/store/policy-limiter.ts). No handler knows which store answers.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import type { LimiterCall } from './limiter-call.js';

/** A reply written later, in its place among the client's replies (Client.defer). */
export type DeferredReply = (write: (reply: ReplyWriter) => void) => void;

/** The connection a reply belongs to, as a store sees it. */
export interface ReplyPlace {
  /** Marks this command's place for a reply written later; the function returned writes it, once. */
  defer(): DeferredReply;
}

/**
 * Where a store writes a command's answer, and the command's time. A CommandContext is one (no
 * object per call); an answer given after an asynchronous call gets one with the time of then.
 */
export interface StoreSink {
  /** The reply writer of the command's turn: a synchronous answer goes here. */
  reply: ReplyWriter;
  /** Its connection, for an answer that comes later. */
  client: ReplyPlace;
  /** The time of the command (µs, and ms), one snapshot per command (EXEC: one for all). */
  nowUs: number;
  nowMs: number;
}

/** Takes parsed limiter calls and answers each into its sink: allowed or limited, or an error. */
export interface LimiterStore {
  decide(call: LimiterCall, sink: StoreSink): void;
  /**
   * EXEC: the limiter calls decided until endUnit() form one unit, decided together (on the
   * backend, one script: atomic) in the order given, each answered in its place.
   */
  beginUnit(): void;
  endUnit(): void;
  /**
   * Before EXEC runs anything: the keys of its queued limiter calls, when this store needs them to
   * share a slot (a Cluster backend); null when any keys go (this process, one Redis).
   */
  unitKeys(): UnitKeyCheck | null;
}

/** Collects the keys of a transaction's limiter calls; `refusal` says why they cannot go as one unit. */
export interface UnitKeyCheck {
  add(argv: CommandArgs, i: number): void;
  /** The error EXEC answers instead of running anything (CROSSSLOT), or null. */
  refusal(): string | null;
}

/** SCAN's options, parsed by the command (src/commands/scan-args.ts). */
export interface ScanRequest {
  /** The cursor as a number (this process's keyspace). */
  cursor: number;
  /** The cursor as received (a backend's cursors may be wider than 2^53). */
  cursorText: string;
  count: number;
  /** MATCH, or null for every key. */
  pattern: string | null;
  /** TYPE, lowercase, or null. */
  typeFilter: string | null;
}

/**
 * The keyspace commands' store: DEL/UNLINK (keys in `argv` from 1), EXISTS, TYPE, TTL/PTTL,
 * SCAN, KEYS, DBSIZE, FLUSHDB/FLUSHALL, and RL.BLOCK. Each writes its reply into the sink, at once or later.
 */
export interface KeyStore {
  del(sink: StoreSink, argv: CommandArgs): void;
  /**
   * RL.BLOCK: the key in argument 1 becomes a block (src/limiters/block.ts) ending `ms` (≥ 1) from
   * now, whatever it held; replies OK.
   */
  block(sink: StoreSink, argv: CommandArgs, ms: number): void;
  exists(sink: StoreSink, argv: CommandArgs): void;
  /** TYPE of the key in argument 1. */
  type(sink: StoreSink, argv: CommandArgs): void;
  /** TTL (seconds, rounded as Redis) or PTTL of the key in argument 1. */
  ttl(sink: StoreSink, argv: CommandArgs, inMs: boolean): void;
  scan(sink: StoreSink, request: ScanRequest): void;
  keys(sink: StoreSink, pattern: string): void;
  dbsize(sink: StoreSink): void;
  flush(sink: StoreSink): void;
}
