/**
 * The command table: every command family registers its descriptions here, and everything that
 * needs to know a command's shape (dispatch, arity, COMMAND INFO/DOCS/LIST) reads it from here.
 */
import { adminCommands } from './admin.js';
import { connectionCommands } from './connection.js';
import { infoCommands } from './info.js';
import { introspectionCommands } from './introspection.js';
import { keyCommands } from './keys.js';
import { rateLimitCommands } from './ratelimit.js';
import { leaseCommands } from './leases.js';
import { persistenceCommands } from './persistence.js';
import { slowlogCommands } from './slowlog.js';
import { throttleCommands } from './throttle.js';
import { aclCommands } from './acl.js';
import { deriveCategories } from '../acl/categories.js';
import { KEY_READ, KEY_WRITE } from '../acl/users.js';
import { transactionCommands } from './transactions.js';
import { compileRedaction } from './redaction.js';
import {
  TRAIT_DENYOOM, TRAIT_LEAVES_MULTI, TRAIT_NO_AUTH, TRAIT_NO_MULTI, TRAIT_RUNS_IN_MULTI, TRAIT_RUNS_QUEUE, TRAIT_SKIP_SLOWLOG,
  type CommandCatalog, type CommandSpec, type KeySpecFlag,
} from './types.js';

/**
 * A copy of `spec` with every field of CommandSpec present, in one order. The command families write
 * their specs as literals with different optional fields, which gives V8 one hidden class per
 * shape; the dispatcher reads the same few fields of every command (traits, arity, run, ...) at a
 * handful of sites, and with dozens of shapes each of those reads became a megamorphic lookup
 * (+10% CPU per pipelined CL.THROTTLE, measured with bench/throttle.mjs). Uniform specs keep them
 * monomorphic.
 */
function uniform(spec: CommandSpec): CommandSpec {
  return {
    name: spec.name, arity: spec.arity, maxArity: spec.maxArity, traits: spec.traits, run: spec.run, fullName: spec.fullName,
    subcommands: spec.subcommands?.map(uniform), id: spec.id, aclKeyAccess: spec.aclKeyAccess, forEachKey: spec.forEachKey,
    secretArg: spec.secretArg, flags: spec.flags, dispatch: spec.dispatch, firstKey: spec.firstKey, lastKey: spec.lastKey,
    keyStep: spec.keyStep, group: spec.group, summary: spec.summary, since: spec.since, complexity: spec.complexity, args: spec.args,
    aclExtra: spec.aclExtra, aclCategories: spec.aclCategories, keyFlags: spec.keyFlags, redacts: spec.redacts,
  };
}

const COMMANDS: CommandSpec[] = [
  ...connectionCommands,
  ...keyCommands,
  ...throttleCommands,
  ...rateLimitCommands,
  ...leaseCommands,
  ...infoCommands,
  ...adminCommands,
  ...persistenceCommands,
  ...slowlogCommands,
  ...introspectionCommands,
  ...aclCommands,
  ...transactionCommands,
].map(uniform);

const BY_NAME = new Map<string, CommandSpec>();
const SUBCOMMANDS = new Map<CommandSpec, Map<string, CommandSpec>>();
let nextId = 0;
/**
 * Every command and subcommand gets an id, its categories, its keys' flags and the access they
 * need, the dispatcher's trait bits, and its slow-log redaction test.
 */
function prepare(spec: CommandSpec): void {
  spec.id = nextId++;
  spec.aclCategories = deriveCategories(spec);
  // Keys of a write command are read and written (CL.THROTTLE, RL.*), unless its spec says
  // otherwise (DEL only deletes).
  spec.keyFlags ??= spec.flags.includes('write') ? ['RW', 'access', 'update'] : ['RO', 'access'];
  spec.aclKeyAccess = keyAccess(spec.keyFlags);
  spec.traits = traitsOf(spec);
  if (spec.redacts !== undefined) spec.secretArg = compileRedaction(spec.redacts);
}

/** The ACL's key permissions a key spec needs, as Redis's: reading for `access`, writing for a change. */
function keyAccess(flags: KeySpecFlag[]): number {
  let access = 0;
  if (flags.includes('access')) access |= KEY_READ;
  if (flags.includes('update') || flags.includes('insert') || flags.includes('delete')) access |= KEY_WRITE;
  return access;
}

function traitsOf(spec: CommandSpec): number {
  const has = (flag: string): boolean => (spec.flags as string[]).includes(flag) || (spec.dispatch as string[] | undefined)?.includes(flag) === true;
  return (has('no-auth') ? TRAIT_NO_AUTH : 0) | (has('denyoom') ? TRAIT_DENYOOM : 0) | (has('no-multi') ? TRAIT_NO_MULTI : 0) |
    (has('skip_slowlog') ? TRAIT_SKIP_SLOWLOG : 0) | (has('runs-in-multi') ? TRAIT_RUNS_IN_MULTI : 0) |
    (has('leaves-multi') ? TRAIT_LEAVES_MULTI : 0) | (has('runs-queue') ? TRAIT_RUNS_QUEUE : 0);
}
for (const spec of COMMANDS) {
  prepare(spec);
  for (const sub of spec.subcommands ?? []) prepare(sub);
  BY_NAME.set(spec.name, spec);
  if (spec.subcommands !== undefined) {
    const subs = new Map<string, CommandSpec>();
    for (const sub of spec.subcommands) {
      sub.fullName = `${spec.name}|${sub.name}`;
      subs.set(sub.name, sub);
    }
    SUBCOMMANDS.set(spec, subs);
  }
}

export function lookupCommand(lowercaseName: string): CommandSpec | undefined {
  return BY_NAME.get(lowercaseName);
}

export function lookupSubcommand(container: CommandSpec, lowercaseName: string): CommandSpec | undefined {
  return SUBCOMMANDS.get(container)?.get(lowercaseName);
}

export function allCommands(): CommandSpec[] {
  return COMMANDS;
}

/** The table as handlers see it, through their CommandContext. */
export const commandCatalog: CommandCatalog = { lookupCommand, lookupSubcommand, allCommands };
