/**
 * The shape of a command, described once. Arity checks, the auth gate, `COMMAND INFO`,
 * `COMMAND DOCS`, `COMMAND LIST` and subcommand help are all generated from these descriptions.
 */
import type tls from 'node:tls';
import type { Keyspace } from '../keyspace/keyspace.js';
import type { RedisBackend } from '../backend/redis-backend.js';
import type { CommandArgs } from '../protocol/command-args.js';
import type { Client } from '../server/client.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import type { Acl, User } from '../acl/users.js';
import type { Clock } from '../clock.js';
import type { KeyStore, LimiterStore } from '../store/store.js';
import type { LeaseStore } from '../store/lease-store.js';
import type { LeaseCall } from '../store/lease-call.js';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import type { AppendOnly } from '../persistence/journal.js';
import type { SaveMode, Snapshotter } from '../persistence/snapshotter.js';
import type { ClientsMemory } from '../server/client-memory.js';
import type { MemoryGuard } from '../server/memory.js';
import type { SlowLog } from '../server/slowlog.js';
import type { Stats } from '../server/stats.js';
import type { Tasks } from '../server/tasks.js';

/** One argument as `COMMAND DOCS` shows it (Redis's argument schema, trimmed to what we use). */
export interface ArgDoc {
  name: string;
  type: 'key' | 'string' | 'integer' | 'double' | 'pattern' | 'pure-token' | 'oneof' | 'block' | 'unix-time';
  token?: string;
  optional?: boolean;
  multiple?: boolean;
  arguments?: ArgDoc[];
}

export type CommandFlag =
  | 'write' | 'readonly' | 'fast' | 'admin' | 'noscript' | 'loading' | 'stale' | 'no-auth'
  | 'denyoom' | 'allow-busy' | 'no-multi' | 'blocking' | 'skip_slowlog';

/**
 * How the dispatcher treats a command beyond its COMMAND INFO flags (COMMAND never shows these).
 * Redis decides these by comparing command procs in processCommand; here the table says it:
 * - `runs-in-multi`: runs at once inside MULTI instead of being queued (EXEC, DISCARD, MULTI,
 *   WATCH, QUIT, RESET);
 * - `leaves-multi`: ends a transaction, so memory over maxmemory does not refuse it in MULTI
 *   (Redis's reject_cmd_on_oom spares EXEC, DISCARD, QUIT, RESET);
 * - `runs-queue`: runs the MULTI queue (EXEC): refused under OOM when the queue holds a `denyoom`
 *   command, and its own refusals (arity) come in EXECABORT form, as Redis's execCommandAbort;
 * - `health-check`: answers while the snapshot loads though not flagged `loading` (PING: what
 *   health checks poll; Redis refuses it then).
 */
export type DispatchFlag = 'runs-in-multi' | 'leaves-multi' | 'runs-queue' | 'health-check';

/**
 * A key spec's flags, Redis's names (src/commands/*.json `key_specs[].flags`): RO/RW/OW/RM, and
 * what the command does with the key, access (reads it), update, insert, delete. The ACL's key
 * permissions follow them as Redis's: `access` needs read, `update`/`insert`/`delete` need write.
 */
export type KeySpecFlag = 'RO' | 'RW' | 'OW' | 'RM' | 'access' | 'update' | 'insert' | 'delete';

/**
 * Which arguments are secrets, kept out of the slow log as `(redacted)` (Redis redacts them in
 * each command's code, redactClientCommandArgument; here the table says which):
 * - `from`: every argument from this index on (AUTH, ACL SETUSER/GETUSER/DELUSER);
 * - `options`: an option list from index `first`, each option (lowercase) with how many arguments
 *   it takes; the arguments of the `secret` option are secrets, and the list ends at the first word
 *   that is no option or lacks its arguments (HELLO's AUTH username password);
 * - `sensitiveConfigValuesFrom`: name/value pairs from this index, the value of a sensitive config
 *   (requirepass, ...) secret (CONFIG SET).
 */
export type Redaction =
  | { from: number }
  | { options: Readonly<Record<string, number>>; first: number; secret: string }
  | { sensitiveConfigValuesFrom: number };

/** The bits of CommandSpec.traits: what the dispatcher tests per command, one AND each. */
export const TRAIT_NO_AUTH = 1;
export const TRAIT_DENYOOM = 2;
export const TRAIT_NO_MULTI = 4;
export const TRAIT_SKIP_SLOWLOG = 8;
export const TRAIT_RUNS_IN_MULTI = 16;
export const TRAIT_LEAVES_MULTI = 32;
export const TRAIT_RUNS_QUEUE = 64;

/**
 * The command table as the handlers that describe or check other commands read it (COMMAND INFO,
 * DOCS, LIST, COUNT, ACL DRYRUN): handed in through the context, because the table is made of
 * those handlers' own command families and cannot be imported by them.
 */
export interface CommandCatalog {
  lookupCommand(lowercaseName: string): CommandSpec | undefined;
  lookupSubcommand(container: CommandSpec, lowercaseName: string): CommandSpec | undefined;
  allCommands(): CommandSpec[];
}

/*
 * What of the server the handlers may use, one interface per capability. The server implements
 * them all (src/server/server.ts); a handler sees them through CommandContext.server, and a helper
 * takes only the capability it needs.
 */

/** The counters: INFO stats, keyspace hits and misses, limiter counts, CONFIG RESETSTAT. */
export interface StatsAccess {
  readonly stats: Stats;
  resetStats(): void;
}

/** The running configuration and applying a change to it: CONFIG GET/SET/REWRITE. */
export interface ConfigAccess {
  readonly config: Config;
  /** Why `value` cannot be set now (null when it can): checks that need the running server. */
  configRefusal(name: string, value: string): string | null;
  applyRuntimeConfig(): void;
}

/** The connected clients: CLIENT LIST/KILL, INFO clients, MEMORY STATS. */
export interface ClientRegistry {
  readonly clients: ReadonlyMap<number, Client>;
  readonly clientsMemory: ClientsMemory;
  readonly tlsHandshakesInProgress: number;
}

/** The ACL users, and closing the clients of users that go: ACL, AUTH, HELLO. */
export interface AclAccess {
  readonly acl: Acl;
  /** Whether a new connection starts unauthenticated (the default user needs a password). */
  readonly authRequired: boolean;
  loadAclFile(path: string, caller: Client | null): void;
  loadAclText(path: string, text: string, caller: Client | null): void;
  disconnectUsers(users: Set<User>, caller: Client | null): void;
}

/**
 * Snapshots and the journal: SAVE, BGSAVE, LASTSAVE, BGREWRITEAOF, INFO persistence, the commands
 * refused while loading.
 */
export interface PersistenceAccess {
  readonly snapshots: Snapshotter;
  readonly journal: AppendOnly;
}

/** The listening sockets: CONFIG SET port/bind and the TLS files, INFO server. */
export interface ListenerControl {
  readonly port: number;
  readonly tlsPort: number;
  /** A CONFIG SET of port/bind in flight (another one is refused meanwhile). */
  rebinding: boolean;
  rebind(bind: string, port: number): Promise<string | null>;
  readonly tlsActive: boolean;
  reloadTls(context: tls.TlsOptions): void;
  /** Other doors' word on CONFIG SET (the rate limit service's TLS files): checked before, told after. */
  readonly configHooks: ConfigSetHook[];
}

/** A part of the server that must check, then apply, some settings a CONFIG SET changes. */
export interface ConfigSetHook {
  /** Before anything changes: a refusal (the reply's reason), or null. `get` reads the values the set would leave. */
  check(names: readonly string[], get: (name: string) => string): string | null;
  /** After the values are set. */
  applied(names: readonly string[]): void;
}

/** The process itself: clock, log, identity, periodic tasks, memory, slow log, SHUTDOWN. */
export interface ProcessControl {
  readonly clock: Clock;
  readonly log: Logger;
  readonly runId: string;
  readonly startedMs: number;
  readonly tasks: Tasks;
  readonly periodicRuns: number;
  readonly memory: MemoryGuard;
  readonly slowlog: SlowLog;
  shutdown(reason: string, opts?: { save?: SaveMode; refuseIfSaveFails?: boolean }): boolean;
}

/** The keyspace and the bookkeeping of WATCHed keys released in slices (INFO). */
export interface KeyspaceAccess {
  readonly keyspace: Keyspace;
  readonly pendingWatchFrees: number;
  readonly watchFreeSlices: number;
  readonly watchFreeSliceMaxUs: number;
}

/** The shared backend, for INFO backend (the commands reach it only through their stores). */
export interface BackendAccess {
  readonly backend: RedisBackend | null;
}

/** Running the commands a MULTI queued: EXEC. */
export interface QueuedDispatch {
  aclDenied(client: Client, fullName: string, argv: CommandArgs, result: number, context: 'toplevel' | 'multi'): void;
  callQueued(client: Client, spec: CommandSpec, argv: CommandArgs, nowUs: number): void;
}

/**
 * The clients waiting in `RL.ACQUIRE ... WAIT` (src/server/lease-waiters.ts): blocked as BLPOP
 * blocks, served first come first served per key.
 */
export interface LeaseWaiting {
  /** Clients waiting now (INFO blocked_clients), waits ended by their timeout, waits granted. */
  readonly waiting: number;
  readonly timedOut: number;
  readonly granted: number;
  /** Blocks `client` (no reply, no later command until then) and queues `call` (detached here) behind the key's waiters. */
  wait(client: Client, call: LeaseCall, nowMs: number): void;
  /** Serves the key's waiters, if any, now (before a call that does not wait takes a slot). */
  serveKey(key: Buffer): void;
  /** CLIENT UNBLOCK: ends the client's wait as a timeout would, or with -UNBLOCKED; false when it waits for nothing. */
  unblock(client: Client, error: boolean): boolean;
  /** DEBUG CLOCK moved: leases may have ended; every key's waiters try again. */
  clockChanged(): void;
}

export interface LeaseWaitAccess {
  readonly leaseWaiters: LeaseWaiting;
}

/** Everything of the server a handler may use. */
export interface CommandServer
  extends StatsAccess, ConfigAccess, ClientRegistry, AclAccess, PersistenceAccess, ListenerControl, ProcessControl,
    KeyspaceAccess, BackendAccess, QueuedDispatch, LeaseWaitAccess {}

/** What a handler gets: the server, the calling client, the reply writer and the call's time. */
export interface CommandContext {
  server: CommandServer;
  /** Every command's description. */
  commands: CommandCatalog;
  client: Client;
  reply: ReplyWriter;
  /** The server clock at the start of this command, in µs (one snapshot per command, as Redis). */
  nowUs: number;
  nowMs: number;
  /** Where the limiter commands' calls are decided (this process's keyspace, or the shared backend), picked at start. */
  limiter: LimiterStore;
  /** Where the keyspace commands (DEL, TTL, SCAN...) read and reset keys, picked with `limiter`. */
  keys: KeyStore;
  /** Where the concurrency limits (RL.ACQUIRE, RL.RELEASE, RL.RENEW) are decided, picked with `limiter`. */
  leases: LeaseStore;
}

/** Runs a command whose arity was checked. `argv[0]` is the command name as sent. */
export type CommandHandler = (ctx: CommandContext, argv: CommandArgs) => void;

export interface CommandSpec {
  /** Lowercase name (`cl.throttle`, or `setname` for a subcommand). */
  name: string;
  /** Redis arity: N = exactly N arguments including the name; −N = at least N. */
  arity: number;
  /**
   * The most arguments (with the name) a command of variable arity takes. More is refused with
   * `wrong number of arguments` by the command itself, as Redis's commands that check it in their
   * code (PING): counted as a failed call, not a rejected one, queued in MULTI and refused at EXEC.
   */
  maxArity?: number;
  flags: CommandFlag[];
  /** How the dispatcher treats it (see DispatchFlag). */
  dispatch?: DispatchFlag[];
  /** Key positions as COMMAND INFO reports them (0, 0, 0 when there are none). */
  firstKey: number;
  lastKey: number;
  keyStep: number;
  group: string;
  summary: string;
  since: string;
  complexity?: string;
  args: ArgDoc[];
  /** A container command (CLIENT, CONFIG, ...) dispatches on argv[1] to these. */
  subcommands?: CommandSpec[];
  /** Absent on containers: the subcommand's handler runs. */
  run?: CommandHandler;
  /** Set by the table for subcommands: `client|setname`. */
  fullName?: string;
  /**
   * ACL categories beyond those derived from flags and group (src/acl/categories.ts), without `@`:
   * `keyspace`, `dangerous`, ...
   */
  aclExtra?: string[];
  /** Set by the table: every ACL category of the command (derived plus aclExtra), without `@`. */
  aclCategories?: string[];
  /** Set by the table: a small number for the ACL's per-user allowed table (one byte per id). */
  id?: number;
  /**
   * Its keys' key spec flags; without them, a `write` command's keys are `RW access update` and
   * another's `RO access` (the table fills them in).
   */
  keyFlags?: KeySpecFlag[];
  /** Set by the table from keyFlags: the key access (src/acl/users.ts KEY_READ | KEY_WRITE bits) the command needs. */
  aclKeyAccess?: number;
  /** Set by the table: the TRAIT_* bits of its flags and dispatch flags. */
  traits?: number;
  /**
   * For commands whose keys are not at firstKey..lastKey by keyStep (RL.ALL): calls `visit` with
   * each key's argument index (the name is at `base`), stopping when it returns false. Only the ACL reads it, and only for
   * users whose key patterns are restricted.
   */
  forEachKey?: (argv: CommandArgs, base: number, visit: (index: number) => boolean) => void;
  /** Its secret arguments (see Redaction). */
  redacts?: Redaction;
  /**
   * Set by the table from `redacts`: whether argument `i` is a secret, which the slow log keeps as
   * `(redacted)`. Read only when an entry is written.
   */
  secretArg?: (argv: CommandArgs, i: number) => boolean;
}

/** Whether `argc` arguments (with the name) fit the table's arity: N exactly, or at least −N. */
export function arityAllows(spec: CommandSpec, argc: number): boolean {
  return spec.arity > 0 ? argc === spec.arity : argc >= -spec.arity;
}

/** Shorthand for the common case of a command without keys. */
export function noKeys(): Pick<CommandSpec, 'firstKey' | 'lastKey' | 'keyStep'> {
  return { firstKey: 0, lastKey: 0, keyStep: 0 };
}

/** Shorthand for a command whose key is its first argument. */
export function firstKeyOnly(): Pick<CommandSpec, 'firstKey' | 'lastKey' | 'keyStep'> {
  return { firstKey: 1, lastKey: 1, keyStep: 1 };
}
