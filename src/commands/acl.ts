/**
 * ACL users, as Redis 7.2: ACL SETUSER/GETUSER/DELUSER/LIST/USERS/WHOAMI/CAT/LOG/SAVE/LOAD/DRYRUN/
 * GENPASS/HELP. The users and their rules live in src/acl/users.ts; docs/security.md "ACL users" shows
 * an application user that can only call the limiters.
 */
import { randomBytes } from 'node:crypto';
import type { CommandArgs } from '../protocol/command-args.js';
import { CATEGORIES } from '../acl/categories.js';
import { readAclFile } from '../acl/file.js';
import { ACL_DENIED_CMD, ACL_OK, AclRuleError, aclCheck, deniedKeyIndex, validUserName, type User } from '../acl/users.js';
import type { Client } from '../server/client.js';
import { clientInfoLine } from './connection.js';
import { replyHelp } from './help.js';
import { arityAllows, noKeys, type CommandContext, type CommandSpec } from './types.js';

const NO_ACL_FILE =
  'ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command ' +
  'and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.';

function setUser(ctx: CommandContext, argv: CommandArgs): void {
  const name = argv.buffer(2).toString('latin1');
  if (!validUserName(name)) {
    ctx.reply.error("ERR Usernames can't contain spaces or null characters");
    return;
  }
  const rules: string[] = [];
  for (let i = 3; i < argv.length; i++) rules.push(argv.buffer(i).toString('latin1'));
  const acl = ctx.server.acl;
  let user: User;
  try {
    user = acl.setUser(name, rules).user;
  } catch (e) {
    if (!(e instanceof AclRuleError)) throw e;
    ctx.reply.error(`ERR ${e.message}`);
    return;
  }
  ctx.reply.ok();
  if (!user.enabled) ctx.server.disconnectUsers(new Set([user]), ctx.client);
}

function getUser(ctx: CommandContext, argv: CommandArgs): void {
  const r = ctx.reply;
  const u = ctx.server.acl.users.get(argv.buffer(2).toString('latin1'));
  if (u === undefined) {
    r.nullBulk();
    return;
  }
  r.mapHeader(6);
  r.bulk('flags');
  const flags = [u.enabled ? 'on' : 'off', ...(u.nopass ? ['nopass'] : [])];
  r.arrayHeader(flags.length);
  for (const f of flags) r.bulk(f);
  r.bulk('passwords');
  r.arrayHeader(u.passwords.length);
  for (const p of u.passwords) r.bulk(p);
  r.bulk('commands');
  r.bulk(u.commandRules());
  r.bulk('keys');
  r.bulk(Buffer.from(u.keyRules().join(' '), 'latin1'));
  r.bulk('channels');
  r.bulk(Buffer.from(u.allChannels ? '&*' : [...u.channels].map((c) => '&' + c).join(' '), 'latin1'));
  r.bulk('selectors');
  r.arrayHeader(0);
}

function delUser(ctx: CommandContext, argv: CommandArgs): void {
  const acl = ctx.server.acl;
  const names: string[] = [];
  for (let i = 2; i < argv.length; i++) {
    const name = argv.buffer(i).toString('latin1');
    if (name === 'default') {
      ctx.reply.error("ERR The 'default' user cannot be removed");
      return;
    }
    names.push(name);
  }
  const gone = new Set<User>();
  for (const name of names) {
    const u = acl.users.get(name);
    if (u === undefined) continue;
    acl.users.delete(name);
    gone.add(u);
  }
  ctx.reply.integer(gone.size);
  ctx.server.disconnectUsers(gone, ctx.client);
}

function sortedUsers(ctx: CommandContext): User[] {
  return ctx.server.acl.sortedUsers();
}

function list(ctx: CommandContext): void {
  const users = sortedUsers(ctx);
  ctx.reply.arrayHeader(users.length);
  for (const u of users) ctx.reply.bulk(Buffer.from(`user ${u.name} ${u.describe()}`, 'latin1'));
}

function users(ctx: CommandContext): void {
  const all = sortedUsers(ctx);
  ctx.reply.arrayHeader(all.length);
  for (const u of all) ctx.reply.bulk(Buffer.from(u.name, 'latin1'));
}

function cat(ctx: CommandContext, argv: CommandArgs): void {
  if (argv.length === 2) {
    ctx.reply.arrayHeader(CATEGORIES.length);
    for (const c of CATEGORIES) ctx.reply.bulk(c);
    return;
  }
  const name = argv.lower(2);
  const specs = ctx.server.acl.categoryCommands(name);
  if (specs === undefined) {
    ctx.reply.error(`ERR Unknown category '${argv.text(2)}'`);
    return;
  }
  ctx.reply.arrayHeader(specs.length);
  for (const s of specs) ctx.reply.bulk(s.fullName ?? s.name);
}

function log(ctx: CommandContext, argv: CommandArgs): void {
  const acl = ctx.server.acl;
  let count = acl.log.length;
  if (argv.length === 3) {
    if (argv.lower(2) === 'reset') {
      acl.log = [];
      ctx.reply.ok();
      return;
    }
    const n = argv.redisInteger(2);
    if (n === null) {
      ctx.reply.error('ERR value is not an integer or out of range');
      return;
    }
    count = Math.max(0, Math.min(n, count));
  }
  const r = ctx.reply;
  const now = Date.now();
  r.arrayHeader(count);
  for (let i = 0; i < count; i++) {
    const e = acl.log[i];
    r.mapHeader(10);
    r.bulk('count');
    r.integer(e.count);
    r.bulk('reason');
    r.bulk(e.reason);
    r.bulk('context');
    r.bulk(e.context);
    r.bulk('object');
    r.bulk(Buffer.from(e.object, 'latin1'));
    r.bulk('username');
    r.bulk(Buffer.from(e.username, 'latin1'));
    r.bulk('age-seconds');
    r.double((now - e.updatedMs) / 1000);
    r.bulk('client-info');
    r.bulk(e.clientInfo);
    r.bulk('entry-id');
    r.integer(e.entryId);
    r.bulk('timestamp-created');
    r.integer(e.createdMs);
    r.bulk('timestamp-last-updated');
    r.integer(e.updatedMs);
  }
}

function save(ctx: CommandContext): void {
  const path = ctx.server.config.get('aclfile');
  if (path === '') {
    ctx.reply.error(NO_ACL_FILE);
    return;
  }
  try {
    ctx.server.acl.save(path);
  } catch (e) {
    ctx.server.log.warning(`Error saving ACLs: ${(e as Error).message}`);
    ctx.reply.error('ERR There was an error trying to save the ACLs. Please check the server logs for more information');
    return;
  }
  ctx.reply.ok();
}

function load(ctx: CommandContext): void {
  const server = ctx.server;
  const path = server.config.get('aclfile');
  if (path === '') {
    ctx.reply.error(NO_ACL_FILE);
    return;
  }
  const client = ctx.client;
  if (client.multi !== null) {
    // Inside EXEC the reply is an element of the array written now: the file is read here, a
    // regular file of bounded size (a FIFO or a device is refused at once, never waited on).
    try {
      server.loadAclFile(path, client);
    } catch (e) {
      if (!(e instanceof AclRuleError)) throw e;
      ctx.reply.error(`ERR ${e.message}`);
      return;
    }
    ctx.reply.ok();
    return;
  }
  // Off the event loop: this client's reply (and its later commands) wait for the read; others are
  // served meanwhile, whatever the disk does.
  const release = client.hold();
  void readAclFile(path).then((text) => {
    release((reply) => {
      try {
        server.loadAclText(path, text, client);
      } catch (e) {
        // Outside the dispatcher's guard (a later turn): any failure is this command's error.
        reply.error(`ERR ${(e as Error).message}`);
        return;
      }
      reply.ok();
    });
  }, (e: unknown) => release((reply) => reply.error(`ERR ${e instanceof AclRuleError ? e.message : (e as Error).message}`)));
}

function dryRun(ctx: CommandContext, argv: CommandArgs): void {
  const r = ctx.reply;
  const u = ctx.server.acl.users.get(argv.buffer(2).toString('latin1'));
  if (u === undefined) {
    r.error(`ERR User '${argv.text(2)}' not found`);
    return;
  }
  let spec: CommandSpec | undefined = ctx.commands.lookupCommand(argv.lower(3));
  if (spec === undefined) {
    r.error(`ERR Command '${argv.text(3)}' not found`);
    return;
  }
  if (spec.subcommands !== undefined && argv.length >= 5) spec = ctx.commands.lookupSubcommand(spec, argv.lower(4)) ?? spec;
  const fullName = spec.fullName ?? spec.name;
  const argc = argv.length - 3;
  if (!arityAllows(spec, argc) || spec.run === undefined) {
    r.error(`ERR wrong number of arguments for '${fullName}' command`);
    return;
  }
  const result = u.unrestricted ? ACL_OK : aclCheck(u, spec, argv, 3);
  if (result === ACL_OK) r.ok();
  else if (result === ACL_DENIED_CMD) r.bulk(`User ${u.name} has no permissions to run the '${fullName}' command`);
  else r.bulk(Buffer.concat([Buffer.from("No permissions to access the '"), argv.buffer(deniedKeyIndex), Buffer.from("' key")]));
}

function genPass(ctx: CommandContext, argv: CommandArgs): void {
  let bits = 256;
  if (argv.length === 3) {
    const n = argv.redisInteger(2);
    if (n === null || n <= 0 || n > 4096) {
      ctx.reply.error('ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096');
      return;
    }
    bits = n;
  }
  const chars = Math.ceil(bits / 4);
  ctx.reply.bulk(randomBytes(Math.ceil(chars / 2)).toString('hex').slice(0, chars));
}

const ACL_HELP = [
  'ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:',
  'CAT [<category>]',
  '    List all commands that belong to <category>, or all command categories',
  '    when no category is specified.',
  'DELUSER <username> [<username> ...]',
  '    Delete a list of users.',
  'DRYRUN <username> <command> [<arg> ...]',
  '    Returns whether the user can execute the given command without executing the command.',
  'GETUSER <username>',
  "    Get the user's details.",
  'GENPASS [<bits>]',
  '    Generate a secure 256-bit user password. The optional `bits` argument can',
  '    be used to specify a different size.',
  'LIST',
  '    Show users details in config file format.',
  'LOAD',
  '    Reload users from the ACL file.',
  'LOG [<count> | RESET]',
  '    Show the ACL log entries.',
  'SAVE',
  '    Save the current config to the ACL file.',
  'SETUSER <username> <attribute> [<attribute> ...]',
  '    Create or modify a user with the specified attributes.',
  'USERS',
  '    List all the registered usernames.',
  'WHOAMI',
  '    Return the current connection username.',
  'HELP',
  '    Prints this help.',
];

const ADMIN: CommandSpec['flags'] = ['admin', 'noscript', 'loading', 'stale'];
const PLAIN: CommandSpec['flags'] = ['noscript', 'loading', 'stale'];

const sub = (name: string, arity: number, flags: CommandSpec['flags'], summary: string, run: CommandSpec['run'], args: CommandSpec['args'] = []): CommandSpec => ({
  name, arity, flags, ...noKeys(), group: 'server', since: '6.0.0', summary, args, run,
});

export const aclCommands: CommandSpec[] = [
  { name: 'acl', arity: -2, flags: [], ...noKeys(), group: 'server', since: '6.0.0', summary: 'A container for Access List Control commands.', args: [],
    subcommands: [
      sub('cat', -2, PLAIN, 'Lists the ACL categories, or the commands inside a category.', cat, [{ name: 'category', type: 'string', optional: true }]),
      { ...sub('deluser', -3, ADMIN, 'Deletes ACL users, and terminates their connections.', delUser, [{ name: 'username', type: 'string', multiple: true }]), redacts: { from: 2 } },
      { ...sub('dryrun', -4, ADMIN, 'Simulates the execution of a command by a user, without executing the command.', dryRun, [
        { name: 'username', type: 'string' }, { name: 'command', type: 'string' }, { name: 'arg', type: 'string', optional: true, multiple: true }]), since: '7.0.0' },
      sub('genpass', -2, PLAIN, 'Generates a pseudorandom, secure password that can be used to identify ACL users.', genPass, [{ name: 'bits', type: 'integer', optional: true }]),
      { ...sub('getuser', 3, ADMIN, 'Lists the ACL rules of a user.', getUser, [{ name: 'username', type: 'string' }]), redacts: { from: 2 } },
      sub('list', 2, ADMIN, 'Dumps the effective rules in ACL file format.', list),
      sub('load', 2, ADMIN, 'Reloads the rules from the configured ACL file.', load),
      sub('log', -2, ADMIN, 'Lists recent security events generated due to ACL rules.', log, [{ name: 'operation', type: 'oneof', optional: true, arguments: [
        { name: 'count', type: 'integer' }, { name: 'reset', type: 'pure-token', token: 'RESET' }] }]),
      sub('save', 2, ADMIN, 'Saves the effective ACL rules in the configured ACL file.', save),
      { ...sub('setuser', -3, ADMIN, 'Creates and modifies an ACL user and its rules.', setUser, [
        { name: 'username', type: 'string' }, { name: 'rule', type: 'string', optional: true, multiple: true }]), redacts: { from: 2 } },
      sub('users', 2, ADMIN, 'Lists all ACL users.', users),
      sub('whoami', 2, PLAIN, 'Returns the authenticated username of the current connection.', (ctx) => ctx.reply.bulk(Buffer.from(ctx.client.user.name, 'latin1'))),
      sub('help', 2, ['loading', 'stale'], 'Returns helpful text about the different subcommands.', (ctx) => replyHelp(ctx, ACL_HELP)),
    ] },
];

/** For the ACL log: the client's CLIENT LIST line, with the fields a client sets cut (src/log-text.ts). */
export function aclClientInfo(client: Client): string {
  return clientInfoLine(client, Date.now(), true);
}
