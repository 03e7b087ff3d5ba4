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
import { transactionCommands } from './transactions.js';
import type { CommandSpec } from './types.js';

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
  ...transactionCommands,
];

const BY_NAME = new Map<string, CommandSpec>();
const SUBCOMMANDS = new Map<CommandSpec, Map<string, CommandSpec>>();
for (const spec of COMMANDS) {
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
