/**
 * The hash of a key's bytes, for the keyspace's own hash table (key-table.ts).
 *
 * MurmurHash3's x86 32-bit block mix and finalizer, with one change against hash flooding: every
 * 4-byte block is XORed with a secret random word chosen by its position before it is mixed. Limiter
 * keys are often made of what clients send (an IP, a user id, an API key), and a table whose hash an
 * attacker can collide at will degrades to a linear scan. Plain seeded Murmur3 has collisions that
 * hold for every seed (the seed only enters the state once); with a secret word per block position,
 * a colliding pair of blocks depends on the secret, which the attacker never sees. This is a
 * mitigation of the same strength as V8's seeded string hashing that `Map<string, …>` relied on
 * before, not a proof like SipHash's (which costs several times more in JavaScript's 32-bit
 * arithmetic, on every command).
 */
import { randomFillSync } from 'node:crypto';

/** Secret words, one per block position (cycled for keys longer than 4 × 64 bytes). */
const SECRET = randomFillSync(new Int32Array(64));
const SEED = SECRET[0] ^ 0x5bd1e995;

/** The 32-bit hash (a signed int) of `bytes[start, end)`. */
export function hashKey(bytes: Uint8Array, start: number, end: number): number {
  let h = SEED;
  let i = start;
  let block = 0;
  const lastBlock = end - 3;
  for (; i < lastBlock; i += 4) {
    let k = (bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) | (bytes[i + 3] << 24)) ^ SECRET[block++ & 63];
    k = Math.imul(k, 0xcc9e2d51);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, 0x1b873593);
    h ^= k;
    h = (h << 13) | (h >>> 19);
    h = (Math.imul(h, 5) + 0xe6546b64) | 0;
  }
  const tail = end - i;
  if (tail > 0) {
    let k = bytes[i];
    if (tail > 1) k |= bytes[i + 1] << 8;
    if (tail > 2) k |= bytes[i + 2] << 16;
    k ^= SECRET[block & 63];
    k = Math.imul(k, 0xcc9e2d51);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, 0x1b873593);
    h ^= k;
  }
  h ^= end - start;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h;
}
