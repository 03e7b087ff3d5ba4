/** A key argument looked up or created in a keyspace, on the request's bytes (no string per key). */
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
