/**
 * Argument helpers for command handlers: a key argument looked up or created in a keyspace, an
 * argument as a name or a keyword. Numbers are parsed in src/protocol/numbers.ts.
 */
export { createKeyArg, lookupKeyArg } from '../store/key-args.js';

/** The argument as a binary string (one char per byte): how keys and names are held. */
export function str(arg: Buffer): string {
  return arg.toString('latin1');
}

/** Lowercase ASCII view of an argument, for keyword comparison. */
export function lower(arg: Buffer): string {
  return arg.toString('latin1').toLowerCase();
}
