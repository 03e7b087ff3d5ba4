/**
 * CL.THROTTLE (redis-cell 0.5) and GCRA (Redis 8.8): their arguments parsed into a call for the
 * limiter store (src/store/store.ts). Both keep one TAT per key and share it: TYPE answers `gcra`
 * for either (the state is described in src/store/local-limiter.ts).
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { cellParams, MAX_BURST, MAX_PERIOD_SEC, MAX_TOLERANCE_US, type CellParams } from '../limiters/cell-throttle.js';
import { gcraParams } from '../limiters/redis-gcra.js';
import { firstKeyOnly, type CommandContext, type CommandSpec } from './types.js';
import { LimiterCounter } from '../server/stats.js';
import { newLimiterCall } from '../store/limiter-call.js';
import { GCRA_OVERFLOW } from '../store/limiter-replies.js';

/** The calls handed to the store: one record per command, refilled by every call. */
const clThrottleCall = newLimiterCall('cl.throttle', []);
const gcraCall = newLimiterCall('gcra', []);

// Range rules, made once (they are passed on every call).
const BURST_RULE = `must be <= ${MAX_BURST}`;
const CAPACITY_RULE = `must be <= ${MAX_BURST + 1}`;
const PERIOD_RULE = `must be <= ${MAX_PERIOD_SEC} seconds`;

/**
 * The parameters derived last, and for which arguments: callers mostly repeat the same limits, and
 * deriving them costs a division and an object.
 */
let memoBurst = -1;
let memoCount = -1;
let memoPeriod = -1;
let memoParams: ReturnType<typeof cellParams> = 'out-of-range';

function memoCellParams(maxBurst: number, count: number, period: number): ReturnType<typeof cellParams> {
  if (maxBurst !== memoBurst || count !== memoCount || period !== memoPeriod) {
    memoParams = cellParams(maxBurst, count, period);
    memoBurst = maxBurst;
    memoCount = count;
    memoPeriod = period;
  }
  return memoParams;
}

/**
 * Parses a redis-cell integer argument; writes a clear error naming it when it is not an integer,
 * below `min` (`belowRule` says so in words) or above `max` (`aboveRule`).
 */
function cellInteger(ctx: CommandContext, argv: CommandArgs, i: number, name: string, min: number, belowRule: string, max = Infinity, aboveRule = ''): number | null {
  const n = argv.rustI64(i);
  if (n === null) {
    ctx.reply.error(`ERR invalid ${name} '${argv.text(i)}': not an integer`);
    return null;
  }
  if (n < min || n > max) {
    ctx.reply.error(`ERR invalid ${name} '${argv.text(i)}': ${n < min ? belowRule : aboveRule}`);
    return null;
  }
  return n;
}

/**
 * The arguments after the key of the last valid CL.THROTTLE (as received) and what they parsed to.
 * Callers repeat one limit for many keys, so most calls compare ~25 bytes here instead of parsing
 * four integers and checking the limit again.
 */
let lastLimitBytes: Buffer | null = null;
let lastLimitArgc = 0;
let lastParams: CellParams | null = null;
let lastQuantity = 1;

function clThrottle(ctx: CommandContext, argv: CommandArgs): void {
  let params: CellParams;
  let quantity: number;
  if (lastParams !== null && lastLimitBytes !== null && argv.length === lastLimitArgc && argv.restEquals(2, lastLimitBytes)) {
    params = lastParams;
    quantity = lastQuantity;
  } else {
    if (!parseClThrottle(ctx, argv)) return;
    params = lastParams!;
    quantity = lastQuantity;
    lastLimitArgc = argv.length;
    lastLimitBytes = argv.restBytes(2);
  }
  const call = clThrottleCall;
  call.argv = argv;
  call.cell = params;
  call.cost = quantity;
  call.counter = clThrottleCounter;
  ctx.limiter.decide(call, ctx);
}

/** Parses CL.THROTTLE's numbers into lastParams/lastQuantity; false after an error reply (they stay). */
function parseClThrottle(ctx: CommandContext, argv: CommandArgs): boolean {
  let maxBurst: number | null;
  let count: number | null;
  let period: number | null;
  let quantity: number | null = 1;
  const shortForm = argv.length === 4;
  // Names as the caller wrote them: the short form's second number is a rate per second.
  const countName = shortForm ? 'rate_per_second' : 'count_per_period';
  // i64 is the widest redis-cell parses; beyond MAX_BURST / MAX_PERIOD_SEC redis-cell wraps (limit,
  // period in ns) where cellgate refuses, and a count above 2^53 is rounded as redis-cell's f64 does.
  if (shortForm) {
    // Short form: CL.THROTTLE key capacity rate_per_second.
    const capacity = cellInteger(ctx, argv, 2, 'capacity', 1, 'must be >= 1', MAX_BURST + 1, CAPACITY_RULE);
    if (capacity === null) return false;
    maxBurst = capacity - 1;
    count = cellInteger(ctx, argv, 3, countName, 1, 'must be >= 1');
    period = 1;
  } else {
    maxBurst = cellInteger(ctx, argv, 2, 'max_burst', 0, 'must be >= 0', MAX_BURST, BURST_RULE);
    if (maxBurst === null) return false;
    count = cellInteger(ctx, argv, 3, countName, 1, 'must be >= 1');
    if (count === null) return false;
    period = cellInteger(ctx, argv, 4, 'period', 1, 'must be >= 1 second', MAX_PERIOD_SEC, PERIOD_RULE);
    if (period === null) return false;
    if (argv.length === 6) quantity = cellInteger(ctx, argv, 5, 'quantity', 0, 'must be >= 0');
  }
  if (count === null || quantity === null) return false;
  const params = memoCellParams(maxBurst, count, period);
  if (params === 'zero-interval') {
    // redis-cell: "Zero rates are not supported" (T = trunc(period·1e9/count) is 0 ns).
    ctx.reply.error(`ERR invalid ${countName} '${argv.text(3)}': more than 10^9 per second (the emission interval would be 0 ns)`);
    return false;
  }
  if (typeof params === 'string') {
    // 'tolerance-overflow' ('out-of-range' was ruled out above, argument by argument). ASCII only:
    // error text goes out byte for byte (latin1), and a '×' would not be valid UTF-8.
    ctx.reply.error(`ERR invalid max_burst/period: the burst tolerance (period / count_per_period * (max_burst + 1)) exceeds ${MAX_TOLERANCE_US / (365 * 86400 * 1e6)} years`);
    return false;
  }
  lastParams = params;
  lastQuantity = quantity;
  return true;
}

const clThrottleCounter = new LimiterCounter('cl.throttle');
const gcraCounter = new LimiterCounter('gcra');

/**
 * Redis's getRangeLongFromObjectOrReply(c, o, 1, LONG_MAX, ..., NULL). A value above 2^53 comes back
 * as an exact bigint (GCRA's arithmetic needs it exactly; a number would be rounded).
 */
function positiveLong(ctx: CommandContext, argv: CommandArgs, i: number): number | bigint | null {
  const n = argv.redisInteger(i);
  if (n === null) {
    ctx.reply.error('ERR value is not an integer or out of range');
    return null;
  }
  if (n < 1) {
    ctx.reply.error('ERR value is out of range, value must between 1 and 9223372036854775807');
    return null;
  }
  return n > Number.MAX_SAFE_INTEGER ? BigInt(argv.text(i)) : n;
}

function gcra(ctx: CommandContext, argv: CommandArgs): void {
  const r = ctx.reply;
  const burstArg = argv.redisInteger(2);
  if (burstArg === null || burstArg < 0) {
    r.error('ERR value is out of range, must be positive');
    return;
  }
  const maxBurst = burstArg > Number.MAX_SAFE_INTEGER ? BigInt(argv.text(2)) : burstArg;
  const tokensPerPeriod = positiveLong(ctx, argv, 3);
  if (tokensPerPeriod === null) return;
  const period = argv.redisDouble(4);
  if (period === null) {
    r.error('ERR value is not a valid float');
    return;
  }
  if (!(period > 0 && period < 1e12)) {
    r.error('ERR period must be > 0 and < 1e12');
    return;
  }
  let tokens: number | bigint = 1;
  if (argv.length >= 6) {
    if (argv.lower(5) !== 'tokens') {
      r.error('ERR syntax error');
      return;
    }
    if (argv.length === 6) {
      r.error('ERR Missing TOKENS value');
      return;
    }
    const t = positiveLong(ctx, argv, 6);
    if (t === null) return;
    tokens = t;
  }
  const call = gcraCall;
  call.argv = argv;
  call.counter = gcraCounter;
  // C divides by the long converted to double: the nearest double, as Number() gives.
  const params = gcraParams(maxBurst, Number(tokensPerPeriod), period, tokens);
  if (params === 'tokens-overflow' || params === 'burst-overflow') {
    // Answered after the key's lookup: a key of another type answers WRONGTYPE first.
    call.gcra = null;
    call.lateError = `${GCRA_OVERFLOW} ${params === 'tokens-overflow' ? 'TOKENS' : 'max_burst'} would cause an overflow`;
  } else {
    call.gcra = params;
    call.lateError = '';
  }
  ctx.limiter.decide(call, ctx);
}

export const throttleCommands: CommandSpec[] = [
  {
    name: 'cl.throttle', arity: -4, maxArity: 6, flags: ['write', 'denyoom', 'fast'], ...firstKeyOnly(),
    group: 'limiter', since: '0.1.0', complexity: 'O(1)',
    summary: 'Rate-limits a key with GCRA, redis-cell compatible: [limited, limit, remaining, retry_after, reset_after].',
    args: [
      { name: 'key', type: 'key' },
      { name: 'max_burst', type: 'integer' },
      { name: 'count_per_period', type: 'integer' },
      { name: 'period', type: 'integer', optional: true },
      { name: 'quantity', type: 'integer', optional: true },
    ],
    run: clThrottle,
  },
  {
    name: 'gcra', arity: -5, maxArity: 7, flags: ['write', 'denyoom', 'fast'], aclExtra: ['string', 'limiter'], ...firstKeyOnly(),
    // Group, summary and argument names as Redis's src/commands/gcra.json.
    group: 'rate_limit', since: '8.8.0', complexity: 'O(1)',
    summary: 'Rate limit via GCRA (Generic Cell Rate Algorithm).',
    args: [
      { name: 'key', type: 'key' },
      { name: 'max-burst', type: 'integer' },
      { name: 'tokens-per-period', type: 'integer' },
      { name: 'period', type: 'double' },
      { name: 'count', type: 'integer', token: 'TOKENS', optional: true },
    ],
    run: gcra,
  },
];
