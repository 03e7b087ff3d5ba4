/**
 * The `RL.*` family (docs/algorithms.md): one command per algorithm, `RL.<ALGO> key limit period_ms
 * [BURST n] [COST n [FORCE] | REFUND n]` (REFUND gives n spent units back; FORCE records the cost
 * even beyond the limit, as debt: usage charged after the fact), and `RL.ALL`, several limits
 * checked and spent all-or-nothing.
 *
 * Each call parses every argument first (an error leaves every key untouched), then hands the call
 * to the limiter store (src/store/store.ts), which looks its key up (WRONGTYPE for a key of another
 * algorithm), asks the pure limiter for a decision, stores the new state only when the limiter says
 * so (an allowed call with COST ≥ 1), and replies `limited, limit, remaining, retry_after_ms,
 * reset_after_ms, delay_ms`: six integers in RESP2, a map with those keys in RESP3.
 *
 * RL.ALL replies an array: the overall limited flag (0/1), then one such 6-field reply per limit, in
 * the order given, each as if that limit alone had been asked. A trailing `COST n` applies to every
 * limit. Nothing is spent anywhere unless every limit allows.
 *
 * `RL.BLOCK key ms` makes the key refused by every limiter command for ms milliseconds (a key type
 * of its own: src/limiters/block.ts); it goes to the key store, as DEL does.
 *
 * State per key type (fields A/B/C of the keyspace, plus a blob for an algorithm that keeps one) is
 * documented in each limiter module; each module's entry (src/limiters/registry.ts) decides over it,
 * and the local steps around it are in src/store/local-limiter.ts.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { ParamsProblem, type Algorithm } from '../limiters/algorithm.js';
import { MAX_SCALED } from '../limiters/rate-decision.js';
import { ALGORITHMS } from '../limiters/registry.js';
import { newLimit, newLimiterCall, type Limit } from '../store/limiter-call.js';
import { firstKeyOnly, type ArgDoc, type CommandContext, type CommandSpec } from './types.js';
import { LimiterCounter } from '../server/stats.js';

/** The longest period accepted: 10^12 ms, about 31.7 years. */
export const MAX_PERIOD_MS = 1e12;

/** Limits of the current call: index 0 serves the single-algorithm commands. */
const limits: Limit[] = [newLimit(ALGORITHMS[0])];
/** The call handed to the store: one record, refilled by every call. */
const call = newLimiterCall('rl', limits);

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
const KEYWORD_FORCE = Buffer.from('force');
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
/** Whether a single-algorithm command said FORCE (set by parseLimit). */
let parsedForce = false;

/**
 * Parses `limit period_ms [BURST n] [COST n | REFUND n] [FORCE]` at argv[i..] into `l`; returns the
 * index after them, or −1 with parseError. Each option may come once, COST and REFUND exclude each
 * other, and FORCE goes with a cost (COST n, or the default 1), never with REFUND: a repeated or
 * excluded one is a syntax error. For RL.ALL
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
    } else if (costAllowed && isKeyword(argv, i, KEYWORD_FORCE)) {
      if (parsedForce || parsedRefund !== 0) return fail(SYNTAX_ERROR);
      parsedForce = true;
      i += 1;
    } else if (costAllowed && isKeyword(argv, i, KEYWORD_REFUND)) {
      if (costSeen || parsedForce || i + 1 >= argv.length) return fail(SYNTAX_ERROR);
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

const rlAllCounter = new LimiterCounter('rl.all');

/** The handler of `RL.<algo>`. */
function single(algo: Algorithm): (ctx: CommandContext, argv: CommandArgs) => void {
  const counter = new LimiterCounter(`rl.${algo.name.toLowerCase()}`);
  return (ctx: CommandContext, argv: CommandArgs): void => {
    const l = limits[0];
    l.algo = algo;
    parsedCost = 1;
    parsedRefund = 0;
    parsedForce = false;
    if (parseLimit(argv, 2, l, 0, true) === -1) {
      ctx.reply.error(parseError);
      return;
    }
    l.force = parsedForce;
    l.keyArg = 1;
    call.argv = argv;
    call.count = 1;
    call.allOrNothing = false;
    call.cost = parsedCost;
    call.refund = parsedRefund;
    // Not a decision: the limiter counters (INFO limiter, metrics) count decisions only.
    call.counter = parsedRefund === 0 ? counter : null;
    ctx.limiter.decide(call, ctx);
  };
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
  while (limits.length < count) limits.push(newLimit(ALGORITHMS[0]));
  let i = base + 2;
  for (let n = 0; n < count; n++) {
    if (i + 4 > argv.length) return fail(`ERR wrong number of arguments for 'rl.all' command: limit ${n + 1} of ${count} needs key ALGO limit period_ms`);
    const l = limits[n];
    // RL.ALL is all or nothing: never forced (limits[0] may hold a single command's FORCE).
    l.force = false;
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
  call.argv = argv;
  call.count = count;
  call.allOrNothing = true;
  call.cost = allCost;
  call.refund = 0;
  call.counter = rlAllCounter;
  ctx.limiter.decide(call, ctx);
}

/**
 * `RL.BLOCK key ms`: the key is refused by every limiter for `ms` milliseconds (an integer in
 * [1, 10^12], as a period), then fresh: it becomes a block (src/limiters/block.ts), whatever it held.
 * Replies OK, as SET does: like SET, it always replaces the key.
 */
function block(ctx: CommandContext, argv: CommandArgs): void {
  const ms = integerArg(argv, 2, 'ms', 0, 1, MAX_PERIOD_MS);
  if (ms === null) {
    ctx.reply.error(parseError);
    return;
  }
  ctx.keys.block(ctx, argv, ms);
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
    { name: 'force', type: 'pure-token', token: 'FORCE', optional: true },
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
  {
    // It writes the key without reading it (OW): an ACL user needs only write access to the key.
    name: 'rl.block', arity: 3, flags: ['write', 'denyoom', 'fast'], keyFlags: ['OW', 'update'], ...firstKeyOnly(),
    group: 'limiter', since: '0.2.0', complexity: 'O(1)',
    summary: 'Refuses every limiter call on a key for ms milliseconds, whatever it held; then the key is fresh. Reply: OK.',
    args: [{ name: 'key', type: 'key' }, { name: 'ms', type: 'integer' }],
    run: block,
  },
];
