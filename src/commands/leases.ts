/**
 * Concurrency limits (docs/concurrency.md): leases that bound what is in flight.
 *
 *     RL.ACQUIRE key limit lease_ms [ID id] [WAIT timeout_ms]
 *     RL.RELEASE key id
 *     RL.RENEW key id lease_ms
 *
 * Each call parses every argument first (an error leaves the key untouched), then hands the call to
 * the lease store (src/store/lease-store.ts: this process's keyspace or the shared backend). An
 * ACQUIRE with WAIT outside a transaction blocks the connection until it is granted or its timeout
 * passes (src/server/lease-waiters.ts); inside MULTI it answers at once, as Redis runs BLPOP in a
 * transaction. An ACQUIRE that does not wait lets the key's waiters go first.
 */
import type { CommandArgs } from '../protocol/command-args.js';
import { MAX_LEASE_ID_BYTES, MAX_LEASE_LIMIT, MAX_LEASE_MS, MAX_WAIT_MS } from '../limiters/lease-limits.js';
import { newLeaseCall, type LeaseCall } from '../store/lease-call.js';
import { LimiterCounter } from '../server/stats.js';
import { firstKeyOnly, type CommandContext, type CommandSpec } from './types.js';

const acquireCall = newLeaseCall('acquire');
const releaseCall = newLeaseCall('release');
const renewCall = newLeaseCall('renew');
const acquireCounter = new LimiterCounter('rl.acquire');

const SYNTAX_ERROR = 'ERR syntax error';
const KEYWORD_ID = Buffer.from('id');
const KEYWORD_WAIT = Buffer.from('wait');
const ID_ERROR = `ERR invalid id: must be 1 to ${MAX_LEASE_ID_BYTES} bytes`;

/** The error of the last failed parse (the parsers never reply). */
let parseError = '';

function isKeyword(argv: CommandArgs, i: number, word: Uint8Array): boolean {
  const start = argv.start(i);
  if (argv.end(i) - start !== word.length) return false;
  const buf = argv.source(i);
  for (let k = 0; k < word.length; k++) if ((buf[start + k] | 0x20) !== word[k]) return false;
  return true;
}

/** An integer argument in [min, max], or null with parseError naming it. */
function integerArg(argv: CommandArgs, i: number, name: string, min: number, max: number): number | null {
  const n = argv.redisInteger(i);
  let rule = '';
  if (n === null) rule = 'not an integer';
  else if (n < min) rule = `must be >= ${min}`;
  else if (n > max) rule = `must be <= ${max}`;
  else return n;
  parseError = `ERR invalid ${name} '${argv.text(i)}': ${rule}`;
  return null;
}

function validId(argv: CommandArgs, i: number): boolean {
  const n = argv.byteLength(i);
  if (n >= 1 && n <= MAX_LEASE_ID_BYTES) return true;
  parseError = ID_ERROR;
  return false;
}

/** Parses RL.ACQUIRE's arguments into acquireCall; false with parseError. */
function parseAcquire(argv: CommandArgs, call: LeaseCall): boolean {
  const limit = integerArg(argv, 2, 'limit', 1, MAX_LEASE_LIMIT);
  if (limit === null) return false;
  const leaseMs = integerArg(argv, 3, 'lease_ms', 1, MAX_LEASE_MS);
  if (leaseMs === null) return false;
  call.limit = limit;
  call.leaseMs = leaseMs;
  call.idArg = -1;
  call.waitMs = -1;
  for (let i = 4; i < argv.length; i += 2) {
    if (i + 1 >= argv.length) {
      parseError = SYNTAX_ERROR;
      return false;
    }
    if (isKeyword(argv, i, KEYWORD_ID) && call.idArg === -1) {
      if (!validId(argv, i + 1)) return false;
      call.idArg = i + 1;
    } else if (isKeyword(argv, i, KEYWORD_WAIT) && call.waitMs === -1) {
      const ms = integerArg(argv, i + 1, 'WAIT timeout_ms', 0, MAX_WAIT_MS);
      if (ms === null) return false;
      call.waitMs = ms;
    } else {
      parseError = SYNTAX_ERROR;
      return false;
    }
  }
  return true;
}

function acquire(ctx: CommandContext, argv: CommandArgs): void {
  const call = acquireCall;
  if (!parseAcquire(argv, call)) {
    ctx.reply.error(parseError);
    return;
  }
  call.argv = argv;
  call.counter = acquireCounter;
  const waiters = ctx.server.leaseWaiters;
  if (call.waitMs !== -1 && ctx.client.multi === null) {
    waiters.wait(ctx.client, call, ctx.nowMs);
    return;
  }
  // First come first served: the key's waiters take what is free before this call does.
  if (waiters.waiting > 0) waiters.serveKey(argv.buffer(1));
  ctx.leases.acquire(call, ctx);
}

function release(ctx: CommandContext, argv: CommandArgs): void {
  if (!validId(argv, 2)) {
    ctx.reply.error(parseError);
    return;
  }
  const call = releaseCall;
  call.argv = argv;
  call.idArg = 2;
  ctx.leases.release(call, ctx);
}

function renew(ctx: CommandContext, argv: CommandArgs): void {
  if (!validId(argv, 2)) {
    ctx.reply.error(parseError);
    return;
  }
  const leaseMs = integerArg(argv, 3, 'lease_ms', 1, MAX_LEASE_MS);
  if (leaseMs === null) {
    ctx.reply.error(parseError);
    return;
  }
  const call = renewCall;
  call.argv = argv;
  call.idArg = 2;
  call.leaseMs = leaseMs;
  ctx.leases.renew(call, ctx);
}

export const leaseCommands: CommandSpec[] = [
  {
    name: 'rl.acquire', arity: -4, maxArity: 8, flags: ['write', 'denyoom', 'fast', 'blocking'], ...firstKeyOnly(),
    group: 'limiter', since: '0.2.0', complexity: 'O(1) usually; O(N) with ID, N the live leases of the key',
    summary: `Takes one of limit slots for lease_ms ms (limit <= ${MAX_LEASE_LIMIT}), or with WAIT waits up to timeout_ms for one (0: no end). ` +
      'Reply: [limited, limit, remaining, retry_after_ms, reset_after_ms, delay_ms, id].',
    args: [
      { name: 'key', type: 'key' },
      { name: 'limit', type: 'integer' },
      { name: 'lease_ms', type: 'integer' },
      { name: 'id', type: 'string', token: 'ID', optional: true },
      { name: 'timeout_ms', type: 'integer', token: 'WAIT', optional: true },
    ],
    run: acquire,
  },
  {
    name: 'rl.release', arity: 3, flags: ['write', 'fast'], ...firstKeyOnly(),
    group: 'limiter', since: '0.2.0', complexity: 'O(N), N the live leases of the key',
    summary: 'Releases the lease id of a concurrency limit; the last lease deletes the key. Reply: 1 if it was live, else 0.',
    args: [{ name: 'key', type: 'key' }, { name: 'id', type: 'string' }],
    run: release,
  },
  {
    name: 'rl.renew', arity: 4, flags: ['write', 'fast'], ...firstKeyOnly(),
    group: 'limiter', since: '0.2.0', complexity: 'O(N), N the live leases of the key',
    summary: 'Makes the live lease id end lease_ms ms from now. Reply: 1, or 0 when the lease is gone (the slot is no longer held).',
    args: [{ name: 'key', type: 'key' }, { name: 'id', type: 'string' }, { name: 'lease_ms', type: 'integer' }],
    run: renew,
  },
];
