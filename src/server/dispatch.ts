/**
 * Command dispatch: finds a command in the table, runs the gates (src/server/gates.ts) in order,
 * queues it inside MULTI or runs it, and keeps the books after it ran (INFO commandstats and
 * errorstats, the latency histogram, the slow log). One instance per server; every command of
 * every client goes through execute(), and the queued ones of EXEC through callQueued().
 */
import { ArgumentTooLongError, type CommandArgs } from '../protocol/command-args.js';
import { KeyspaceFullError } from '../keyspace/keyspace.js';
import { performance } from 'node:perf_hooks';
import type { Config } from '../config.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import { commandCatalog, lookupCommand, lookupSubcommand } from '../commands/table.js';
import { ACL_DENIED_CMD, ACL_LOG_TEXT_BYTES, deniedKeyIndex } from '../acl/users.js';
import { loggedArg } from '../log-text.js';
import { aclClientInfo } from '../commands/acl.js';
import { TRAIT_RUNS_IN_MULTI, TRAIT_RUNS_QUEUE, TRAIT_SKIP_SLOWLOG, type CommandContext, type CommandSpec } from '../commands/types.js';
import type { Client } from './client.js';
import { recordDuration, type CommandStat, type Stats } from './stats.js';
import { errorText } from './tasks.js';
import { refusal } from './gates.js';
import type { Server } from './server.js';

/** The reply to a command queued in MULTI. */
const QUEUED_REPLY = Buffer.from('+QUEUED\r\n');

export class Dispatcher {
  readonly writer: ReplyWriter;
  private readonly stats: Stats;
  /** `maxmemory`, kept as a number: the memory gate reads it for every command. */
  maxmemoryBytes = 0;
  /** `client-query-buffer-limit`, kept as a number: every command queued in MULTI is checked against it. */
  private queryBufferLimit = 1024 * 1024 * 1024;
  /** slowlog-log-slower-than and slowlog-max-len, read once per CONFIG change. */
  private slowlogThresholdUs = 10000;
  private slowlogMaxLen = 128;
  private lastName: Buffer = Buffer.alloc(0);
  private lastSpec: CommandSpec | undefined;
  /** The command before the last one: a pipeline alternating two (ACQUIRE, RELEASE) hits one or the other. */
  private prevName: Buffer = Buffer.alloc(0);
  private prevSpec: CommandSpec | undefined;
  /** The counters of lastStatSpec (and prevStatSpec), valid while stats.generation is lastStatGeneration. */
  private lastStatSpec: CommandSpec | undefined;
  private lastStat: CommandStat | undefined;
  private prevStatSpec: CommandSpec | undefined;
  private prevStat: CommandStat | undefined;
  private lastStatGeneration = -1;
  /**
   * The context handed to every command, refilled per call rather than allocated: handlers finish
   * before execute() returns and keep no reference to it.
   */
  readonly ctx: CommandContext;
  private perfMark = performance.now();
  /** The client whose batch is running (beginBatch): error replies at loglevel debug name it. */
  private batchClient: Client | null = null;

  constructor(readonly server: Server) {
    this.writer = server.writer;
    this.stats = server.stats;
    this.ctx = { server, commands: commandCatalog, client: null as unknown as Client, reply: this.writer, nowUs: 0, nowMs: 0, limiter: server.localLimiter, keys: server.localKeys, leases: server.localLeases };
  }

  /** Takes the settings it reads per command (at start and after CONFIG SET). */
  applyConfig(config: Config): void {
    this.writer.onError = this.server.log.enabled('debug') ? this.logErrorReply : null;
    this.maxmemoryBytes = config.int('maxmemory');
    this.queryBufferLimit = config.int('client-query-buffer-limit');
    this.slowlogThresholdUs = config.int('slowlog-log-slower-than');
    this.slowlogMaxLen = config.int('slowlog-max-len');
  }

  /**
   * Marks the start of a batch of commands (one read from one client). Each command's duration for
   * commandstats runs from the end of the previous one, so one clock read per command serves both
   * its time snapshot and its duration.
   */
  beginBatch(client: Client): void {
    this.perfMark = performance.now();
    this.batchClient = client;
  }

  /** loglevel debug: each error reply, with its client (ReplyWriter.onError, null at other levels). */
  private readonly logErrorReply = (text: string): void => {
    const c = this.batchClient;
    this.server.log.debug(`error reply to client id=${c?.id ?? '?'} addr=${c?.addr ?? '?'}: ${text}`, { id: c?.id, addr: c?.addr, error: text });
  };

  private commandStat(spec: CommandSpec, fullName: string): CommandStat {
    const current = this.lastStatGeneration === this.stats.generation;
    if (spec === this.lastStatSpec && current) return this.lastStat!;
    const stat = spec === this.prevStatSpec && current ? this.prevStat! : this.stats.command(fullName);
    if (current) {
      this.prevStatSpec = this.lastStatSpec;
      this.prevStat = this.lastStat;
    } else {
      this.prevStatSpec = undefined;
      this.prevStat = undefined;
    }
    this.lastStatSpec = spec;
    this.lastStat = stat;
    this.lastStatGeneration = this.stats.generation;
    return stat;
  }

  /** The command named by argument 0, remembering the last one: a pipeline mostly repeats one command. */
  private findCommand(argv: CommandArgs): CommandSpec | undefined {
    if (argv.bytesEqual(0, this.lastName)) return this.lastSpec;
    const name = this.lastName;
    const last = this.lastSpec;
    if (argv.bytesEqual(0, this.prevName)) {
      this.lastName = this.prevName;
      this.lastSpec = this.prevSpec;
      this.prevName = name;
      this.prevSpec = last;
      return this.lastSpec;
    }
    const spec = lookupCommand(argv.lower(0));
    if (spec !== undefined) {
      this.prevName = name;
      this.prevSpec = last;
      this.lastName = Buffer.from(argv.buffer(0));
      this.lastSpec = spec;
    }
    return spec;
  }

  /** Runs one command for `client`; its reply goes to the shared writer. */
  execute(client: Client, argv: CommandArgs): void {
    const reply = this.writer;
    let spec = this.findCommand(argv);
    if (spec === undefined) {
      this.stats.error('ERR');
      reply.error(unknownCommandMessage(argv));
      return;
    }
    if (spec.subcommands !== undefined && argv.length >= 2) {
      const sub = lookupSubcommand(spec, argv.lower(1));
      if (sub === undefined) {
        this.stats.error('ERR');
        reply.error(`ERR unknown subcommand '${truncate(argv.text(1), 128)}'. Try ${spec.name.toUpperCase()} HELP.`);
        return;
      }
      spec = sub;
    }
    const fullName = spec.fullName ?? spec.name;
    const stat = this.commandStat(spec, fullName);
    const refused = refusal(this, client, spec, argv);
    if (refused !== null) {
      stat.rejectedCalls++;
      this.stats.error(refused.code);
      reply.error(refused.message);
      return;
    }
    // MULTI: a command is queued only here, after every gate, because Redis's processCommand
    // queues last, after all of its checks; a refusal while in MULTI marks the transaction
    // (executeInMulti). One test for a client not in MULTI.
    if (client.multi !== null && this.queue(client, spec, argv)) return;
    const started = this.perfMark;
    const nowUs = this.server.clock.nowUsAt(started);
    client.lastCommand = fullName;
    this.call(client, spec, fullName, stat, argv, nowUs, started);
  }

  /**
   * execute() for a client in MULTI: a command that does not reach the queue step (queue()) was
   * refused, which marks the transaction (EXEC then answers EXECABORT); a refused EXEC ends it
   * with its error in Redis's EXECABORT form (execCommandAbort).
   */
  executeInMulti(client: Client, argv: CommandArgs): void {
    const m = client.multi!;
    m.admitted = false;
    const writer = this.writer;
    const mark = writer.length;
    this.execute(client, argv);
    if (m.admitted || client.multi !== m) return;
    m.flagged = true;
    const spec = this.findCommand(argv);
    if (spec === undefined || (spec.traits! & TRAIT_RUNS_QUEUE) === 0 || writer.length <= mark) return;
    const error = writer.errorTextAt(mark);
    if (error.startsWith('EXECABORT ')) {
      client.discardTransaction();
      return;
    }
    writer.truncate(mark);
    client.discardTransaction();
    // Redis passes its own format-built messages without their `ERR ` (arity), shared ones whole (NOAUTH, OOM).
    writer.error(`EXECABORT Transaction discarded because of: ${error.startsWith('ERR ') ? error.slice(4) : error}`);
  }

  /**
   * A command from a client in MULTI that passed every gate: queued (+QUEUED) and true, or false
   * for the commands that run at once (`runs-in-multi`: EXEC, DISCARD, MULTI, WATCH, QUIT, RESET).
   * The queue counts toward the query buffer limit: queued bytes plus pending input over
   * client-query-buffer-limit closes the client, so a MULTI that never ends cannot pin unbounded
   * memory.
   */
  private queue(client: Client, spec: CommandSpec, argv: CommandArgs): boolean {
    const m = client.multi!;
    m.admitted = true;
    if ((spec.traits! & TRAIT_RUNS_IN_MULTI) !== 0) return false;
    client.lastCommand = spec.fullName ?? spec.name;
    this.server.clientsMemory.change(client, 'multi', m.push(spec, argv));
    if (client.closing) return true; // evicted: the queue grew the clients' memory over maxmemory-clients
    const held = m.bytes + client.parser.pendingBytes;
    if (held > this.queryBufferLimit) {
      client.closeForQueryBuffer(held);
      return true;
    }
    this.writer.constant(QUEUED_REPLY);
    return true;
  }

  /**
   * Runs one queued command inside EXEC: its reply goes to the shared writer (an element of EXEC's
   * array), counted in commandstats and errorstats as a command of its own, as Redis's call() from
   * execCommand. `nowUs` is EXEC's: one time snapshot for the whole transaction, as Redis's
   * cmd_time_snapshot is taken once for nested calls.
   */
  callQueued(client: Client, spec: CommandSpec, argv: CommandArgs, nowUs: number): void {
    const fullName = spec.fullName ?? spec.name;
    // As in execute(): each queued command's duration runs from the end of the previous one (or
    // EXEC's start), one clock read per command.
    this.call(client, spec, fullName, this.commandStat(spec, fullName), argv, nowUs, this.perfMark);
  }

  /**
   * Runs a command that passed the gates, then keeps the books: commandstats and the latency
   * histogram, the slow log, and the failed-call counters (a command whose reply is an error, as
   * the writer recorded it: Redis's failed_calls and errorstats). More arguments than `maxArity` is
   * the command's own error, as Redis's commands check it in their code.
   */
  private call(client: Client, spec: CommandSpec, fullName: string, stat: CommandStat, argv: CommandArgs, nowUs: number, started: number): void {
    const reply = this.writer;
    const ctx = this.ctx;
    ctx.client = client;
    ctx.nowUs = nowUs;
    ctx.nowMs = Math.floor(nowUs / 1000);
    const mark = reply.length;
    reply.errorAt = -1;
    try {
      if (spec.maxArity !== undefined && argv.length > spec.maxArity) reply.error(`ERR wrong number of arguments for '${fullName}' command`);
      else spec.run!(ctx, argv);
    } catch (e) {
      this.commandFailed(fullName, e, mark);
    }
    const ended = performance.now();
    this.perfMark = ended;
    const durationUs = (ended - started) * 1000;
    stat.usec += durationUs;
    recordDuration(stat, durationUs);
    const thresholdUs = this.slowlogThresholdUs;
    if (durationUs >= thresholdUs && thresholdUs >= 0 && (spec.traits! & TRAIT_SKIP_SLOWLOG) === 0) {
      this.server.slowlog.consider(thresholdUs, this.slowlogMaxLen, durationUs, argv, spec.secretArg, nowUs, client.addr, client.name);
    }
    stat.calls++;
    this.stats.totalCommands++;
    if (reply.errorAt === mark) {
      stat.failedCalls++;
      this.stats.error(reply.errorCodeAt(mark));
    }
  }

  /**
   * A command handler threw: its partial reply is replaced by an error and the server goes on (an
   * exception from a socket's data handler would otherwise end the process). An argument too long
   * for a string is the client's doing, and so is a key beyond the keyspace's bound (an OOM, as
   * maxmemory's refusal); anything else is a bug, logged.
   */
  private commandFailed(fullName: string, e: unknown, mark: number): void {
    const reply = this.writer;
    reply.truncate(mark);
    if (e instanceof ArgumentTooLongError) {
      reply.error(`ERR argument of ${e.bytes} bytes is too long for '${fullName}'`);
      return;
    }
    if (e instanceof KeyspaceFullError) {
      reply.error(`OOM command not allowed: ${e.message}`);
      return;
    }
    this.server.tasks.warnLimited(`command ${fullName}`, `internal error in '${fullName}': ${errorText(e)}`, { command: fullName, error: errorText(e) });
    reply.error(`ERR internal error in '${fullName}'`);
  }

  /**
   * Counts and logs an ACL refusal (`result` from aclCheck) of `client`'s command: the INFO
   * acl_access_denied_* counter and an ACL LOG entry with `context` (toplevel, or multi for a
   * queued command refused at EXEC). The caller counts the error reply (errorstats NOPERM) and
   * writes it.
   */
  logAclDenial(client: Client, fullName: string, argv: CommandArgs, result: number, context: 'toplevel' | 'multi'): void {
    if (result === ACL_DENIED_CMD) this.stats.aclDeniedCmd++;
    else this.stats.aclDeniedKey++;
    const object = result === ACL_DENIED_CMD ? fullName : loggedArg(argv, deniedKeyIndex, ACL_LOG_TEXT_BYTES);
    this.server.acl.addLog(result === ACL_DENIED_CMD ? 'command' : 'key', context, object, client.user.name, aclClientInfo(client), Date.now());
  }
}

/** Like C's `%.<n>s`: at most n chars, and nothing from a NUL byte on. */
function truncate(s: string, n: number): string {
  const nul = s.indexOf('\0');
  if (nul !== -1 && nul < n) n = nul;
  return s.length > n ? s.slice(0, n) : s;
}

/** Redis 7's text: `unknown command 'x', with args beginning with: 'a' 'b' ` (args up to 128 chars). */
function unknownCommandMessage(argv: CommandArgs): string {
  let args = '';
  for (let i = 1; i < argv.length && args.length < 128; i++) {
    args += `'${truncate(argv.text(i, 128 - args.length), 128 - args.length)}' `;
  }
  return `ERR unknown command '${truncate(argv.text(0), 128)}', with args beginning with: ${args}`;
}
