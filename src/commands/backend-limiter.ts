/**
 * A limiter command with a shared backend (docs/backend.md): the command has parsed and validated
 * its arguments exactly as in local mode; here the decision is made by one script on the backend,
 * and the reply comes when the backend answers (the connection's later commands go on meanwhile and
 * their replies keep their order, see Client.defer).
 *
 * In order, a call is answered by:
 * 1. the refusal cache, when the same key, parameters and an equal or larger cost were refused and
 *    that refusal cannot have stopped being true (src/backend/refusal-cache.ts);
 * 2. the `backend-unavailable` policy at once, while the backend is down;
 * 3. the backend; past `backend-timeout`, or on an error that is not a decision (-LOADING,
 *    -READONLY, -OOM, a lost connection, ...), the policy:
 *    - `local`: this process's own keyspace decides, as without a backend;
 *    - `allow`: the reply a fresh key would give (decided on an empty scratch keyspace, nothing kept);
 *    - `deny`: limited, remaining 0, retry and reset 1 second.
 */
import { CommandArgs } from '../protocol/command-args.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import { KeyType, TYPE_NAMES } from '../keyspace/keyspace.js';
import { replyFive, WRONGTYPE, writeSix } from './limiter-replies.js';
import { keySlot } from '../backend/key-slot.js';
import { limiterScriptArgv, parseLimiterReply, type ScriptLimit, type ScriptOutcome } from '../backend/limiter-script.js';
import { isDecision, TIMED_OUT, type RedisBackend } from '../backend/redis-backend.js';
import type { CommandContext, CommandHandler } from './types.js';
import type { LimiterCounter } from '../server/stats.js';

/**
 * The longest key sent to the backend. Limiter keys are short; a huge one would be copied, sent and
 * stored on the one connection every call of this sidecar shares (and past Redis's own bulk limit it
 * would close that connection), so it is refused here instead.
 */
export const MAX_BACKEND_KEY_BYTES = 64 * 1024;
export const KEY_TOO_LONG = `ERR key too long for the backend (at most ${MAX_BACKEND_KEY_BYTES} bytes)`;

export const CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot (use a hash tag such as {user:42}:s and {user:42}:h)";

/** One limiter call for the backend. */
export interface BackendLimiterCall {
  limits: ScriptLimit[];
  /** The argument holding each limit's key. */
  keyArgs: number[];
  /** RL.ALL: nothing is spent unless every limit allows; the reply is [limited, reply per limit]. */
  allOrNothing: boolean;
  /** The cost asked (the refusal cache answers an equal or larger one). */
  cost: number;
  /** The parameters as text, for the refusal cache ('' = do not cache). */
  signature: string;
  /** The local handler (policy local, allow). */
  local: CommandHandler;
  /** The decision counter (INFO limiter, metrics); null for a refund, which decides nothing. */
  counter: LimiterCounter | null;
  /**
   * The call gives units back (REFUND): it can make a refusal false, so every sidecar's cached
   * refusals of the key are dropped (as after DEL) before the reply.
   */
  resetsRefusals?: boolean;
}

/** Whether a limit's reply has 5 fields (redis-cell / Redis GCRA: seconds) or 6 (RL.*: ms). */
function isSeconds(l: ScriptLimit): boolean {
  return l.kind !== 'rl';
}

export function runOnBackend(ctx: CommandContext, argv: CommandArgs, backend: RedisBackend, call: BackendLimiterCall): void {
  const keys: Buffer[] = [];
  const prefix = backend.prefixBytes;
  for (const i of call.keyArgs) {
    if (argv.byteLength(i) > MAX_BACKEND_KEY_BYTES) {
      ctx.reply.error(KEY_TOO_LONG);
      return;
    }
    keys.push(prefixedKey(prefix, argv, i));
  }
  if (backend.target.mode === 'cluster' && keys.length > 1) {
    const slot = keySlot(keys[0]);
    for (let i = 1; i < keys.length; i++) {
      if (keySlot(keys[i]) !== slot) {
        ctx.reply.error(CROSSSLOT);
        return;
      }
    }
  }
  const cache = backend.cache;
  const cacheKey = call.signature !== '' ? argv.buffer(call.keyArgs[0]).toString('latin1') : '';
  if (cacheKey !== '') {
    const hit = cache.lookup(cacheKey, call.signature, call.cost, ctx.nowUs);
    if (hit !== null) {
      writeCached(ctx.reply, call.limits[0], hit.values, hit.elapsedUs, hit.leftUs);
      call.counter?.count(ctx.server.stats, true);
      return;
    }
  }
  // Down (the backend, or in a Cluster the key's master), or too many calls pending there: the
  // policy at once.
  const node = backend.usable ? backend.admit(keys[0]) : null;
  if (node === null) {
    answerByPolicy(ctx, ctx.reply, argv, backend, call);
    return;
  }
  // The debug clock, when frozen (DEBUG CLOCK, tests), is the script's time; otherwise the backend's TIME.
  const scriptArgv = limiterScriptArgv(call.limits, call.allOrNothing, ctx.server.clock.frozen ? ctx.nowUs : null);
  if (!Array.isArray(scriptArgv)) {
    errorAfterTypeCheck(ctx, backend, keys, call.limits.map(typeName), scriptArgv.error);
    return;
  }
  // What a policy answer needs after this turn: the arguments, copied once (the parser reuses its
  // views); made into a CommandArgs only if the backend fails.
  const saved = saveArgs(argv);
  const client = ctx.client;
  const server = ctx.server;
  const sentAtUs = ctx.nowUs;
  const epoch = cache.epoch;
  const resolve = client.defer();
  backend.limit(node, keys, scriptArgv, (error, reply) => {
    if (error === null) {
      let outcome: ScriptOutcome;
      try {
        outcome = parseLimiterReply(reply, call.limits);
      } catch (e) {
        backend.errors++;
        backend.lastError = `unexpected script reply: ${(e as Error).message}`;
        resolve((w) => answerByPolicy(server.contextFor(client, w), w, restoreArgs(saved), backend, call));
        return;
      }
      if (cacheKey !== '' && outcome.limited) {
        const refusedForUs = outcome.limits[0].refusedForUs;
        if (refusedForUs > 0) cache.store(cacheKey, call.signature, call.cost, sentAtUs, refusedForUs, outcome.limits[0].values, epoch);
      }
      call.counter?.count(server.stats, outcome.limited);
      if (call.resetsRefusals === true) {
        // This sidecar forgets at once; the reply waits for the others (or backend-timeout).
        const clientKey = keys[0].subarray(prefix.length);
        cache.invalidateKey(clientKey.toString('latin1'));
        backend.invalidate([clientKey]).then(() => resolve((w) => writeOutcome(w, call, outcome)));
        return;
      }
      resolve((w) => writeOutcome(w, call, outcome));
      return;
    }
    if (error !== TIMED_OUT && isDecision(error)) {
      resolve((w) => w.error(error.message));
      return;
    }
    resolve((w) => answerByPolicy(server.contextFor(client, w), w, restoreArgs(saved), backend, call));
  });
}

/** The TYPE a limit's key has locally ('gcra' for CL.THROTTLE and GCRA). */
function typeName(l: ScriptLimit): string {
  return l.kind === 'rl' ? TYPE_NAMES[l.type] : TYPE_NAMES[KeyType.Gcra];
}

/**
 * An argument error found after the key lookup locally (GCRA's overflow errors, the backend's 2^53
 * limit): a key of another type answers WRONGTYPE first, as it does locally, so the type is asked.
 */
export function errorAfterTypeCheck(ctx: CommandContext, backend: RedisBackend, keys: Buffer[], expected: string[], message: string): void {
  if (!backend.usable) {
    ctx.reply.error(message);
    return;
  }
  const resolve = ctx.client.defer();
  const argv = [ctx.server.clock.frozen ? String(ctx.nowUs) : ''];
  Promise.all(keys.map((k) => backend.askType(k, argv))).then(
    (types) => resolve((w) => w.error(types.some((t, i) => String(t) !== 'none' && String(t) !== expected[i]) ? WRONGTYPE : message)),
    () => resolve((w) => w.error(message)),
  );
}

/** prefix + the key in argument `i`, in one small buffer (from Node's pool). */
export function prefixedKey(prefix: Buffer, argv: CommandArgs, i: number): Buffer {
  const key = Buffer.allocUnsafe(prefix.length + argv.byteLength(i));
  prefix.copy(key, 0);
  argv.source(i).copy(key, prefix.length, argv.start(i), argv.end(i));
  return key;
}

/** A command's arguments as one buffer and their ends. */
interface SavedArgs {
  bytes: Buffer;
  ends: number[];
}

function saveArgs(argv: CommandArgs): SavedArgs {
  let total = 0;
  for (let i = 0; i < argv.length; i++) total += argv.byteLength(i);
  const bytes = Buffer.allocUnsafe(total);
  const ends: number[] = [];
  let at = 0;
  for (let i = 0; i < argv.length; i++) {
    at += argv.source(i).copy(bytes, at, argv.start(i), argv.end(i));
    ends.push(at);
  }
  return { bytes, ends };
}

function restoreArgs(saved: SavedArgs): CommandArgs {
  const args = new CommandArgs();
  let start = 0;
  for (const end of saved.ends) {
    args.push(saved.bytes, start, end);
    start = end;
  }
  return args;
}

/** The policy's answer (backend down, slow, or failing). */
function answerByPolicy(ctx: CommandContext, w: ReplyWriter, argv: CommandArgs, backend: RedisBackend, call: BackendLimiterCall): void {
  if (call.resetsRefusals === true) {
    // A refund is not a decision a policy can stand in for: it did not happen, and says so (as DEL).
    w.error(`ERR backend unavailable (${backend.state}${backend.lastError !== '' ? `: ${oneLine(backend.lastError)}` : ''})`);
    return;
  }
  backend.policyDecisions++;
  const policy = backend.policy;
  if (policy === 'deny') {
    writeDenied(w, call);
    call.counter?.count(ctx.server.stats, true);
    return;
  }
  const local = ctx.server.localContext(ctx, w, policy === 'allow');
  try {
    call.local(local, argv);
  } finally {
    if (policy === 'allow') ctx.server.scratchKeyspace.clear();
  }
}

function writeOutcome(w: ReplyWriter, call: BackendLimiterCall, outcome: ScriptOutcome): void {
  if (!call.allOrNothing) {
    writeValues(w, call.limits[0], outcome.limits[0].values);
    return;
  }
  w.arrayHeader(call.limits.length + 1);
  w.integer(outcome.limited ? 1 : 0);
  for (let n = 0; n < call.limits.length; n++) writeValues(w, call.limits[n], outcome.limits[n].values);
}

function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ');
}

/** One limit's reply, as the local command writes it. */
function writeValues(w: ReplyWriter, l: ScriptLimit, v: readonly number[]): void {
  if (isSeconds(l)) replyFive(w, v[0] === 1, v[1], v[2], v[3], v[4]);
  else writeSix(w, v[0], v[1], v[2], v[3], v[4], v[5]);
}

/**
 * A refusal from the cache: the backend's reply with its waits counted down to now (`leftUs` is
 * the exact time until the call can be allowed; the reset counts down by the time elapsed).
 */
function writeCached(w: ReplyWriter, l: ScriptLimit, values: readonly number[], elapsedUs: number, leftUs: number): void {
  const v = values.slice();
  if (isSeconds(l)) {
    v[3] = Math.max(1, Math.ceil(leftUs / 1e6));
    v[4] = Math.max(0, v[4] - Math.floor(elapsedUs / 1e6));
  } else {
    v[3] = Math.max(1, Math.ceil(leftUs / 1000));
    v[4] = Math.max(0, v[4] - Math.floor(elapsedUs / 1000));
  }
  writeValues(w, l, v);
}

/** The limit a reply reports for a limit (its second field). */
function replyLimit(l: ScriptLimit): number {
  if (l.kind !== 'rl') return l.params.limit;
  return l.type === KeyType.TokenBucket || l.type === KeyType.LeakyBucket || l.type === KeyType.Gcra ? l.burst : l.limit;
}

/** `deny`: limited, nothing remaining, come back in a second. */
function writeDenied(w: ReplyWriter, call: BackendLimiterCall): void {
  const each = (l: ScriptLimit) => writeValues(w, l, isSeconds(l) ? [1, replyLimit(l), 0, 1, 1] : [1, replyLimit(l), 0, 1000, 1000, 0]);
  if (!call.allOrNothing) {
    each(call.limits[0]);
    return;
  }
  w.arrayHeader(call.limits.length + 1);
  w.integer(1);
  for (const l of call.limits) each(l);
}
