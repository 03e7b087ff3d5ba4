/**
 * The limiter decisions as one Lua script run by a real Redis (docs/backend.md, "How state is
 * stored"): each limiter call of the backend mode is one EVALSHA of LIMITER_SCRIPT, atomic on the
 * Redis side, with the keys of the call in KEYS.
 *
 * The script is an operation-by-operation transcription of src/limiters/ (CL.THROTTLE, Redis's GCRA
 * and the six RL.* algorithms; helpers inlined where a call per use cost Redis CPU) and of the lookup / WRONGTYPE / decide / commit steps of
 * src/commands/throttle.ts and src/commands/ratelimit.ts. Redis's Lua 5.1 computes with doubles, as
 * the TypeScript does, so the same operations give the same numbers; where the two languages differ
 * the script says so (`%` is floored in Lua: math.fmod is used, as JS's `%` truncates; numbers come
 * in as doubles and go out to Redis with '%.0f', never tostring's 14 digits). The differential property test
 * (test/backend/limiter-script.property.test.ts) replays random timelines on both and compares.
 *
 * The Lua is in .lua files: the dispatcher (lookup, REFUND, RL.ALL, the reply) in
 * limiter-script.lua, each op's branches in its algorithm's .lua file beside its limiter in
 * src/limiters/, embedded at build by scripts/embed-lua.mjs and put together here.
 *
 * Not transcribed: redis-gcra.ts's BigInt path (intervals beyond 2^51 µs, limits or TATs beyond 2^53).
 * limiterScriptArgv refuses such parameters up front, and the script refuses a stored TAT that would
 * need it; neither happens with TATs of this era and intervals below 71 years.
 */
import type { Algorithm } from '../limiters/algorithm.js';
import type { CellParams } from '../limiters/cell-throttle.js';
import type { GcraParams } from '../limiters/redis-gcra.js';
import { BLOCK_TYPE } from '../limiters/block.js';
import { ALGORITHMS, GCRA_KEY, KEY_TYPES, SCRIPT_OPS, algorithmOfType } from '../limiters/registry.js';
import { lua as blockScript } from './block-script.lua.js';
import { WRONGTYPE } from '../store/limiter-replies.js';
import { lua as dispatcher } from './limiter-script.lua.js';
import { lua as leaseScript } from './lease-script.lua.js';
import { MAX_LEASE_LIMIT } from '../limiters/lease-limits.js';
import { BACKEND_LEASE_TYPE } from './lease-type.js';
import { lua as typeScript } from './type-script.lua.js';

/** One limit of a call, as the command parsed it (the same objects the local path passes to src/limiters). */
export type ScriptLimit =
  | { kind: 'cl.throttle'; params: CellParams; quantity: number }
  | { kind: 'gcra'; params: GcraParams }
  | { kind: 'rl'; /** The algorithm's type tag (src/limiters/registry.ts). */ type: number; limit: number; periodMs: number; burst: number; gcra: CellParams; cost: number; /** REFUND n (≥ 1) instead of a cost; absent or 0: a decision. */ refund?: number; /** FORCE: recorded beyond the limit (sent as the cost negated). */ force?: boolean };

export interface LimitOutcome {
  /** The reply integers exactly as the local command writes them: 5 for cl.throttle/gcra, 6 for rl. */
  values: number[];
  /**
   * When this limit refused: the same call stays refused through decision instant + refusedForUs µs
   * (if nobody else spends) and is allowed 1 µs later. −1 when allowed, or when it can never be
   * allowed (the cost is above the capacity).
   */
  refusedForUs: number;
}

export interface ScriptOutcome {
  limited: boolean;
  limits: LimitOutcome[];
}

/** The error for parameters only redis-gcra.ts's BigInt path computes exactly. */
export const BACKEND_WIDE_ERROR = 'ERR GCRA values beyond 2^53 are not supported with a backend';

/**
 * A batch's call whose key the node it was sent to does not serve (a Cluster resharded or failed
 * over since the sidecar's slot map was read): nothing was decided; the call goes again on its own.
 */
export const NOT_SERVED = 'ERR cellgate: key not served by this node';

/**
 * The most entries one sliding log may hold on the backend (its value at most 1 MiB of entries): an
 * RL.SLIDINGLOG limit above it is refused before anything is sent (a log never holds more entries
 * than its limit), and a stored log claiming more is not cellgate's (WRONGTYPE), so no call ever
 * copies more than this many entries inside Redis.
 */
export const MAX_BACKEND_SLIDING_LOG_LIMIT = 65_536;

/** The error for an RL.SLIDINGLOG limit above MAX_BACKEND_SLIDING_LOG_LIMIT. */
export const BACKEND_LOG_LIMIT_ERROR = `ERR RL.SLIDINGLOG limit above ${MAX_BACKEND_SLIDING_LOG_LIMIT} is not supported with a backend`;

/**
 * The value layout (docs/backend.md): byte 1 the format tag, byte 2 the type tag (src/limiters/
 * registry.ts), then little-endian doubles: absolute expiry (ms), A, B, C; a sliding log appends its
 * entries as (ms, running total).
 *
 * ARGV (limiterScriptArgv) is one binary string: a flags byte (1: all-or-nothing, 2: the debug clock
 * is given; 4: a unit of several calls, see unitScriptArgv; 8: a batch, see batchScriptHeader), the debug clock in µs as a
 * little-endian double, then per limit 49 bytes: the op code and six little-endian doubles. An RL.* op code in uppercase (single-limit calls only) is a
 * `REFUND n`, n in the cost's place. One element, as each costs the sidecar's client CPU to send, and
 * binary, as one struct.unpack is cheaper in Redis than parsing and tonumber of decimal strings.
 *
 * The reply is flat: the call's limited flag, then per limit its reply integers (6 or 7 for rl) and
 * refusedForUs.
 *
 * Cost: the body runs on every EVALSHA, so every function defined in it is a new closure per run
 * and every table an allocation. Only the code of the op being run executes: the decision of each
 * op is inline in one if/elseif chain, a decision is locals (returned as multiple values), and the
 * common single-limit call writes and replies without any table but the reply's. A helper several
 * decisions share is defined once per run at the top (a batch decides many calls per run); one
 * op's own helper inside its branch. In a batch, the decision on an absent key is made once per
 * distinct call element (limit and clock), not once per call.
 */
const LUA = assembleLimiterScript();

/**
 * The script from its parts: the dispatcher (limiter-script.lua) with each `--@decide op` and
 * `--@refund op` line replaced by that op's branch from its algorithm's .lua file (src/limiters/, via
 * the registry), `--@type_of` by the op → type tag chain, and the constants written in.
 */
function assembleLimiterScript(): string {
  const byOp = new Map(SCRIPT_OPS.map((o) => [o.op, o]));
  const rl = ALGORITHMS.filter((a) => a !== GCRA_KEY).sort((x, y) => x.type - y.type);
  // Three ops per line, as the chain was first written (the script's bytes, hence its SHA1, stay put).
  const typeOf = rl.map((a, i) => `${i === 0 ? '  if' : i % 3 === 0 ? '\n  elseif' : ' elseif'} op == '${a.op}' then return ${a.type}`).join('') + ' end\n';
  const text = dispatcher.replace(/^--@(decide|refund|type_of) ?(\w?)\n/gm, (_line, part: string, op: string) => {
    if (part === 'type_of') return typeOf;
    const o = byOp.get(op);
    if (o === undefined) throw new Error(`limiter-script.lua: no op '${op}'`);
    return part === 'decide' ? o.luaDecide : o.luaRefund;
  });
  const withLeases = text.replace(/^--@leases\n/m, () => leaseScript);
  // The leading newline: the script began with one when it was a template literal (same bytes, same SHA1).
  return '\n' + withLeases
    .replaceAll('${LEASE_TYPE}', String(BACKEND_LEASE_TYPE))
    .replaceAll('${MAX_LEASE_LIMIT}', String(MAX_LEASE_LIMIT))
    .replaceAll('${MAX_BACKEND_SLIDING_LOG_LIMIT}', String(MAX_BACKEND_SLIDING_LOG_LIMIT))
    .replaceAll('${BACKEND_WIDE_ERROR}', BACKEND_WIDE_ERROR)
    .replaceAll('${NOT_SERVED}', NOT_SERVED)
    .replaceAll('${MAX_TYPE}', String(Math.max(...KEY_TYPES.map(([type]) => type))))
    .replaceAll('${BLOCK_TYPE}', String(BLOCK_TYPE));
}

/** The Lua source (one script for every algorithm and for RL.ALL). */
export const LIMITER_SCRIPT: string = LUA;

/** Bytes per limit in the script's ARGV: the op code and six doubles. */
const LIMIT_BYTES = 49;

function put(out: Buffer, at: number, op: string, x1: number, x2: number, x3: number, x4: number, x5: number, x6: number): void {
  out[at] = op.charCodeAt(0);
  out.writeDoubleLE(x1, at + 1);
  out.writeDoubleLE(x2, at + 9);
  out.writeDoubleLE(x3, at + 17);
  out.writeDoubleLE(x4, at + 25);
  out.writeDoubleLE(x5, at + 33);
  out.writeDoubleLE(x6, at + 41);
}

/**
 * ARGV for LIMITER_SCRIPT (one binary element, laid out as the script's header says); KEYS are the
 * limits' backend keys (prefix + key bytes), in the same order.
 * nowUs: the frozen debug clock in µs when DEBUG CLOCK is in effect, else null (the script reads TIME).
 * allOrNothing: RL.ALL (nothing is written unless every limit allows).
 * Returns { error } (the reply text without '-') when the call cannot be computed exactly by the script.
 */
export function limiterScriptArgv(limits: readonly ScriptLimit[], allOrNothing: boolean, nowUs: number | null): Buffer[] | { error: string } {
  const out = Buffer.allocUnsafe(9 + LIMIT_BYTES * limits.length);
  out[0] = (allOrNothing ? 1 : 0) | (nowUs === null ? 0 : 2);
  out.writeDoubleLE(nowUs ?? 0, 1);
  let at = 9;
  for (const l of limits) {
    if (l.kind === 'cl.throttle') {
      const p = l.params;
      put(out, at, 'c', p.limit, p.intervalUs, p.intervalNs, p.toleranceUs, p.toleranceNs, l.quantity);
    } else if (l.kind === 'gcra') {
      const p = l.params;
      if (p.wide !== null || !(p.limit <= Number.MAX_SAFE_INTEGER)) return { error: BACKEND_WIDE_ERROR };
      put(out, at, 'g', p.limit, p.emissionUs, p.varianceUs, p.incrementUs, 0, 0);
    } else if (l.type === GCRA_KEY.type) {
      const p = l.gcra;
      const refund = l.refund ?? 0;
      put(out, at, refund > 0 ? 'R' : 'r', p.limit, p.intervalUs, p.intervalNs, p.toleranceUs, p.toleranceNs, refund > 0 ? refund : l.force === true ? -l.cost : l.cost);
    } else {
      const algo = algorithmOfType(l.type) as Algorithm;
      // Only the sliding log keeps a log whose length its limit bounds (its blob locally).
      if (algo.hasBlob && l.limit > MAX_BACKEND_SLIDING_LOG_LIMIT) return { error: BACKEND_LOG_LIMIT_ERROR };
      const refund = l.refund ?? 0;
      // A refund (single-limit calls only) is the op in uppercase, with the units where the cost goes.
      const op = algo.op;
      // FORCE is the cost negated (a cost is never negative otherwise).
      put(out, at, refund > 0 ? op.toUpperCase() : op, l.limit, l.periodMs, l.burst, refund > 0 ? refund : l.force === true ? -l.cost : l.cost, 0, 0);
    }
    at += LIMIT_BYTES;
  }
  return [out];
}

function toInteger(x: unknown): number {
  if (typeof x === 'number') return x;
  // remaining saturated to i64::MAX (CL.THROTTLE with an interval below 1 µs): as the local decision.
  if (typeof x === 'string' || Buffer.isBuffer(x)) {
    const s = x.toString();
    return s === '9223372036854775807' ? Number.MAX_VALUE : Number(s);
  }
  throw new TypeError(`limiter script: unexpected reply element ${String(x)}`);
}

/**
 * ARGV for a unit of calls decided together, in order, in one run of LIMITER_SCRIPT (a transaction's
 * calls): a header (flag 4, and the debug clock as limiterScriptArgv gives it), then each call's own
 * ARGV element (from limiterScriptArgv); KEYS are the calls' keys, one call's after the other's.
 * The reply is an array of each call's reply (or its error).
 */
export function unitScriptArgv(calls: readonly Buffer[], nowUs: number | null): Buffer[] {
  const header = Buffer.allocUnsafe(9);
  header[0] = 4 | (nowUs === null ? 0 : 2);
  header.writeDoubleLE(nowUs ?? 0, 1);
  return [header, ...calls];
}

/**
 * The first ARGV element of a batch: the calls of one event-loop turn for one node, decided in order
 * by one run of LIMITER_SCRIPT with no KEYS (so that a Cluster node takes keys of any of its slots);
 * after it, each call's own ARGV element (from limiterScriptArgv) followed by its keys. Each call
 * decides at its own debug clock if its element carries one, else at the backend's TIME (read once,
 * unless `frozen`: every call carries its clock). The reply is an array of each call's reply or its
 * error, packed in one string (splitBatchReply); NOT_SERVED for a key the node does not serve.
 */
export function batchScriptHeader(frozen: boolean): Buffer {
  const header = Buffer.alloc(9);
  header[0] = 8 | (frozen ? 2 : 0);
  return header;
}

/** The errors a batch's reply codes by number (limiter-script.lua), by code − 1 negated. */
const BATCH_ERRORS = [WRONGTYPE, NOT_SERVED, BACKEND_WIDE_ERROR];

/**
 * A batch's reply (limiter-script.lua, batchScriptHeader) split into each call's: its reply integers
 * (as parseLimiterReply takes them: i64::MAX as Number.MAX_VALUE, each truncated as Redis truncates
 * a Lua number it replies as an integer), or its error's text; null when the reply is not a batch
 * reply of `calls` calls.
 */
export function splitBatchReply(reply: unknown, calls: number): (number[] | string)[] | null {
  if (!Buffer.isBuffer(reply)) return null;
  const out: (number[] | string)[] = new Array(calls);
  let at = 0;
  for (let i = 0; i < calls; i++) {
    if (at + 8 > reply.length) return null;
    const n = reply.readDoubleLE(at);
    at += 8;
    if (n < 0) {
      out[i] = BATCH_ERRORS[-n - 1] ?? 'ERR unexpected error from the limiter script';
      continue;
    }
    if (!Number.isInteger(n) || at + 8 * n > reply.length) return null;
    const values: number[] = new Array(n);
    for (let k = 0; k < n; k++, at += 8) {
      const x = reply.readDoubleLE(at);
      // + 0: a -0 (a Lua -0 or a fraction above -1) is 0 as an integer reply.
      values[k] = x === Infinity ? Number.MAX_VALUE : Math.trunc(x) + 0;
    }
    out[i] = values;
  }
  return at === reply.length ? out : null;
}

/**
 * Decodes the script's reply as ioredis returns it (or a call's part of a batch's, splitBatchReply): flat, the call's limited flag, then per limit
 * its reply integers (5, or 6 for rl) and refusedForUs.
 */
export function parseLimiterReply(reply: unknown, limits: readonly ScriptLimit[]): ScriptOutcome {
  if (!Array.isArray(reply)) throw new TypeError('limiter script: unexpected reply shape');
  const out: LimitOutcome[] = [];
  let at = 1;
  for (let i = 0; i < limits.length; i++) {
    const width = limits[i].kind === 'rl' ? 6 : 5;
    if (reply.length < at + width + 1) throw new TypeError('limiter script: unexpected reply shape');
    const values: number[] = new Array(width);
    for (let k = 0; k < width; k++) values[k] = toInteger(reply[at + k]);
    out.push({ values, refusedForUs: toInteger(reply[at + width]) });
    at += width + 1;
  }
  if (reply.length !== at) throw new TypeError('limiter script: unexpected reply shape');
  return { limited: reply[0] === 1, limits: out };
}

/**
 * TYPE of one backend key (KEYS[1]; ARGV[1] the debug clock in µs or ''): the local type name,
 * 'none' when absent or expired by the stored expiry, or Redis's own TYPE for a key that is not a
 * cellgate value. A status reply, as TYPE's.
 */
export const TYPE_SCRIPT: string = '\n' + typeScript
  .replace('--@type_names', KEY_TYPES.map(([type, name]) => `[${type}] = '${name}'`).join(', '))
  .replaceAll('${MAX_BACKEND_SLIDING_LOG_LIMIT}', String(MAX_BACKEND_SLIDING_LOG_LIMIT));

/**
 * RL.BLOCK on the backend (KEYS[1]; ARGV[1] the block's length in ms, ARGV[2] the debug clock in µs
 * or ''): the key becomes a block value, ending that long after the script's time, whatever it held.
 */
export const BLOCK_SCRIPT: string = blockScript.replaceAll('${BLOCK_TYPE}', String(BLOCK_TYPE));
