/**
 * Every `RL.*` algorithm, each described once in its limiter's file (an `Algorithm`, algorithm.ts),
 * in the order of the RL.* commands; the backend script's ops, which are the algorithms' plus
 * CL.THROTTLE's and GCRA's; and the key types, which are the algorithms' plus the block's (RL.BLOCK,
 * block.ts) and the concurrency limits' (RL.ACQUIRE, concurrency.ts): key types that are no algorithm. The commands, the backend's script, the snapshot and
 * journal checks, TYPE, INFO, the metrics and the warm-up read these lists: adding an algorithm is
 * its limiter file, its .lua file and one line here (docs/algorithms.md, "Adding an algorithm").
 */
import type { Algorithm, ScriptOp } from './algorithm.js';
import { BLOCK_TYPE, BLOCK_TYPE_NAME } from './block.js';
import { cellThrottleOp } from './cell-throttle.js';
import { CONCURRENCY_TYPE, CONCURRENCY_TYPE_NAME } from './concurrency.js';
import { fixedWindow } from './fixed-window.js';
import { gcraMs } from './gcra-ms.js';
import { leakyBucket } from './leaky-bucket.js';
import { redisGcraOp } from './redis-gcra.js';
import { slidingLog } from './sliding-log.js';
import { slidingWindow } from './sliding-window.js';
import { tokenBucket } from './token-bucket.js';

export const ALGORITHMS: readonly Algorithm[] = [tokenBucket, leakyBucket, fixedWindow, slidingLog, slidingWindow, gcraMs];

/** The key type CL.THROTTLE, GCRA and RL.GCRA share (their TAT). */
export const GCRA_KEY: Algorithm = gcraMs;

/** Every op of the backend's limiter script. */
export const SCRIPT_OPS: readonly ScriptOp[] = [cellThrottleOp, redisGcraOp, ...ALGORITHMS];

/** Each type tag's algorithm; undefined for 0 (a free slot) and for a tag no algorithm has. */
const BY_TYPE: (Algorithm | undefined)[] = [];
for (const algo of ALGORITHMS) {
  if (BY_TYPE[algo.type] !== undefined || algo.type === BLOCK_TYPE || algo.type === CONCURRENCY_TYPE) throw new Error(`two key types with type tag ${algo.type}`);
  BY_TYPE[algo.type] = algo;
}

/** The algorithm of type tag `type`, or undefined (an unknown type byte in a file). */
export function algorithmOfType(type: number): Algorithm | undefined {
  return BY_TYPE[type];
}

/** Whether `type` is a key type: an algorithm's, a block's (RL.BLOCK, block.ts) or concurrency leases' (concurrency.ts). */
export function isKeyType(type: number): boolean {
  return BY_TYPE[type] !== undefined || type === BLOCK_TYPE || type === CONCURRENCY_TYPE;
}

/** What TYPE answers for a key of type tag `type` (the tag of a live key is always known). */
export function typeName(type: number): string {
  if (type === BLOCK_TYPE) return BLOCK_TYPE_NAME;
  if (type === CONCURRENCY_TYPE) return CONCURRENCY_TYPE_NAME;
  return (BY_TYPE[type] as Algorithm).typeName;
}

/** Every key type as [tag, TYPE name], by tag (INFO's and the metrics' per-type key counts). */
export const KEY_TYPES: readonly (readonly [number, string])[] = [
  ...ALGORITHMS.map((a) => [a.type, a.typeName] as const),
  [BLOCK_TYPE, BLOCK_TYPE_NAME] as const,
  [CONCURRENCY_TYPE, CONCURRENCY_TYPE_NAME] as const,
].sort((x, y) => x[0] - y[0]);
