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
import { persistenceCommands } from './persistence.js';
import { slowlogCommands } from './slowlog.js';
import { throttleCommands } from './throttle.js';
import { aclCommands } from './acl.js';
import { deriveCategories } from '../acl/categories.js';
import { transactionCommands } from './transactions.js';
import type { CommandCatalog, CommandSpec } from './types.js';

const COMMANDS: CommandSpec[] = [
  ...connectionCommands,
  ...keyCommands,
  ...throttleCommands,
  ...rateLimitCommands,
  ...infoCommands,
  ...adminCommands,
  ...persistenceCommands,
  ...slowlogCommands,
  ...introspectionCommands,
  ...aclCommands,
  ...transactionCommands,
];

const BY_NAME = new Map<string, CommandSpec>();
const SUBCOMMANDS = new Map<CommandSpec, Map<string, CommandSpec>>();
let nextId = 0;
/** Every command and subcommand gets an id, its categories and the key access its keys need. */
function prepare(spec: CommandSpec): void {
  spec.id = nextId++;
  spec.aclCategories = deriveCategories(spec);
  // Keys of a write command are read and written (CL.THROTTLE, RL.*), except those that only delete.
  const deletes = spec.name === 'del' || spec.name === 'unlink';
  spec.aclKeyAccess = spec.flags.includes('write') ? (deletes ? 2 : 3) : 1;
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
