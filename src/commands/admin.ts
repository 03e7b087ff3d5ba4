/**
 * Server administration, as Redis: CONFIG, TIME, SHUTDOWN, and DEBUG (CLOCK, SLEEP) behind
 * `enable-debug-command`.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import tls from 'node:tls';
import { Config, ConfigError } from '../config.js';
import { createTlsServer } from '../server/tls.js';
import { fullGc } from '../server/memory.js';
import { parseMillisToMicros } from '../clock.js';
import { globMatch } from '../glob.js';
import type { SaveMode } from '../persistence/snapshotter.js';
import { replyHelp } from './help.js';
import { noKeys, type CommandContext, type CommandSpec } from './types.js';

/**
 * CONFIG GET parameter [parameter ...]. As Redis 7: a name without glob characters is looked up
 * (case-insensitively) and answered under the name as asked; a pattern answers canonical names.
 * Each option is answered once.
 */
function configGet(ctx: CommandContext, argv: CommandArgs): void {
  const config = ctx.server.config;
  const answered = new Map<string, string>();
  for (let i = 2; i < argv.length; i++) {
    const asked = argv.text(i);
    const name = asked.toLowerCase();
    if (!/[*?[]/.test(name)) {
      if (config.has(name) && !answered.has(name)) answered.set(name, asked);
      continue;
    }
    for (const [n] of config.matching((candidate) => globMatch(name, candidate))) if (!answered.has(n)) answered.set(n, n);
  }
  ctx.reply.mapHeader(answered.size);
  for (const [name, asked] of answered) {
    ctx.reply.bulk(asked);
    if (config.isBytes(name)) ctx.reply.bulk(config.bytes(name));
    else ctx.reply.text(config.get(name));
  }
}

/** CONFIG SET name value [name value ...]: all or nothing, as Redis 7. */
function configSet(ctx: CommandContext, argv: CommandArgs): void {
  const config = ctx.server.config;
  if ((argv.length - 2) % 2 !== 0) {
    ctx.reply.error("ERR wrong number of arguments for 'config|set' command");
    return;
  }
  // Values as bytes: Config.set decodes text options as UTF-8 and keeps requirepass's bytes.
  const pairs: [string, Buffer][] = [];
  for (let i = 2; i < argv.length; i += 2) {
    const name = argv.lower(i);
    if (!config.has(name)) {
      ctx.reply.error(`ERR Unknown option or number of arguments for CONFIG SET - '${argv.text(i)}'`);
      return;
    }
    if (pairs.some(([n]) => n === name)) {
      ctx.reply.error(`ERR CONFIG SET failed (possibly related to argument '${name}') - duplicate parameter`);
      return;
    }
    pairs.push([name, argv.buffer(i + 1)]);
  }
  // Validate everything on a scratch copy first, so a bad pair changes nothing. It starts with the
  // running listener and TLS values, so a new certificate is checked against the key in use.
  const scratch = new Config();
  for (const name of SCRATCH_BASE) scratch.set(name, config.get(name));
  for (const [name, value] of pairs) {
    try {
      const why = IMMUTABLE_WHY[name];
      if (why !== undefined) throw new ConfigError(why);
      if (!config.isMutable(name)) throw new ConfigError("can't set immutable config");
      scratch.set(name, value, true);
      // Values the running server cannot take (maxclients beyond the descriptor limit).
      const refusal = ctx.server.configRefusal(name, scratch.get(name));
      if (refusal !== null) throw new ConfigError(refusal);
    } catch (e) {
      ctx.reply.error(`ERR CONFIG SET failed (possibly related to argument '${name}') - ${(e as Error).message}`);
      return;
    }
  }
  // New TLS files: load and check them now (a missing file, a key that does not match), swap them
  // in only once everything else has succeeded.
  let tlsContext: tls.TlsOptions | null = null;
  const tlsName = pairs.find(([n]) => TLS_FILES.includes(n))?.[0];
  if (tlsName !== undefined && ctx.server.tlsActive) {
    try {
      tlsContext = createTlsServer(scratch);
      tls.createSecureContext(tlsContext);
    } catch (e) {
      ctx.reply.error(`ERR CONFIG SET failed (possibly related to argument '${tlsName}') - Unable to update TLS configuration: ${(e as Error).message}`);
      return;
    }
  }
  // The other doors that read some of these settings (the rate limit service's TLS files).
  const names = pairs.map(([n]) => n);
  const value = (name: string): string => (names.includes(name) ? scratch.get(name) : config.get(name));
  for (const hook of ctx.server.configHooks) {
    const refusal = hook.check(names, value);
    if (refusal !== null) {
      ctx.reply.error(`ERR CONFIG SET failed (possibly related to argument '${names[0]}') - ${refusal}`);
      return;
    }
  }
  const commit = (): void => {
    for (const [name, value] of pairs) config.set(name, value, true);
    if (tlsContext !== null) ctx.server.reloadTls(tlsContext);
    for (const hook of ctx.server.configHooks) hook.applied(names);
    ctx.server.applyRuntimeConfig();
  };
  const bindChanged = pairs.some(([n]) => n === 'bind') && scratch.get('bind') !== config.get('bind');
  const portChanged = pairs.some(([n]) => n === 'port') && scratch.int('port') !== ctx.server.port;
  if (!bindChanged && !portChanged) {
    commit();
    ctx.reply.ok();
    return;
  }
  // New listeners bind asynchronously: this client's reply (and its later commands) wait for them.
  const server = ctx.server;
  if (ctx.client.multi !== null) {
    // EXEC's reply is one array written now; a reply that comes later cannot be one of its elements.
    ctx.reply.error(`ERR CONFIG SET failed (possibly related to argument '${bindChanged ? 'bind' : 'port'}') - port and bind cannot be changed inside MULTI`);
    return;
  }
  if (server.rebinding) {
    ctx.reply.error(`ERR CONFIG SET failed (possibly related to argument '${bindChanged ? 'bind' : 'port'}') - another CONFIG SET of port or bind is in progress`);
    return;
  }
  server.rebinding = true;
  const release = ctx.client.hold();
  void server.rebind(scratch.get('bind'), scratch.int('port')).then((failure) => {
    server.rebinding = false;
    if (failure === null) {
      commit();
      config.set('port', String(server.port)); // port 0 picked one: CONFIG GET port tells which
    }
    release((reply) => {
      if (failure === null) reply.ok();
      // Redis's texts (its updatePort / updateBind); the reason is in the log.
      else if (bindChanged) reply.error("ERR CONFIG SET failed (possibly related to argument 'bind') - Failed to bind to specified addresses.");
      else reply.error("ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs.");
    });
  }, (e: unknown) => {
    server.rebinding = false;
    server.log.warning(`CONFIG SET port/bind failed: ${(e as Error).message}`);
    release((reply) => reply.error(`ERR CONFIG SET failed - ${(e as Error).message}`));
  });
}

/** The values a CONFIG SET scratch copy starts from (the listeners and the TLS context depend on them together). */
const SCRATCH_BASE = ['port', 'bind', 'tls-auth-clients', 'tls-cert-file', 'tls-key-file', 'tls-key-file-pass', 'tls-ca-cert-file', 'tls-handshake-timeout'];
const TLS_FILES = ['tls-cert-file', 'tls-key-file', 'tls-key-file-pass', 'tls-ca-cert-file'];

/** Options CONFIG SET refuses with a reason of their own. */
const IMMUTABLE_WHY: Record<string, string> = {
  dir: "can't set immutable config: the snapshot directory holds the server's lock file (.cellgate-lock) taken at start; change dir in the configuration and restart (docs/configuration.md)",
};

/** CONFIG REWRITE: the running values into the file the server started with (Config.rewrite). */
function configRewrite(ctx: CommandContext): void {
  try {
    ctx.server.config.rewrite();
  } catch (e) {
    ctx.server.log.warning(`CONFIG REWRITE failed: ${(e as Error).message}`);
    ctx.reply.error(`ERR ${(e as Error).message}`);
    return;
  }
  ctx.server.log.notice('CONFIG REWRITE executed with success.');
  ctx.reply.ok();
}

const CONFIG_HELP = [
  'CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'GET <pattern>',
  '    Return parameters matching the glob-like <pattern> and their values.',
  'SET <directive> <value>',
  '    Set the configuration <directive> to <value>.',
  'REWRITE',
  '    Rewrite the configuration file.',
  'RESETSTAT',
  '    Reset statistics reported by the INFO command.',
  'HELP',
  '    Prints this help.',
];

function time(ctx: CommandContext): void {
  ctx.reply.arrayHeader(2);
  ctx.reply.bulk(String(Math.floor(ctx.nowUs / 1e6)));
  ctx.reply.bulk(String(ctx.nowUs % 1e6));
}

/**
 * SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT], as Redis: saves the final snapshot (plain SHUTDOWN
 * only when save points are configured, SAVE always, NOSAVE never) and exits. If that save fails the
 * server keeps running and replies with an error, unless FORCE. NOW changes nothing (no replicas to wait
 * for); ABORT has no shutdown to abort.
 */
function shutdown(ctx: CommandContext, argv: CommandArgs): void {
  let save: SaveMode = 'default';
  let force = false;
  let abort = false;
  for (let i = 1; i < argv.length; i++) {
    const opt = argv.lower(i);
    if (opt === 'nosave' && save === 'default') save = 'nosave';
    else if (opt === 'save' && save === 'default') save = 'save';
    else if (opt === 'force') force = true;
    else if (opt === 'abort') abort = true;
    else if (opt !== 'now') {
      ctx.reply.error('ERR syntax error');
      return;
    }
  }
  if (abort) {
    ctx.reply.error(argv.length === 2 ? 'ERR No shutdown in progress.' : 'ERR syntax error');
    return;
  }
  if (!ctx.server.shutdown('SHUTDOWN command', { save, refuseIfSaveFails: !force })) {
    ctx.reply.error('ERR Errors trying to SHUTDOWN. Check logs.');
  }
}

const DEBUG_DISABLED =
  'ERR DEBUG command not allowed. If the enable-debug-command option is set to "local", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.';

const DEBUG_HELP = [
  'DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'CLOCK SET <unix-ms>',
  '    Freeze the server clock at <unix-ms> (decimals down to the microsecond; it may go backwards).',
  'CLOCK ADVANCE <ms>',
  '    Move the frozen clock forward by <ms> (decimals down to the microsecond).',
  'CLOCK REAL',
  '    Return to the real clock.',
  'GC',
  '    Run a full garbage collection (for memory measurements).',
  'JOURNAL-FSYNC-DELAY <ms>',
  '    Make each appendfsync everysec fsync wait <ms> before it starts, as a slow disk would (0: off).',
  'SLEEP <seconds>',
  '    Stop the server for <seconds> (decimals allowed).',
  'HELP',
  '    Prints this help.',
];

function debugAllowed(ctx: CommandContext): boolean {
  const mode = ctx.server.config.get('enable-debug-command');
  if (mode === 'yes') return true;
  // Local as Redis counts it: loopback, or the unix socket (whose clients' addr is its path).
  if (mode === 'local') return /^(127\.|::1:)/.test(ctx.client.addr) || ctx.client.addr.startsWith('::1') || ctx.client.addr.startsWith('/');
  return false;
}

function debug(ctx: CommandContext, argv: CommandArgs): void {
  const r = ctx.reply;
  if (!debugAllowed(ctx)) {
    r.error(DEBUG_DISABLED);
    return;
  }
  const sub = argv.lower(1);
  if (sub === 'help') return replyHelp(ctx, DEBUG_HELP);
  if (sub === 'gc' && argv.length === 2) {
    // A full collection, so memory measurements (bench/memory.mjs) see live data only.
    fullGc();
    r.ok();
    return;
  }
  if (sub === 'journal-fsync-delay' && argv.length === 3) {
    const ms = argv.redisInteger(2);
    if (ms === null || ms < 0 || ms > 3_600_000) {
      r.error('ERR value is not an integer or out of range');
      return;
    }
    ctx.server.journal.writer.debugFsyncDelayMs = ms;
    r.ok();
    return;
  }
  if (sub === 'sleep' && argv.length === 3) {
    const seconds = argv.redisDouble(2);
    if (seconds === null || seconds < 0 || seconds > 3600) {
      r.error('ERR value is not a valid float');
      return;
    }
    if (seconds > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, seconds * 1000);
    r.ok();
    return;
  }
  if (sub === 'clock' && argv.length >= 3) {
    const action = argv.lower(2);
    const clock = ctx.server.clock;
    if (action === 'real' && argv.length === 3) {
      clock.useReal();
      ctx.server.leaseWaiters.clockChanged();
      r.ok();
      return;
    }
    if ((action === 'set' || action === 'advance') && argv.length === 4) {
      const us = parseMillisToMicros(argv.str(3));
      if (us === null || us < 0) {
        r.error(`ERR invalid milliseconds '${argv.text(3)}': expected a non-negative number with at most 3 decimals`);
        return;
      }
      if (action === 'set') clock.freezeAt(us);
      else clock.advance(us);
      // Leases may have ended: waiting ACQUIREs try again.
      ctx.server.leaseWaiters.clockChanged();
      r.ok();
      return;
    }
  }
  r.error(`ERR unknown subcommand or wrong number of arguments for '${argv.text(1)}'. Try DEBUG HELP.`);
}

const sub = (name: string, arity: number, summary: string, run: CommandSpec['run'], args: CommandSpec['args'] = []): CommandSpec => ({
  name, arity, flags: ['admin', 'noscript', 'loading', 'stale'], ...noKeys(), group: 'server', since: '2.0.0', summary, args, run,
});

export const adminCommands: CommandSpec[] = [
  { name: 'config', arity: -2, flags: [], ...noKeys(), group: 'server', since: '2.0.0', summary: 'A container for server configuration commands.', args: [],
    subcommands: [
      sub('get', -3, 'Returns the effective values of configuration parameters.', configGet, [{ name: 'parameter', type: 'string', multiple: true }]),
      { ...sub('set', -4, 'Sets configuration parameters in-flight.', configSet, [{ name: 'data', type: 'block', multiple: true, arguments: [
        { name: 'parameter', type: 'string' }, { name: 'value', type: 'string' }] }]),
        // The value of a sensitive config (requirepass, ...), set or refused (Redis's configSetCommand).
        redacts: { sensitiveConfigValuesFrom: 2 } },
      sub('rewrite', 2, 'Persists the effective configuration to file.', configRewrite),
      sub('resetstat', 2, 'Resets the server\'s statistics.', (ctx) => { ctx.server.resetStats(); ctx.reply.ok(); }),
      { ...sub('help', 2, 'Returns helpful text about the different subcommands.', (ctx) => replyHelp(ctx, CONFIG_HELP)), flags: ['loading', 'stale'] },
    ] },
  { name: 'time', arity: 1, flags: ['loading', 'stale', 'fast'], ...noKeys(), group: 'server', since: '2.6.0', complexity: 'O(1)',
    summary: 'Returns the server time.', args: [], run: time },
  { name: 'shutdown', arity: -1, flags: ['admin', 'noscript', 'loading', 'stale', 'no-multi', 'allow-busy'], ...noKeys(), group: 'server', since: '1.0.0',
    complexity: 'O(N) when saving, where N is the total number of keys in all databases when saving data, otherwise O(1)',
    summary: 'Synchronously saves the database(s) to disk and shuts down the server.',
    args: [
      { name: 'save-selector', type: 'oneof', optional: true, arguments: [{ name: 'nosave', type: 'pure-token', token: 'NOSAVE' }, { name: 'save', type: 'pure-token', token: 'SAVE' }] },
      { name: 'now', type: 'pure-token', token: 'NOW', optional: true },
      { name: 'force', type: 'pure-token', token: 'FORCE', optional: true },
      { name: 'abort', type: 'pure-token', token: 'ABORT', optional: true },
    ],
    run: shutdown },
  { name: 'debug', arity: -2, flags: ['admin', 'noscript', 'loading', 'stale'], ...noKeys(), group: 'server', since: '1.0.0',
    summary: 'Debugging helpers: CLOCK SET/ADVANCE/REAL and SLEEP (needs enable-debug-command).',
    args: [{ name: 'subcommand', type: 'string' }, { name: 'args', type: 'string', optional: true, multiple: true }], run: debug },
];
