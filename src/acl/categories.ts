/**
 * ACL categories (`@read`, `@limiter`, ...). Most are derived from a command's flags, as Redis
 * derives them; a spec adds the rest in its `aclExtra` field. The table computes each command's
 * list once, at build time.
 */
import type { CommandSpec } from '../commands/types.js';

/** Redis 7.2's categories in ACL CAT order, then ours. */
export const CATEGORIES = [
  'keyspace', 'read', 'write', 'set', 'sortedset', 'list', 'hash', 'string', 'bitmap', 'hyperloglog', 'geo', 'stream',
  'pubsub', 'admin', 'fast', 'slow', 'blocking', 'dangerous', 'connection', 'transaction', 'scripting', 'limiter',
] as const;

const KNOWN = new Set<string>(CATEGORIES);

export function isCategory(name: string): boolean {
  return KNOWN.has(name);
}

/** The categories of `spec`, without the `@`, in CATEGORIES order. */
export function deriveCategories(spec: CommandSpec): string[] {
  const cats = new Set<string>(spec.aclExtra ?? []);
  if (spec.flags.includes('write')) cats.add('write');
  if (spec.flags.includes('readonly')) cats.add('read');
  if (spec.flags.includes('fast')) cats.add('fast');
  else cats.add('slow');
  if (spec.flags.includes('admin')) {
    cats.add('admin');
    cats.add('dangerous');
  }
  if (spec.group === 'connection') cats.add('connection');
  if (spec.group === 'limiter') cats.add('limiter');
  if (spec.group === 'transactions') cats.add('transaction');
  for (const c of cats) if (!KNOWN.has(c)) throw new Error(`unknown ACL category @${c} on ${spec.name}`);
  return CATEGORIES.filter((c) => cats.has(c));
}
