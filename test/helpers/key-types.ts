/**
 * The algorithms' key type tags by name, for tests that make keys in-process: read from the registry
 * (the keyspace itself knows no algorithm), so a test names a type as it always did.
 */
import { FREE_TYPE } from '../../src/keyspace/keyspace.js';
import { ALGORITHMS, GCRA_KEY } from '../../src/limiters/registry.js';

function tagOf(name: string): number {
  const algo = ALGORITHMS.find((a) => a.name === name);
  if (algo === undefined) throw new Error(`no algorithm ${name}`);
  return algo.type;
}

export const KeyType = {
  Free: FREE_TYPE,
  Gcra: GCRA_KEY.type,
  TokenBucket: tagOf('TOKENBUCKET'),
  LeakyBucket: tagOf('LEAKYBUCKET'),
  FixedWindow: tagOf('FIXEDWINDOW'),
  SlidingLog: tagOf('SLIDINGLOG'),
  SlidingWindow: tagOf('SLIDINGWINDOW'),
} as const;
export type KeyType = number;

/** Each type tag's TYPE name. */
export const TYPE_NAMES: Record<number, string> = Object.fromEntries(ALGORITHMS.map((a) => [a.type, a.typeName]));
