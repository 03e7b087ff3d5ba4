/**
 * The lease ids the server makes for RL.ACQUIRE without `ID`: 16 lowercase hex digits, a random
 * 32-bit prefix drawn at start (and again after 2^32 ids) then a 32-bit counter. Unique per process;
 * across restarts (leases survive in snapshots) and across sidecars sharing a backend two processes
 * would have to draw the same prefix and reach the same count on the same key to collide.
 */
import { randomInt } from 'node:crypto';
import { SERVER_ID_LENGTH } from './lease-limits.js';

const TWO_32 = 2 ** 32;
let prefix = '';
let counter = TWO_32;

/** A new lease id (SERVER_ID_LENGTH characters). */
export function newLeaseId(): string {
  if (counter >= TWO_32) {
    prefix = hex8(randomInt(0, TWO_32));
    counter = 0;
  }
  return prefix + hex8(counter++);
}

function hex8(n: number): string {
  return n.toString(16).padStart(SERVER_ID_LENGTH / 2, '0');
}
