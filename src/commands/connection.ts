/**
 * Connection commands, as Redis 7: PING, ECHO, QUIT, RESET, HELLO, AUTH, SELECT, CLIENT.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { REDIS_VERSION } from '../version.js';
import type { Client } from '../server/client.js';
import type { User } from '../acl/users.js';
import { lower, str } from './args.js';
import { parseRedisInteger } from '../protocol/numbers.js';
import { loggedField } from '../log-text.js';
import { replyHelp } from './help.js';
import { noKeys, type CommandContext, type CommandSpec } from './types.js';

const WRONGPASS = 'WRONGPASS invalid username-password pair or user is disabled.';
const DEFAULT_USER = Buffer.from('default');

/**
 * Authenticates `client` as `user` (Redis's checkPasswordBasedAuth): the user must exist, be on and
 * have `pass` among its passwords, compared as SHA-256 digests in constant time (src/acl/users.ts),
 * as bytes. A failure is counted and logged in the ACL log; the client keeps its user and its
 * pre-auth limits.
 */
function authenticate(ctx: CommandContext, user: Buffer, pass: Buffer): boolean {
  const acl = ctx.server.acl;
  const name = user.toString('latin1');
  const u = acl.authenticate(name, pass);
  if (u === null) {
    ctx.server.stats.authFailures++;
    acl.addLog('auth', 'toplevel', 'auth', name, clientInfoLine(ctx.client, Date.now(), true), Date.now());
    ctx.reply.error(WRONGPASS);
    return false;
  }
  ctx.client.user = u;
  ctx.client.authenticated = true;
  return true;
}

function ping(ctx: CommandContext, argv: CommandArgs): void {
  if (argv.length === 2) {
    ctx.reply.bulk(argv.buffer(1));
  } else {
    ctx.reply.status('PONG');
  }
}

function auth(ctx: CommandContext, argv: CommandArgs): void {
  if (argv.length > 3) {
    ctx.reply.error('ERR syntax error');
    return;
  }
  const user = argv.length === 3 ? argv.buffer(1) : DEFAULT_USER;
  const pass = argv.buffer(argv.length - 1);
  if (argv.length === 2 && ctx.server.acl.defaultUser.nopass) {
    ctx.reply.error('ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?');
    return;
  }
  if (authenticate(ctx, user, pass)) ctx.reply.ok();
}

/** HELLO [protover [AUTH username password] [SETNAME clientname]] */
function hello(ctx: CommandContext, argv: CommandArgs): void {
  const r = ctx.reply;
  const client = ctx.client;
  let proto = client.proto;
  if (argv.length >= 2) {
    const ver = argv.redisInteger(1);
    if (ver === null) {
      r.error('ERR Protocol version is not an integer or out of range');
      return;
    }
    if (ver < 2 || ver > 3) {
      r.error('NOPROTO unsupported protocol version');
      return;
    }
    proto = ver as 2 | 3;
  }
  let authUser: Buffer | null = null;
  let authPass: Buffer | null = null;
  let setName: string | null = null;
  for (let i = 2; i < argv.length; i++) {
    const opt = argv.lower(i);
    const left = argv.length - i - 1;
    if (opt === 'auth' && left >= 2) {
      authUser = argv.buffer(i + 1);
      authPass = argv.buffer(i + 2);
      i += 2;
    } else if (opt === 'setname' && left >= 1) {
      if (argv.byteLength(i + 1) > CLIENT_FIELD_MAX_BYTES) {
        r.error(NAME_TOO_LONG);
        return;
      }
      setName = argv.str(i + 1);
      if (!validName(setName)) {
        r.error('ERR Client names cannot contain spaces, newlines or special characters.');
        return;
      }
      i += 1;
    } else {
      r.error(`ERR Syntax error in HELLO option '${argv.str(i)}'`);
      return;
    }
  }
  if (authUser !== null && authPass !== null) {
    if (!authenticate(ctx, authUser, authPass)) return;
  }
  if (!client.authenticated) {
    r.error('NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time');
    return;
  }
  if (setName !== null) {
    client.name = setName;
    client.accountFields();
  }
  client.proto = proto;
  r.proto = proto;
  r.mapHeader(7);
  r.bulk('server');
  r.bulk('cellgate');
  r.bulk('version');
  r.bulk(REDIS_VERSION);
  r.bulk('proto');
  r.integer(proto);
  r.bulk('id');
  r.integer(client.id);
  r.bulk('mode');
  r.bulk('standalone');
  r.bulk('role');
  r.bulk('master');
  r.bulk('modules');
  r.arrayHeader(0);
}

function reset(ctx: CommandContext): void {
  const c = ctx.client;
  c.proto = 2;
  ctx.reply.proto = 2;
  c.name = '';
  c.accountFields();
  c.noEvict = false;
  c.user = ctx.server.acl.defaultUser;
  c.authenticated = !ctx.server.authRequired;
  c.discardTransaction(); // leaves MULTI and unwatches, as Redis's RESET
  ctx.reply.status('RESET');
}

function select(ctx: CommandContext, argv: CommandArgs): void {
  const db = argv.redisInteger(1);
  if (db === null) ctx.reply.error('ERR value is not an integer or out of range');
  else if (db !== 0) ctx.reply.error('ERR DB index is out of range');
  else ctx.reply.ok();
}

/**
 * The longest client name, lib-name or lib-ver. Redis has no cap of its own (it counts them in the
 * client's memory); here a name is also copied into every CLIENT LIST line and log line that names
 * the client, and the account alone would let a 200 MB name live under maxmemory-clients. No client
 * library sends more than a few dozen bytes.
 */
export const CLIENT_FIELD_MAX_BYTES = 4096;
const NAME_TOO_LONG = `ERR Client names cannot be longer than ${CLIENT_FIELD_MAX_BYTES} bytes.`;

/** Client names and library info: printable ASCII without spaces, as Redis requires. */
function validName(name: string): boolean {
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c < 33 || c > 126) return false;
  }
  return true;
}

/**
 * One CLIENT LIST line with Redis 7's fields (memory fields are this server's approximations).
 * `forLog`: the line is kept (ACL LOG's client-info), so the fields a client sets (name, lib-name,
 * lib-ver) are cut to LOGGED_TEXT_BYTES, as is the user name.
 */
export function clientInfoLine(client: Client, nowMs: number, forLog = false): string {
  const field = forLog ? loggedField : same;
  const qbuf = client.parser.pendingBytes;
  client.accountBuffers(); // the running command's own bytes are not in it: the same figures in CLIENT INFO and LIST
  const mem = client.memory;
  const fd = (client.socket as unknown as { _handle?: { fd?: number } })._handle?.fd ?? -1;
  return [
    `id=${client.id}`, `addr=${client.addr}`, `laddr=${client.laddr}`, `fd=${fd}`, `name=${field(client.name)}`,
    `age=${Math.floor((nowMs - client.createdMs) / 1000)}`, `idle=${Math.floor((nowMs - client.lastInteractionMs) / 1000)}`,
    `flags=${clientFlags(client)}`, 'db=0', 'sub=0', 'psub=0', 'ssub=0', `multi=${client.multi === null ? -1 : client.multi.commands.length}`,
    `watch=${client.watching === null ? 0 : client.watching.keys.length}`, `qbuf=${qbuf}`, 'qbuf-free=0',
    `argv-mem=${client.parser.argvBytes}`, `multi-mem=${mem.multi}`, 'rbs=0', 'rbp=0', 'obl=0', 'oll=0', `omem=${client.outputBytes}`,
    `tot-mem=${mem.released ? 0 : mem.total}`, `events=${client.readPaused ? '' : 'r'}${client.outputBytes > 0 ? 'w' : ''}`, `cmd=${client.lastCommand}`, `user=${field(client.user.name)}`, 'redir=-1',
    `resp=${client.proto}`, `lib-name=${field(client.libName)}`, `lib-ver=${field(client.libVer)}`,
  ].join(' ');
}

function same(value: string): string {
  return value;
}

/** CLIENT LIST flags in Redis's order: x in MULTI, d a WATCHed key changed, e no-evict; N for none. */
function clientFlags(client: Client): string {
  const flags = (client.multi !== null ? 'x' : '') + (client.watching?.dirty === true ? 'd' : '') + (client.noEvict ? 'e' : '') + (client.blocked ? 'b' : '');
  return flags === '' ? 'N' : flags;
}

const CLIENT_HELP = [
  'CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'GETNAME',
  '    Return the name of the current connection.',
  'ID',
  '    Return the ID of the current connection.',
  'INFO',
  '    Return information about the current client connection.',
  'KILL <ip:port>',
  '    Kill connection made from <ip:port>.',
  'KILL <option> <value> [<option> <value> [...]]',
  '    Kill connections. Options are:',
  '    * ADDR (<ip:port>|<unixsocket>:0)',
  '      Kill connections made from the specified address',
  '    * LADDR (<ip:port>|<unixsocket>:0)',
  '      Kill connections made to specified local address',
  '    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)',
  '      Kill connections by type.',
  '    * USER <username>',
  '      Kill connections authenticated by <username>.',
  '    * SKIPME (YES|NO)',
  '      Skip killing current connection (default: yes).',
  '    * ID <client-id>',
  '      Kill connections by client id.',
  '    * MAXAGE <maxage>',
  '      Kill connections older than the specified age.',
  'LIST [TYPE normal] [ID id [id ...]]',
  '    Return information about client connections.',
  'NO-EVICT (ON|OFF)',
  '    Protect current client connection from eviction.',
  'SETINFO <LIB-NAME|LIB-VER> <value>',
  '    Set client library name or version.',
  'SETNAME <name>',
  '    Assign the name <name> to the current connection.',
  'UNBLOCK <clientid> [TIMEOUT|ERROR]',
  '    Unblock the specified blocked client.',
  'HELP',
  '    Prints this help.',
];

function clientList(ctx: CommandContext, argv: CommandArgs): void {
  let ids: Set<number> | null = null;
  for (let i = 2; i < argv.length; i++) {
    const opt = argv.lower(i);
    if (opt === 'type' && i + 1 < argv.length) {
      const t = argv.lower(++i);
      if (!['normal', 'master', 'replica', 'pubsub'].includes(t)) {
        ctx.reply.error(`ERR Unknown client type '${argv.text(i)}'`);
        return;
      }
      if (t !== 'normal') ids = new Set();
    } else if (opt === 'id' && i + 1 < argv.length) {
      ids = new Set();
      for (i++; i < argv.length; i++) {
        // Any integer, as Redis 7: an ID no client has (0, −1) just lists nothing.
        const id = argv.redisInteger(i);
        if (id === null) {
          ctx.reply.error('ERR Invalid client ID');
          return;
        }
        ids.add(id);
      }
    } else {
      ctx.reply.error('ERR syntax error');
      return;
    }
  }
  let out = '';
  for (const c of ctx.server.clients.values()) {
    if (ids === null || ids.has(c.id)) out += clientInfoLine(c, Date.now()) + '\n';
  }
  ctx.reply.verbatim(out);
}

/** Ends `target` for CLIENT KILL: the caller itself after this reply, any other client at once. */
function killClient(ctx: CommandContext, target: Client): void {
  if (target === ctx.client) ctx.client.closing = true;
  else target.kill();
}

/**
 * CLIENT KILL ip:port (the old form: +OK or "No such client") and CLIENT KILL <filter> <value> ...
 * (ID, ADDR, LADDR, TYPE, USER, SKIPME, MAXAGE: all given filters must match; replies the number
 * killed; SKIPME yes, the default, spares the caller), as Redis 7.
 */
/**
 * CLIENT UNBLOCK client-id [TIMEOUT|ERROR], as Redis's: ends the wait of a client blocked in
 * RL.ACQUIRE ... WAIT as its timeout would (the limited reply), or with -UNBLOCKED. 1 when it waited.
 */
function clientUnblock(ctx: CommandContext, argv: CommandArgs): void {
  const id = argv.redisInteger(2);
  if (id === null) {
    ctx.reply.error('ERR value is not an integer or out of range');
    return;
  }
  let error = false;
  if (argv.length === 4) {
    const how = argv.lower(3);
    if (how === 'error') error = true;
    else if (how !== 'timeout') {
      ctx.reply.error('ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR');
      return;
    }
  }
  const target = ctx.server.clients.get(id);
  ctx.reply.integer(target !== undefined && ctx.server.leaseWaiters.unblock(target, error) ? 1 : 0);
}

function clientKill(ctx: CommandContext, argv: CommandArgs): void {
  const clients = ctx.server.clients;
  if (argv.length === 3) {
    const addr = argv.str(2);
    for (const c of clients.values()) {
      if (c.addr === addr) {
        killClient(ctx, c);
        ctx.reply.ok();
        return;
      }
    }
    ctx.reply.error('ERR No such client');
    return;
  }
  let id: number | null = null;
  let addr: string | null = null;
  let laddr: string | null = null;
  let normalType = true;
  let skipMe = true;
  let maxAgeSec: number | null = null;
  let user: User | null = null;
  for (let i = 2; i < argv.length; i += 2) {
    const opt = argv.lower(i);
    if (i + 1 >= argv.length) {
      ctx.reply.error('ERR syntax error');
      return;
    }
    const value = argv.buffer(i + 1);
    if (opt === 'id') {
      id = parseRedisInteger(value);
      if (id === null || id < 1) {
        ctx.reply.error('ERR client-id should be greater than 0');
        return;
      }
    } else if (opt === 'type') {
      const t = lower(value);
      if (!['normal', 'master', 'slave', 'replica', 'pubsub'].includes(t)) {
        ctx.reply.error(`ERR Unknown client type '${str(value)}'`);
        return;
      }
      normalType = t === 'normal';
    } else if (opt === 'addr') {
      addr = str(value);
    } else if (opt === 'laddr') {
      laddr = str(value);
    } else if (opt === 'user') {
      user = ctx.server.acl.users.get(value.toString('latin1')) ?? null;
      if (user === null) {
        ctx.reply.error(`ERR No such user '${str(value)}'`);
        return;
      }
    } else if (opt === 'skipme') {
      const v = lower(value);
      if (v !== 'yes' && v !== 'no') {
        ctx.reply.error('ERR syntax error');
        return;
      }
      skipMe = v === 'yes';
    } else if (opt === 'maxage') {
      maxAgeSec = parseRedisInteger(value);
      if (maxAgeSec === null) {
        ctx.reply.error('ERR maxage is not an integer or out of range');
        return;
      }
      if (maxAgeSec <= 0) {
        ctx.reply.error('ERR maxage should be greater than 0');
        return;
      }
    } else {
      ctx.reply.error('ERR syntax error');
      return;
    }
  }
  const now = Date.now();
  let killed = 0;
  for (const c of [...clients.values()]) {
    if (!normalType) break;
    if (id !== null && c.id !== id) continue;
    if (addr !== null && c.addr !== addr) continue;
    if (laddr !== null && c.laddr !== laddr) continue;
    if (user !== null && c.user !== user) continue;
    if (maxAgeSec !== null && (now - c.createdMs) / 1000 <= maxAgeSec) continue;
    if (skipMe && c === ctx.client) continue;
    killClient(ctx, c);
    killed++;
  }
  ctx.reply.integer(killed);
}

function clientSetInfo(ctx: CommandContext, argv: CommandArgs): void {
  const attr = argv.lower(2);
  if (attr !== 'lib-name' && attr !== 'lib-ver') {
    ctx.reply.error(`ERR Unrecognized option '${argv.text(2)}'`);
    return;
  }
  if (argv.byteLength(3) > CLIENT_FIELD_MAX_BYTES) {
    ctx.reply.error(`ERR ${attr} cannot be longer than ${CLIENT_FIELD_MAX_BYTES} bytes.`);
    return;
  }
  const value = argv.str(3);
  if (value !== '' && !validName(value)) {
    ctx.reply.error(`ERR ${attr} cannot contain spaces, newlines or special characters.`);
    return;
  }
  if (attr === 'lib-name') ctx.client.libName = value;
  else ctx.client.libVer = value;
  ctx.client.accountFields();
  ctx.reply.ok();
}

const sub = (name: string, arity: number, summary: string, run: CommandSpec['run'], args: CommandSpec['args'] = []): CommandSpec => ({
  name, arity, flags: ['noscript', 'loading', 'stale'], ...noKeys(), group: 'connection', since: '2.4.0', summary, args, run,
});

export const connectionCommands: CommandSpec[] = [
  { name: 'ping', arity: -1, maxArity: 2, flags: ['fast'], dispatch: ['health-check'], ...noKeys(), group: 'connection', since: '1.0.0', complexity: 'O(1)',
    summary: 'Returns the server\'s liveliness response.', args: [{ name: 'message', type: 'string', optional: true }], run: ping },
  { name: 'echo', arity: 2, flags: ['fast', 'loading', 'stale'], ...noKeys(), group: 'connection', since: '1.0.0', complexity: 'O(1)',
    summary: 'Returns the given string.', args: [{ name: 'message', type: 'string' }], run: (ctx, argv) => ctx.reply.bulk(argv.buffer(1)) },
  { name: 'quit', arity: -1, flags: ['no-auth', 'noscript', 'fast', 'allow-busy', 'loading', 'stale'], dispatch: ['runs-in-multi', 'leaves-multi'], ...noKeys(), group: 'connection', since: '1.0.0', complexity: 'O(1)',
    summary: 'Closes the connection.', args: [],
    run: (ctx) => { ctx.reply.ok(); ctx.client.closing = true; } },
  { name: 'reset', arity: 1, flags: ['no-auth', 'fast', 'noscript', 'loading', 'stale'], dispatch: ['runs-in-multi', 'leaves-multi'], ...noKeys(), group: 'connection', since: '6.2.0', complexity: 'O(1)',
    summary: 'Resets the connection.', args: [], run: reset },
  { name: 'hello', arity: -1, flags: ['no-auth', 'fast', 'noscript', 'loading', 'stale'], ...noKeys(), group: 'connection', since: '6.0.0', complexity: 'O(1)',
    summary: 'Handshakes with the server.',
    args: [{ name: 'arguments', type: 'block', optional: true, arguments: [
      { name: 'protover', type: 'integer' },
      { name: 'auth', type: 'block', token: 'AUTH', optional: true, arguments: [{ name: 'username', type: 'string' }, { name: 'password', type: 'string' }] },
      { name: 'clientname', type: 'string', token: 'SETNAME', optional: true },
    ] }],
    run: hello,
    // HELLO's AUTH username and password, found as hello() parses its options.
    redacts: { first: 2, options: { auth: 2, setname: 1 }, secret: 'auth' } },
  { name: 'auth', arity: -2, flags: ['no-auth', 'fast', 'noscript', 'loading', 'stale'], ...noKeys(), group: 'connection', since: '1.0.0', complexity: 'O(N) where N is the number of passwords defined for the user',
    summary: 'Authenticates the connection.', args: [{ name: 'username', type: 'string', optional: true }, { name: 'password', type: 'string' }], run: auth,
    redacts: { from: 1 } },
  { name: 'select', arity: 2, flags: ['fast', 'loading', 'stale'], ...noKeys(), group: 'connection', since: '1.0.0', complexity: 'O(1)',
    summary: 'Changes the selected database (only 0 exists).', args: [{ name: 'index', type: 'integer' }], run: select },
  { name: 'client', arity: -2, flags: [], ...noKeys(), group: 'connection', since: '2.4.0', summary: 'A container for client connection commands.', args: [],
    subcommands: [
      sub('id', 2, 'Returns the unique client ID of the connection.', (ctx) => ctx.reply.integer(ctx.client.id)),
      sub('getname', 2, 'Returns the name of the connection.', (ctx) => (ctx.client.name === '' ? ctx.reply.nullBulk() : ctx.reply.bulk(ctx.client.name))),
      sub('setname', 3, 'Sets the connection name.', (ctx, argv) => {
        if (argv.byteLength(2) > CLIENT_FIELD_MAX_BYTES) {
          ctx.reply.error(NAME_TOO_LONG);
          return;
        }
        const name = argv.str(2);
        if (!validName(name) && name !== '') {
          ctx.reply.error('ERR Client names cannot contain spaces, newlines or special characters.');
          return;
        }
        ctx.client.name = name;
        ctx.client.accountFields();
        ctx.reply.ok();
      }, [{ name: 'connection-name', type: 'string' }]),
      sub('setinfo', 4, 'Sets information specific to the client or connection.', clientSetInfo, [{ name: 'attr', type: 'oneof', arguments: [
        { name: 'libname', type: 'string', token: 'LIB-NAME' }, { name: 'libver', type: 'string', token: 'LIB-VER' }] }]),
      sub('info', 2, 'Returns information about the connection.', (ctx) => ctx.reply.verbatim(clientInfoLine(ctx.client, Date.now()) + '\n')),
      { ...sub('kill', -3, 'Terminates open connections.', clientKill, [
        { name: 'filter', type: 'oneof', arguments: [
          { name: 'old-format', type: 'string' },
          { name: 'new-format', type: 'oneof', multiple: true, arguments: [
            { name: 'client-id', type: 'integer', token: 'ID', optional: true },
            { name: 'client-type', type: 'string', token: 'TYPE', optional: true },
            { name: 'username', type: 'string', token: 'USER', optional: true },
            { name: 'addr', type: 'string', token: 'ADDR', optional: true },
            { name: 'laddr', type: 'string', token: 'LADDR', optional: true },
            { name: 'skipme', type: 'string', token: 'SKIPME', optional: true },
            { name: 'maxage', type: 'integer', token: 'MAXAGE', optional: true },
          ] },
        ] },
      ]), flags: ['admin', 'noscript', 'loading', 'stale'] },
      { ...sub('unblock', -3, 'Unblocks a client blocked by a blocking command (RL.ACQUIRE ... WAIT) from a different connection.', clientUnblock, [
        { name: 'client-id', type: 'integer' },
        { name: 'unblock-type', type: 'oneof', optional: true, arguments: [
          { name: 'timeout', type: 'pure-token', token: 'TIMEOUT' }, { name: 'error', type: 'pure-token', token: 'ERROR' }] },
      ]), maxArity: 4, flags: ['admin', 'noscript', 'loading', 'stale'] },
      // Every client's name, address and last command: @admin and @dangerous, as Redis's CLIENT LIST.
      { ...sub('list', -2, 'Lists open connections.', clientList, [
        { name: 'client-type', type: 'string', token: 'TYPE', optional: true },
        { name: 'client-id', type: 'integer', token: 'ID', optional: true, multiple: true },
      ]), flags: ['admin', 'noscript', 'loading', 'stale'] },
      { ...sub('no-evict', 3, 'Sets the client eviction mode of the connection.', (ctx, argv) => {
        const v = argv.lower(2);
        if (v !== 'on' && v !== 'off') {
          ctx.reply.error('ERR syntax error');
          return;
        }
        ctx.client.noEvict = v === 'on';
        ctx.reply.ok();
      }, [{ name: 'enabled', type: 'oneof', arguments: [{ name: 'on', type: 'pure-token', token: 'ON' }, { name: 'off', type: 'pure-token', token: 'OFF' }] }]),
      flags: ['admin', 'noscript', 'loading', 'stale'] },
      { ...sub('help', 2, 'Returns helpful text about the different subcommands.', (ctx) => replyHelp(ctx, CLIENT_HELP)), flags: ['loading', 'stale'] },
    ] },
];
