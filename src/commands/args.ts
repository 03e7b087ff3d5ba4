/**
 * Argument helpers for command handlers: a key argument looked up or created in a keyspace, an
 * argument as a name or a keyword. Numbers are parsed in src/protocol/numbers.ts.
 */
import type { Keyspace, KeyType } from '../keyspace/keyspace.js';
import type { CommandArgs } from '../protocol/command-args.js';

/** The keyspace slot of the key in argument `i`, looked up on the request's bytes (see Keyspace.lookupKey). */
export function lookupKeyArg(ks: Keyspace, argv: CommandArgs, i: number, nowMs: number): number {
  return ks.lookupKey(argv.source(i), argv.start(i), argv.end(i), nowMs);
}

/** Creates the key in argument `i` (see Keyspace.createKey). */
export function createKeyArg(ks: Keyspace, argv: CommandArgs, i: number, type: KeyType): number {
  return ks.createKey(argv.source(i), argv.start(i), argv.end(i), type);
}

/** The argument as a binary string (one char per byte): how keys and names are held. */
export function str(arg: Buffer): string {
  return arg.toString('latin1');
}

/** Lowercase ASCII view of an argument, for keyword comparison. */
export function lower(arg: Buffer): string {
  return arg.toString('latin1').toLowerCase();
}
