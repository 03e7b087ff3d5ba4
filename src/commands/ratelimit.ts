/**
 * The `RL.*` family (docs/algorithms.md): one command per algorithm, `RL.<ALGO> key limit period_ms
 * [BURST n] [COST n | REFUND n]` (REFUND gives n spent units back), and `RL.ALL`, several limits
 * checked and spent all-or-nothing.
 *
 * Each call parses every argument first (an error leaves every key untouched), looks its key up
 * (WRONGTYPE for a key of another algorithm), asks the pure limiter in src/limiters/ for a decision,
 * stores the new state only when the limiter says so (an allowed call with COST ≥ 1), and replies
 * `limited, limit, remaining, retry_after_ms, reset_after_ms, delay_ms`: six integers in RESP2, a map
 * with those keys in RESP3.
 *
 * RL.ALL replies an array: the overall limited flag (0/1), then one such 6-field reply per limit, in
 * the order given, each as if that limit alone had been asked. A trailing `COST n` applies to every
 * limit. Nothing is spent anywhere unless every limit allows.
 *
 * State per key type (fields A/B/C of the keyspace, plus a blob for an algorithm that keeps one) is
 * documented in each limiter module; each module's entry (src/limiters/registry.ts) decides over it.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { createKeyArg, lookupKeyArg } from './args.js';
import type { Keyspace } from '../keyspace/keyspace.js';
import { ParamsProblem, type Algorithm } from '../limiters/algorithm.js';
import type { CellParams } from '../limiters/cell-throttle.js';
import { newGcraMsParams } from '../limiters/gcra-ms.js';
import { MAX_SCALED, newRateDecision, RefundEffect, type RateDecision } from '../limiters/rate-decision.js';
import { ALGORITHMS } from '../limiters/registry.js';
import { WRONGTYPE, writeSix } from './limiter-replies.js';
import { firstKeyOnly, type ArgDoc, type CommandContext, type CommandSpec } from './types.js';
import { LimiterCounter } from '../server/stats.js';
import { runOnBackend } from './backend-limiter.js';
import type { ScriptLimit } from '../backend/limiter-script.js';

/** The longest period accepted: 10^12 ms, about 31.7 years. */
export const MAX_PERIOD_MS = 1e12;

/** One limit of a call, parsed. Reused between calls. */
interface Limit {
  algo: Algorithm;
  /** The argument holding the key. */
  keyArg: number;
  limit: number;
  periodMs: number;
  burst: number;
  gcra: CellParams;
  /** The key's slot, or −1 when absent. */
  slot: number;
  decision: RateDecision;
}

function newLimit(): Limit {
  return { algo: ALGORITHMS[0], keyArg: 1, limit: 0, periodMs: 0, burst: 0, gcra: newGcraMsParams(), slot: -1, decision: newRateDecision() };
}

/** Limits of the current call: index 0 serves the single-algorithm commands. */
const limits: Limit[] = [newLimit()];

/**
 * Where an argument error happened, from the limit's number: '' for single commands (0), ` in limit 2`
 * for RL.ALL. Made only for an error: a string per limit per call would be garbage on every call.
 */
function where(limitNo: number): string {
  return limitNo === 0 ? '' : ` in limit ${limitNo}`;
}

/**
 * The parsers below never reply: they return −1 (or null) and leave the error reply's text here,
 * because the ACL check runs the same parse (RL.ALL's keys are where its parse finds them) and must
 * not write a reply. The text is made only for an error.
 */
let parseError = '';

function fail(message: string): -1 {
  parseError = message;
  return -1;
}

function invalid(name: string, text: string, limitNo: number, rule: string): -1 {
  return fail(`ERR invalid ${name} '${text}'${where(limitNo)}: ${rule}`);
}

const SYNTAX_ERROR = 'ERR syntax error';
const KEYWORD_BURST = Buffer.from('burst');
const KEYWORD_COST = Buffer.from('cost');
const KEYWORD_REFUND = Buffer.from('refund');
/** Each algorithm's name, lowercase, for algoAt. */
const ALGO_NAMES = ALGORITHMS.map((a) => Buffer.from(a.name.toLowerCase()));

/**
 * Whether argument `i` is `word` (lowercase ASCII letters) in any case: lower(i) === word, compared on
 * the received bytes, so no string is made per option of every call.
 */
function isKeyword(argv: CommandArgs, i: number, word: Uint8Array): boolean {
  const start = argv.start(i);
  if (argv.end(i) - start !== word.length) return false;
  const buf = argv.source(i);
  for (let k = 0; k < word.length; k++) if ((buf[start + k] | 0x20) !== word[k]) return false;
  return true;
}

/** The algorithm named by argument `i` (any case), found on the bytes: no string per limit of every call. */
function algoAt(argv: CommandArgs, i: number): Algorithm | undefined {
  for (let a = 0; a < ALGO_NAMES.length; a++) if (isKeyword(argv, i, ALGO_NAMES[a])) return ALGORITHMS[a];
  return undefined;
}

/** An integer argument in [min, max], or null with parseError naming it. */
function integerArg(argv: CommandArgs, i: number, name: string, limitNo: number, min: number, max: number): number | null {
  const n = argv.redisInteger(i);
  if (n === null) {
    invalid(name, argv.text(i), limitNo, 'not an integer');
    return null;
  }
  if (n < min) {
    invalid(name, argv.text(i), limitNo, `must be >= ${min}`);
    return null;
  }
  if (n > max) {
    invalid(name, argv.text(i), limitNo, `must be <= ${max}`);
    return null;
  }
  return n;
}

/** The COST a single-algorithm command asked for (set by parseLimit). */
let parsedCost = 1;
/** The REFUND a single-algorithm command asked for, 0 when none (set by parseLimit). */
let parsedRefund = 0;

/**
 * Parses `limit period_ms [BURST n] [COST n | REFUND n]` at argv[i..] into `l`; returns the index
 * after them, or −1 with parseError. Each option may come once, and COST and REFUND exclude each
 * other: a repeated or second one is a syntax error. For RL.ALL
 * (`costAllowed` false) it stops at the first argument that is not `BURST`: the next limit's key,
 * or the trailing COST; a second `BURST` is a syntax error there too, never the next limit's key.
 */
function parseLimit(argv: CommandArgs, i: number, l: Limit, limitNo: number, costAllowed: boolean): number {
  const algo = l.algo;
  const limitIndex = i;
  const limit = integerArg(argv, i, 'limit', limitNo, 1, algo.maxLimit);
  if (limit === null) return -1;
  const periodMs = integerArg(argv, i + 1, 'period_ms', limitNo, 1, MAX_PERIOD_MS);
  if (periodMs === null) return -1;
  let burst = limit;
  let burstIndex = -1;
  let costSeen = false;
  i += 2;
  while (i < argv.length) {
    if (isKeyword(argv, i, KEYWORD_BURST)) {
      if (!algo.acceptsBurst || burstIndex !== -1 || i + 1 >= argv.length) return fail(SYNTAX_ERROR);
      const b = integerArg(argv, i + 1, 'BURST', limitNo, 1, MAX_SCALED);
      if (b === null) return -1;
      burst = b;
      burstIndex = i + 1;
      i += 2;
    } else if (costAllowed && isKeyword(argv, i, KEYWORD_COST)) {
      if (costSeen || i + 1 >= argv.length) return fail(SYNTAX_ERROR);
      const c = integerArg(argv, i + 1, 'COST', limitNo, 0, Number.MAX_SAFE_INTEGER);
      if (c === null) return -1;
      parsedCost = c;
      costSeen = true;
      i += 2;
    } else if (costAllowed && isKeyword(argv, i, KEYWORD_REFUND)) {
      if (costSeen || i + 1 >= argv.length) return fail(SYNTAX_ERROR);
      const n = integerArg(argv, i + 1, 'REFUND', limitNo, 1, Number.MAX_SAFE_INTEGER);
      if (n === null) return -1;
      parsedRefund = n;
      costSeen = true;
      i += 2;
    } else if (costAllowed) {
      return fail(SYNTAX_ERROR);
    } else {
      break; // RL.ALL: the next limit, or the trailing COST
    }
  }
  // Products the integer arithmetic needs below 2^52 (see src/limiters/rate-decision.ts), and RL.GCRA's
  // intervals.
  switch (algo.checkParams(limit, periodMs, burst, l.gcra)) {
    case ParamsProblem.None:
      break;
    case ParamsProblem.BurstProduct:
      return invalid(burstIndex === -1 ? 'limit' : 'BURST', argv.text(burstIndex === -1 ? limitIndex : burstIndex), limitNo, `BURST x period_ms must be <= ${MAX_SCALED} (BURST defaults to limit)`);
    case ParamsProblem.LimitProduct:
      return fail(`ERR invalid limit/period_ms${where(limitNo)}: limit x period_ms must be <= ${MAX_SCALED}`);
    case ParamsProblem.ZeroInterval:
      return fail(`ERR invalid limit${where(limitNo)}: more than 10^9 per second (the emission interval would be 0 ns)`);
    case ParamsProblem.ToleranceOverflow:
      return fail(`ERR invalid BURST/period_ms${where(limitNo)}: the burst tolerance (period_ms / limit * BURST) exceeds 100 years`);
  }
  l.limit = limit;
  l.periodMs = periodMs;
  l.burst = burst;
  return i;
}

/** Finds the key's slot; false after a WRONGTYPE reply. */
function lookupLimit(ctx: CommandContext, argv: CommandArgs, l: Limit): boolean {
  const ks = ctx.keyspace;
  const slot = lookupKeyArg(ks, argv, l.keyArg, ctx.nowMs);
  if (slot !== -1 && ks.typeOf(slot) !== l.algo.type) {
    ctx.reply.error(WRONGTYPE);
    return false;
  }
  l.slot = slot;
  return true;
}

/** Asks the limiter; writes nothing. */
function decide(ks: Keyspace, l: Limit, cost: number, nowMs: number, nowUs: number): void {
  const slot = l.slot;
  const algo = l.algo;
  if (slot === -1) {
    algo.decide(l, cost, false, 0, 0, 0, undefined, nowMs, nowUs, l.decision);
    return;
  }
  // C and the blob are read only for an algorithm that uses them (a measurable read, a Map lookup).
  algo.decide(l, cost, true, ks.getA(slot), ks.getB(slot), algo.readsC ? ks.getC(slot) : 0, algo.hasBlob ? ks.getBlob(slot) : undefined, nowMs, nowUs, l.decision);
}

/** Stores what `decide` allowed (call only when `decision.write`). */
function commit(ks: Keyspace, argv: CommandArgs, l: Limit, cost: number, nowMs: number): void {
  const d = l.decision;
  const algo = l.algo;
  let slot = l.slot;
  const has = slot !== -1;
  if (algo.hasBlob) {
    algo.commit(l, cost, has, has ? ks.getA(slot) : 0, has ? ks.getB(slot) : 0, has ? ks.getC(slot) : 0,
      has ? ks.getBlob(slot) : undefined, nowMs, 0, d);
    if (!has) slot = createKeyArg(ks, argv, l.keyArg, algo.type);
    ks.setBlob(slot, d.blob);
  } else if (!has) {
    slot = createKeyArg(ks, argv, l.keyArg, algo.type);
  }
  ks.setState(slot, d.a, d.b, d.c);
  ks.setExpireAtMs(slot, d.expireAtMs);
  l.slot = slot;
}

/**
 * `REFUND n`: gives n units back to the key (docs/algorithms.md, "Refunds"), through the same
 * keyspace writes a decision uses (or a delete, when the key is fresh again), then decides a COST 0
 * peek on the new state into `l.decision`: the reply is the state after the refund. An absent key
 * stays absent.
 */
function refund(ctx: CommandContext, argv: CommandArgs, l: Limit, units: number): void {
  const ks = ctx.keyspace;
  const slot = l.slot;
  const algo = l.algo;
  const has = slot !== -1;
  const d = l.decision;
  const effect = algo.refund(l, units, has, has ? ks.getA(slot) : 0, has ? ks.getB(slot) : 0, has ? ks.getC(slot) : 0,
    has && algo.hasBlob ? ks.getBlob(slot) : undefined, ctx.nowMs, ctx.nowUs, d);
  if (effect === RefundEffect.Write) {
    if (algo.hasBlob) ks.setBlob(slot, d.blob);
    ks.setState(slot, d.a, d.b, d.c);
    ks.setExpireAtMs(slot, d.expireAtMs);
  } else if (effect === RefundEffect.Delete) {
    ks.deleteKey(argv.source(l.keyArg), argv.start(l.keyArg), argv.end(l.keyArg), ctx.nowMs);
    l.slot = -1;
  }
  decide(ks, l, 0, ctx.nowMs, ctx.nowUs);
}

function replySix(ctx: CommandContext, d: RateDecision): void {
  writeSix(ctx.reply, d.limited ? 1 : 0, d.limit, d.remaining, d.retryAfterMs, d.resetAfterMs, d.delayMs);
}

const rlAllCounter = new LimiterCounter('rl.all');

/** The handler of `RL.<algo>`. */
function single(algo: Algorithm): (ctx: CommandContext, argv: CommandArgs) => void {
  const counter = new LimiterCounter(`rl.${algo.name.toLowerCase()}`);
  const handler = (ctx: CommandContext, argv: CommandArgs): void => {
    const l = limits[0];
    l.algo = algo;
    parsedCost = 1;
    parsedRefund = 0;
    if (parseLimit(argv, 2, l, 0, true) === -1) {
      ctx.reply.error(parseError);
      return;
    }
    const cost = parsedCost;
    const refundUnits = parsedRefund;
    l.keyArg = 1;
    if (ctx.backend !== null) {
      // A refund is never answered from (nor stored in) the refusal cache: it makes refusals false.
      runOnBackend(ctx, argv, ctx.backend, {
        limits: [scriptLimit(l, cost, refundUnits)], keyArgs: [1], allOrNothing: false, cost,
        signature: refundUnits === 0 ? `${algo.name} ${l.limit} ${l.periodMs} ${l.burst}` : '', local: handler,
        counter: refundUnits === 0 ? counter : null,
        resetsRefusals: refundUnits !== 0,
      });
      return;
    }
    if (!lookupLimit(ctx, argv, l)) return;
    const ks = ctx.keyspace;
    if (refundUnits !== 0) {
      // Not a decision: the limiter counters (INFO limiter, metrics) count decisions only.
      refund(ctx, argv, l, refundUnits);
      replySix(ctx, l.decision);
      return;
    }
    decide(ks, l, cost, ctx.nowMs, ctx.nowUs);
    if (l.decision.write) commit(ks, argv, l, cost, ctx.nowMs);
    counter.count(ctx.server.stats, l.decision.limited);
    replySix(ctx, l.decision);
  };
  return handler;
}

/** A parsed limit as the backend's script takes it (a copy: the call outlives this turn). */
function scriptLimit(l: Limit, cost: number, refundUnits = 0): ScriptLimit {
  return { kind: 'rl', type: l.algo.type, limit: l.limit, periodMs: l.periodMs, burst: l.burst, gcra: { ...l.gcra }, cost, refund: refundUnits };
}

/** RL.ALL's ALGO values, for its error: `A, B or C`. */
const ALGO_LIST = `${ALGORITHMS.slice(0, -1).map((a) => a.name).join(', ')} or ${ALGORITHMS[ALGORITHMS.length - 1].name}`;
/** At most this many limits in one RL.ALL. */
export const MAX_LIMITS = 64;

/**
 * RL.ALL's keys so far, as limit numbers sorted by (byte length, bytes): each new key is placed by
 * binary search, so finding a duplicate takes O(n log n) byte comparisons in all, each one memcmp on
 * the received bytes (keys can be up to proto-max-bulk-len long: no pairwise scan, no strings).
 */
const sortedKeys = new Int32Array(MAX_LIMITS);

/** Orders the keys of limits `m` and `n` (negative, 0 or positive). */
function compareKeys(argv: CommandArgs, m: number, n: number): number {
  const i = limits[m].keyArg;
  const j = limits[n].keyArg;
  const lengths = argv.byteLength(i) - argv.byteLength(j);
  if (lengths !== 0) return lengths;
  return argv.source(i).compare(argv.source(j), argv.start(j), argv.end(j), argv.start(i), argv.end(i));
}

/** Adds limit `n`'s key to sortedKeys (which holds limits 0..n−1); false if it is already there. */
function insertKey(argv: CommandArgs, n: number): boolean {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const order = compareKeys(argv, sortedKeys[mid], n);
    if (order === 0) return false;
    if (order < 0) lo = mid + 1;
    else hi = mid;
  }
  sortedKeys.copyWithin(lo + 1, lo, n);
  sortedKeys[lo] = n;
  return true;
}

/** RL.ALL's trailing COST, set by parseAll. */
let allCost = 1;

/**
 * Parses RL.ALL's arguments (its name at argument `base`: 0, or 3 for ACL DRYRUN) into `limits`
 * and allCost; returns the number of limits, or −1 with parseError. The only walk of RL.ALL's
 * arguments: the command spends the keys it finds here, and the ACL checks exactly these
 * (forEachKey), so no argument vector can show the ACL other keys than those spent.
 */
function parseAll(argv: CommandArgs, base: number): number {
  const count = integerArg(argv, base + 1, 'numlimits', 0, 1, MAX_LIMITS);
  if (count === null) return -1;
  while (limits.length < count) limits.push(newLimit());
  let i = base + 2;
  for (let n = 0; n < count; n++) {
    if (i + 4 > argv.length) return fail(`ERR wrong number of arguments for 'rl.all' command: limit ${n + 1} of ${count} needs key ALGO limit period_ms`);
    const l = limits[n];
    const algo = algoAt(argv, i + 1);
    if (algo === undefined) return invalid('ALGO', argv.text(i + 1), n + 1, `expected ${ALGO_LIST}`);
    l.algo = algo;
    l.keyArg = i;
    if (!insertKey(argv, n)) return fail(`ERR duplicate key '${argv.text(i)}'${where(n + 1)}: each limit needs its own key`);
    i = parseLimit(argv, i + 2, l, n + 1, false);
    if (i === -1) return -1;
  }
  allCost = 1;
  if (i < argv.length) {
    if (!isKeyword(argv, i, KEYWORD_COST) || i + 2 !== argv.length) return fail(SYNTAX_ERROR);
    const c = integerArg(argv, i + 1, 'COST', 0, 0, Number.MAX_SAFE_INTEGER);
    if (c === null) return -1;
    allCost = c;
  }
  return count;
}

function rlAll(ctx: CommandContext, argv: CommandArgs): void {
  const count = parseAll(argv, 0);
  if (count === -1) {
    ctx.reply.error(parseError);
    return;
  }
  const cost = allCost;
  if (ctx.backend !== null) {
    const all: ScriptLimit[] = [];
    const keyArgs: number[] = [];
    for (let n = 0; n < count; n++) {
      all.push(scriptLimit(limits[n], cost));
      keyArgs.push(limits[n].keyArg);
    }
    runOnBackend(ctx, argv, ctx.backend, { limits: all, keyArgs, allOrNothing: true, cost, signature: '', local: rlAll, counter: rlAllCounter });
    return;
  }
  for (let n = 0; n < count; n++) if (!lookupLimit(ctx, argv, limits[n])) return;
  const ks = ctx.keyspace;
  let limited = false;
  for (let n = 0; n < count; n++) {
    decide(ks, limits[n], cost, ctx.nowMs, ctx.nowUs);
    if (limits[n].decision.limited) limited = true;
  }
  if (!limited) {
    for (let n = 0; n < count; n++) if (limits[n].decision.write) commit(ks, argv, limits[n], cost, ctx.nowMs);
  }
  rlAllCounter.count(ctx.server.stats, limited);
  const r = ctx.reply;
  r.arrayHeader(count + 1);
  r.integer(limited ? 1 : 0);
  for (let n = 0; n < count; n++) replySix(ctx, limits[n].decision);
}

function argDocs(algo: Algorithm): ArgDoc[] {
  return [
    { name: 'key', type: 'key' },
    { name: 'limit', type: 'integer' },
    { name: 'period_ms', type: 'integer' },
    ...(algo.acceptsBurst ? [{ name: 'burst', type: 'integer', token: 'BURST', optional: true } as ArgDoc] : []),
    {
      name: 'spend', type: 'oneof', optional: true, arguments: [
        { name: 'cost', type: 'integer', token: 'COST' },
        { name: 'refund', type: 'integer', token: 'REFUND' },
      ],
    },
  ];
}

const REPLY = ' Reply: [limited, limit, remaining, retry_after_ms, reset_after_ms, delay_ms].';

export const rateLimitCommands: CommandSpec[] = [
  ...ALGORITHMS.map((algo): CommandSpec => ({
    name: `rl.${algo.name.toLowerCase()}`, arity: -4, flags: ['write', 'denyoom', 'fast'], ...firstKeyOnly(),
    group: 'limiter', since: '0.2.0', complexity: algo.complexity,
    summary: algo.summary + REPLY,
    args: argDocs(algo),
    run: single(algo),
  })),
  {
    // Keys sit at varying positions (key ALGO limit period_ms [BURST n]): COMMAND INFO reports
    // the first one, like Redis does for commands whose key positions are not fixed.
    name: 'rl.all', arity: -6, flags: ['write', 'denyoom'], firstKey: 2, lastKey: 2, keyStep: 1,
    group: 'limiter', since: '0.2.0', complexity: 'O(numlimits log numlimits)',
    summary: 'Checks several limits together and spends on all only if every one allows. Reply: [limited, reply of limit 1, ...].',
    args: [
      { name: 'numlimits', type: 'integer' },
      {
        name: 'limit', type: 'block', multiple: true, arguments: [
          { name: 'key', type: 'key' },
          { name: 'algo', type: 'string' },
          { name: 'limit', type: 'integer' },
          { name: 'period_ms', type: 'integer' },
          { name: 'burst', type: 'integer', token: 'BURST', optional: true },
        ],
      },
      { name: 'cost', type: 'integer', token: 'COST', optional: true },
    ],
    run: rlAll,
    // For ACL key patterns: the keys parseAll finds, the ones rlAll spends; none when the
    // arguments do not parse (the command then spends nothing either).
    forEachKey: (argv, base, visit) => {
      const count = parseAll(argv, base);
      for (let n = 0; n < count; n++) if (!visit(limits[n].keyArg)) return;
    },
  },
];
