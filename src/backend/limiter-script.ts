// Placeholder with the interface; the implementation lands from the storage/script work.
import type { CellParams } from '../limiters/cell-throttle.js';
import type { GcraParams } from '../limiters/redis-gcra.js';
import type { KeyType } from '../keyspace/keyspace.js';

export type ScriptLimit =
  | { kind: 'cl.throttle'; params: CellParams; quantity: number }
  | { kind: 'gcra'; params: GcraParams }
  | { kind: 'rl'; type: KeyType; limit: number; periodMs: number; burst: number; gcra: CellParams; cost: number };

export const LIMITER_SCRIPT = 'return 0';
export const TYPE_SCRIPT = 'return "none"';

export function limiterScriptArgv(limits: readonly ScriptLimit[], allOrNothing: boolean, nowUs: number | null): string[] | { error: string } {
  void limits; void allOrNothing; void nowUs;
  return { error: 'ERR not implemented' };
}

export interface LimitOutcome {
  values: number[];
  refusedForUs: number;
}
export interface ScriptOutcome { limited: boolean; limits: LimitOutcome[] }

export function parseLimiterReply(reply: unknown, limits: readonly ScriptLimit[]): ScriptOutcome {
  void reply; void limits;
  throw new Error('not implemented');
}
