/**
 * Users' passwords as AUTH checks them: SHA-256 digests, compared in constant time, and the same
 * work for a user name that does not exist as for one that does (a dummy digest).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * How many digest comparisons AUTH made since start: the same for a name that exists and one that
 * does not (test/acl/acl-rules.test.ts reads it).
 */
export let authDigestComparisons = 0;

/** What an unknown user's password is compared with: random, so no password matches it. */
export const UNKNOWN_USER_DIGEST = randomBytes(32);

export function sha256Hex(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Compares two SHA-256 digests in constant time; every AUTH compares at least one pair. */
export function compareDigests(given: Buffer, stored: Buffer): boolean {
  authDigestComparisons++;
  return timingSafeEqual(given, stored);
}
