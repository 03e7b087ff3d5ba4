/**
 * The limiter store of the shared backend (docs/backend.md): a call parsed and validated exactly as
 * in local mode is decided by one script on the backend, and the reply comes when the backend
 * answers (the connection's later commands go on meanwhile and their replies keep their order, see
 * Client.defer).
 *
 * In order, a call is answered by:
 * 1. the refusal cache, when the same key, parameters and an equal or larger cost were refused and
 *    that refusal cannot have stopped being true (src/backend/refusal-cache.ts);
 * 2. the `backend-unavailable` policy at once, while the backend is down; before the backend was
 *    first reached, the call waits for it instead, within backend-timeout (src/backend/first-contact.ts);
 * 3. the backend; past `backend-timeout`, or on an error that is not a decision (-LOADING,
 *    -READONLY, -OOM, a lost connection, ...), the policy (src/store/policy-limiter.ts), handed the
 *    call as parsed.
 *
 * The calls of one event-loop turn go to each backend node as one script (src/backend/
 * limiter-batches.ts), decided in order; each is answered from its part of the reply.
 *
 * A unit's calls (EXEC, or a rate limit service request's limits: beginUnit .. endUnit) are decided
 * in order on the backend with nothing in between: on one Redis as one entry of the turn's batch
 * (never cut between two), on a Cluster (keys of one slot) or when more than a batch carries as one
 * script of their own; a keyspace command of the transaction sends those before it first
 * (flushUnit), so the backend sees the commands in the transaction's order.
 */
import { setFlagsFromString } from 'node:v8';
import type { Clock } from '../clock.js';
import { BLOCK_TYPE_NAME } from '../limiters/block.js';
import { GCRA_KEY, typeName } from '../limiters/registry.js';
import type { CommandArgs } from '../protocol/command-args.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import type { Stats } from '../server/stats.js';
import { detachCall, type LimiterCall } from '../store/limiter-call.js';
import { replyFive, WRONGTYPE, writeSix } from '../store/limiter-replies.js';
import type { LimiterStore, ReplyPlace, StoreSink, UnitKeyCheck } from '../store/store.js';
import { FirstContactWait, MAX_WAITING } from './first-contact.js';
import { keySlot } from './key-slot.js';
import { LimiterBatches, type BatchedCall } from './limiter-batches.js';
import { LIMITER_SCRIPT, limiterScriptArgv, parseLimiterReply, unitScriptArgv, type ScriptLimit, type ScriptOutcome } from './limiter-script.js';
import { newNode } from './node-state.js';
import { isDecision, TIMED_OUT, type CallDone, type RedisBackend } from './redis-backend.js';

/**
 * The longest key sent to the backend. Limiter keys are short; a huge one would be copied, sent and
 * stored on the one connection every call of this sidecar shares (and past Redis's own bulk limit it
 * would close that connection), so it is refused here instead.
 */
export const MAX_BACKEND_KEY_BYTES = 64 * 1024;
export const KEY_TOO_LONG = `ERR key too long for the backend (at most ${MAX_BACKEND_KEY_BYTES} bytes)`;

/**
 * The most calls one script of a transaction decides: a longer transaction's calls go as several
 * scripts, each of this many in order. One script keeps Redis busy for all its calls (nothing else
 * runs meanwhile) and is answered within one backend-timeout or not at all: at some 10 µs of Redis
 * time per call this stays a few ms.
 */
export const MAX_UNIT_CALLS = 512;

/** Why a call re-sent on its own got the policy: its node is down or full (as RedisBackend.admit). */
const NODE_UNAVAILABLE = new Error("the key's backend node is down or has too many calls pending");

/** The node of a call held for the first contact, until it is sent (its node is known then). */
const NO_NODE = newNode('not reached yet');

export const CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot (use a hash tag such as {user:42}:s and {user:42}:h)";

/** A call sent (or to be sent, in a batch or a unit) to the backend, and what its answer needs. */
interface SentCall extends BatchedCall {
  /**
   * The call as parsed: RL.*'s detached from the request; CL.THROTTLE's and GCRA's a copy whose
   * argument vector is the request's (reused by the next command), detached only if the policy
   * answers it (policyCall): most calls never need it.
   */
  call: LimiterCall;
  detached: boolean;
  limits: ScriptLimit[];
  client: ReplyPlace;
  resolve: (write: (reply: ReplyWriter) => void) => void;
  cost: number;
  sentAtUs: number;
  epoch: number;
  /** The frozen debug clock the call was decided at (µs), or null: the backend's TIME. */
  clockUs: number | null;
}

export class BackendLimiterStore implements LimiterStore {
  /** The calls of the transaction running (EXEC), not sent yet; null outside one. */
  private unit: SentCall[] | null = null;
  /** The calls of this turn, per node, not sent yet. */
  private readonly batches: LimiterBatches<SentCall>;
  /** Calls (and units) made before the backend was first reached, waiting for it. */
  private readonly waiting: FirstContactWait<SentCall>;

  constructor(
    private readonly backend: RedisBackend,
    /** Answers the calls the backend does not: the `backend-unavailable` policy (src/store/policy-limiter.ts). */
    private readonly fallback: LimiterStore,
    private readonly stats: Stats,
    private readonly clock: Clock,
  ) {
    this.batches = new LimiterBatches<SentCall>(backend, LIMITER_SCRIPT, { answer: this.answer, sendAlone: this.sendAlone });
    // A call's objects live for its round trip to the backend, across event-loop turns; V8 then
    // judges their allocation sites long-lived and allocates them in the old generation from then on
    // (allocation-site pretenuring), where only full collections free them: measured with one
    // sidecar under load, 7-10 µs of CPU per call with it, 4 µs without. Process-wide, and only in
    // backend mode (a local call's objects die within its turn).
    setFlagsFromString('--no-allocation-site-pretenuring');
    backend.beforeSend = () => this.batches.flush();
    this.waiting = new FirstContactWait<SentCall>(backend.host, () => backend.timeoutMs, (items) => {
      for (const sent of items) this.answer(sent, TIMED_OUT, undefined);
    });
    backend.firstContact = this.waiting;
    backend.onFirstContact = () => this.releaseWaiting();
  }

  decide(call: LimiterCall, sink: StoreSink): void {
    const backend = this.backend;
    const keys = this.keysOf(call, sink);
    if (keys === null) return;
    if (call.lateError !== '') {
      this.errorAfterTypeCheck(sink, keys, [GCRA_KEY.typeName], call.lateError);
      return;
    }
    if (backend.target.mode === 'cluster' && keys.length > 1) {
      const slot = keySlot(keys[0]);
      for (let i = 1; i < keys.length; i++) {
        if (keySlot(keys[i]) !== slot) {
          sink.reply.error(CROSSSLOT);
          return;
        }
      }
    }
    const cache = backend.cache;
    const prefixLength = backend.prefixBytes.length;
    // A refund is never answered from (nor stored in) the refusal cache: it makes refusals false.
    const cost = call.kind === 'gcra' ? call.gcra!.incrementUs : call.cost;
    const limits = scriptLimits(call);
    // The key as text only when a refusal may be cached for it (none while every call is allowed).
    if (cache.size > 0 && signatureOf(call) !== '') {
      const hit = cache.lookup(keys[0].toString('latin1', prefixLength), signatureOf(call), cost, sink.nowUs);
      if (hit !== null) {
        writeCached(sink.reply, limits[0], hit.values, hit.elapsedUs, hit.leftUs);
        call.counter?.count(this.stats, true);
        return;
      }
    }
    // Down (the backend, or in a Cluster the key's master), or too many calls pending there: the
    // policy at once. Not reached yet: the call waits for the first contact (its node is known then).
    const waits = !backend.reached;
    const node = backend.usable ? backend.admit(keys[0]) : null;
    if (node === null && !(waits && this.waiting.size < MAX_WAITING)) {
      if (waits) backend.overflows++;
      this.answerByPolicy(call, sink);
      return;
    }
    // The debug clock, when frozen (DEBUG CLOCK, tests), is the script's time; otherwise the backend's TIME.
    const clockUs = this.clock.frozen ? sink.nowUs : null;
    const scriptArgv = limiterScriptArgv(limits, call.allOrNothing, clockUs);
    if (!Array.isArray(scriptArgv)) {
      this.errorAfterTypeCheck(sink, keys, limits.map(typeNameOf), scriptArgv.error);
      return;
    }
    const sent: SentCall = {
      call: call.kind === 'rl' ? detachCall(call, keys, prefixLength) : { ...call }, detached: call.kind === 'rl',
      limits, keys, argv: scriptArgv[0], node: node ?? NO_NODE, frozen: clockUs !== null,
      client: sink.client, resolve: sink.client.defer(), cost, sentAtUs: sink.nowUs, epoch: cache.epoch, clockUs,
    };
    if (this.unit === null) {
      if (node === null) this.hold([sent]);
      else this.batches.add(sent);
      return;
    }
    this.unit.push(sent);
    if (this.unit.length === MAX_UNIT_CALLS) this.flushUnit();
  }

  /**
   * Adds another store's call (a concurrency lease's: its `own` receiver answers it) to this turn's
   * batch of its node, so it rides in the same script as the rate limits: after any transaction's
   * calls so far, which go first.
   */
  addForeign(call: BatchedCall): void {
    this.flushUnit();
    this.batches.add(call as SentCall);
  }

  beginUnit(): void {
    this.unit = [];
  }

  endUnit(): void {
    this.flushUnit();
    this.unit = null;
  }

  /**
   * Hands the unit's calls so far to the backend, before whatever the transaction does next there:
   * on one Redis, into the turn's batch as one entry (a single call as outside a transaction), which
   * the next command to the backend sends first; else, or when they are more than a batch carries, as
   * one script of their own (one call: as outside a transaction). A Cluster keeps its own script by
   * the unit's slot, through the Cluster client, which follows MOVED and ASK for the whole unit.
   */
  flushUnit(): void {
    const unit = this.unit;
    if (unit === null || unit.length === 0) return;
    this.unit = [];
    if (!this.backend.reached) {
      this.hold(unit);
      return;
    }
    this.sendUnit(unit);
  }

  /** Holds calls (one, or a unit's) for the first contact; the policy answers them when full. */
  private hold(calls: SentCall[]): void {
    if (this.waiting.hold(calls)) return;
    this.backend.overflows += calls.length;
    for (const sent of calls) this.answer(sent, NODE_UNAVAILABLE, undefined);
  }

  /**
   * The backend was reached for the first time: what waited for it is sent now, in arrival order,
   * each call to its key's node (as `decide` and `flushUnit` would have sent it).
   */
  private releaseWaiting(): void {
    for (const calls of this.waiting.release()) {
      const nodes = calls.map((sent) => this.backend.admit(sent.keys[0]));
      if (nodes.some((n) => n === null)) {
        for (const sent of calls) this.answer(sent, NODE_UNAVAILABLE, undefined);
        continue;
      }
      calls.forEach((sent, i) => (sent.node = nodes[i]!));
      // One call goes as a call of the turn's batch (a unit of one is sent the same way).
      if (calls.length === 1) this.batches.add(calls[0]);
      else this.sendUnit(calls);
    }
  }

  /** A unit's calls (flushUnit's), sent now. */
  private sendUnit(unit: SentCall[]): void {
    if (this.backend.target.mode !== 'cluster' && this.batches.addUnit(unit)) return;
    if (unit.length === 1) {
      this.sendAlone(unit[0]);
      return;
    }
    const keys = unit.flatMap((s) => s.keys);
    const argv = unitScriptArgv(unit.map((s) => s.argv), unit[0].clockUs);
    this.backend.limit(unit[0].node, keys, argv, (error, reply) => {
      if (error !== null) {
        for (const sent of unit) this.answer(sent, error, undefined);
        return;
      }
      if (!Array.isArray(reply) || reply.length !== unit.length) {
        // Each call's parse fails the same way: counted as an error each, and answered by the policy.
        for (const sent of unit) this.answer(sent, null, undefined);
        return;
      }
      // Each call's reply, or its own error (WRONGTYPE): the others were decided all the same.
      for (let i = 0; i < unit.length; i++) {
        const one: unknown = reply[i];
        if (one instanceof Error) this.answer(unit[i], one, undefined);
        else this.answer(unit[i], null, one);
      }
    });
  }

  unitKeys(): UnitKeyCheck | null {
    // One Redis takes any keys in one script; a Cluster node only keys of one slot.
    return this.backend.target.mode === 'cluster' ? new SlotCheck(this.backend.prefixBytes) : null;
  }

  /**
   * Sends one call as its own script, by its keys (through the Cluster client, which follows MOVED
   * and ASK): a transaction's single call, or a batch's call whose node no longer serves its key.
   */
  private readonly sendAlone = (sent: SentCall): void => {
    const node = this.backend.admit(sent.keys[0]);
    if (node === null) {
      this.answer(sent, NODE_UNAVAILABLE, undefined);
      return;
    }
    this.backend.limit(node, sent.keys, [sent.argv], (error, reply) => this.answer(sent, error, reply));
  };

  /** The backend's answer to one call (or its failure). */
  private readonly answer: (sent: SentCall, error: Parameters<CallDone>[0], reply: unknown) => void = (sent, error, reply) => {
    const { backend, stats } = this;
    const { call, resolve } = sent;
    if (error === null && this.answerAllowed(sent, reply)) return;
    if (error === null) {
      let outcome: ScriptOutcome;
      try {
        outcome = parseLimiterReply(reply, sent.limits);
      } catch (e) {
        this.unexpectedReply(e as Error);
        resolve((w) => this.answerByPolicy(this.policyCall(sent), this.sinkLater(sent.client, w)));
        return;
      }
      // The refusal cache's key is keys[0]'s client part; its parameters signatureOf's ('' = never cached).
      if (outcome.limited && outcome.limits[0].refusedForUs > 0 && signatureOf(call) !== '') {
        const refusedForUs = outcome.limits[0].refusedForUs;
        backend.cache.store(sent.keys[0].toString('latin1', backend.prefixBytes.length), signatureOf(call), sent.cost, sent.sentAtUs, refusedForUs, outcome.limits[0].values, sent.epoch);
      }
      call.counter?.count(stats, outcome.limited);
      if (call.refund !== 0) {
        // This sidecar forgets at once; the reply waits for the others (or backend-timeout).
        const clientKey = sent.keys[0].subarray(backend.prefixBytes.length);
        backend.cache.invalidateKey(clientKey.toString('latin1'));
        backend.invalidate([clientKey]).then(() => resolve((w) => writeOutcome(w, call, sent.limits, outcome)));
        return;
      }
      resolve((w) => writeOutcome(w, call, sent.limits, outcome));
      return;
    }
    if (error !== TIMED_OUT && isDecision(error)) {
      resolve((w) => w.error(error.message));
      return;
    }
    resolve((w) => this.answerByPolicy(this.policyCall(sent), this.sinkLater(sent.client, w)));
  };

  /**
   * The common answer without the general decoding: one limit allowed (a batch's reply as
   * splitBatchReply gives it, [0, values..., -1]), written straight from the reply. False for
   * anything else (a refusal, RL.ALL, a refund, another shape), which `answer` decodes in full.
   */
  private answerAllowed(sent: SentCall, reply: unknown): boolean {
    const { call, limits } = sent;
    if (!Array.isArray(reply) || reply[0] !== 0 || limits.length !== 1 || call.refund !== 0 || call.allOrNothing) return false;
    const r = reply as number[];
    const seconds = isSeconds(limits[0]);
    if (r.length !== (seconds ? 7 : 8)) return false;
    call.counter?.count(this.stats, false);
    if (seconds) sent.resolve((w) => replyFive(w, r[1] === 1, r[2], r[3], r[4], r[5]));
    else sent.resolve((w) => writeSix(w, r[1], r[2], r[3], r[4], r[5], r[6]));
    return true;
  }

  /** The call detached from its request, for the policy (which reads its keys from the arguments). */
  private policyCall(sent: SentCall): LimiterCall {
    if (!sent.detached) {
      sent.call = detachCall(sent.call, sent.keys, this.backend.prefixBytes.length);
      sent.detached = true;
    }
    return sent.call;
  }

  private unexpectedReply(e: Error): void {
    this.backend.errors++;
    this.backend.lastError = `unexpected script reply: ${e.message}`;
  }

  /** Where a policy answer given after the backend call goes: the deferred reply, the time of now. */
  private sinkLater(client: ReplyPlace, reply: ReplyWriter): StoreSink {
    const nowUs = this.clock.nowUs();
    return { reply, client, nowUs, nowMs: Math.floor(nowUs / 1000) };
  }

  /** The policy's answer (backend down, slow, or failing). */
  private answerByPolicy(call: LimiterCall, sink: StoreSink): void {
    const backend = this.backend;
    if (call.refund !== 0) {
      // A refund is not a decision a policy can stand in for: it did not happen, and says so (as DEL).
      sink.reply.error(`ERR backend unavailable (${backend.state}${backend.lastError !== '' ? `: ${oneLine(backend.lastError)}` : ''})`);
      return;
    }
    backend.policyDecisions++;
    this.fallback.decide(call, sink);
  }

  /** The call's keys, prefixed (copies: they outlive this turn), or null after KEY_TOO_LONG. */
  private keysOf(call: LimiterCall, sink: StoreSink): Buffer[] | null {
    const argv = call.argv;
    const prefix = this.backend.prefixBytes;
    const keys: Buffer[] = [];
    const count = call.kind === 'rl' ? call.count : 1;
    for (let n = 0; n < count; n++) {
      const i = call.kind === 'rl' ? call.limits[n].keyArg : 1;
      if (argv.byteLength(i) > MAX_BACKEND_KEY_BYTES) {
        sink.reply.error(KEY_TOO_LONG);
        return null;
      }
      keys.push(prefixedKey(prefix, argv, i));
    }
    return keys;
  }

  /**
   * An argument error found after the key lookup locally (GCRA's overflow errors, the backend's 2^53
   * limit): a key of another type answers WRONGTYPE first, as it does locally, so the type is asked
   * (a blocked key, as an absent one, gets the error).
   */
  private errorAfterTypeCheck(sink: StoreSink, keys: Buffer[], expected: string[], message: string): void {
    const backend = this.backend;
    if (!backend.usable) {
      sink.reply.error(message);
      return;
    }
    // After the transaction's calls before it, which may have made the keys.
    this.flushUnit();
    const resolve = sink.client.defer();
    const argv = [this.clock.frozen ? String(sink.nowUs) : ''];
    Promise.all(keys.map((k) => backend.askType(k, argv))).then(
      (types) => resolve((w) => w.error(types.some((t, i) => !['none', BLOCK_TYPE_NAME, expected[i]].includes(String(t))) ? WRONGTYPE : message)),
      () => resolve((w) => w.error(message)),
    );
  }
}

/** EXEC's limiter keys on a Cluster: all in one slot, or CROSSSLOT (as RL.ALL's keys). */
class SlotCheck implements UnitKeyCheck {
  private slot = -1;
  private crossed = false;

  constructor(private readonly prefix: Buffer) {}

  add(argv: CommandArgs, i: number): void {
    const slot = keySlot(prefixedKey(this.prefix, argv, i));
    if (this.slot === -1) this.slot = slot;
    else if (slot !== this.slot) this.crossed = true;
  }

  refusal(): string | null {
    return this.crossed ? CROSSSLOT : null;
  }
}

/** The call's limits as the script takes them (copies: the call outlives this turn). */
function scriptLimits(call: LimiterCall): ScriptLimit[] {
  if (call.kind === 'cl.throttle') return [{ kind: 'cl.throttle', params: call.cell!, quantity: call.cost }];
  if (call.kind === 'gcra') return [{ kind: 'gcra', params: call.gcra! }];
  const out: ScriptLimit[] = [];
  for (let n = 0; n < call.count; n++) {
    const l = call.limits[n];
    out.push({ kind: 'rl', type: l.algo.type, limit: l.limit, periodMs: l.periodMs, burst: l.burst, gcra: { ...l.gcra }, cost: call.cost, refund: call.refund, force: l.force });
  }
  return out;
}

/**
 * The parameters as text, for the refusal cache: '' for calls it never answers (RL.ALL, a refund, a
 * forced charge: it must reach the backend to be recorded).
 */
function signatureOf(call: LimiterCall): string {
  if (call.kind === 'cl.throttle') {
    const p = call.cell!;
    return `cl ${p.limit} ${p.intervalUs} ${p.intervalNs}`;
  }
  if (call.kind === 'gcra') {
    const p = call.gcra!;
    return `gcra ${p.limit} ${p.emissionUs} ${p.varianceUs}`;
  }
  if (call.allOrNothing || call.refund !== 0) return '';
  const l = call.limits[0];
  if (l.force) return '';
  return `${l.algo.name} ${l.limit} ${l.periodMs} ${l.burst}`;
}

/** Whether a limit's reply has 5 fields (redis-cell / Redis GCRA: seconds) or 6 (RL.*: ms). */
function isSeconds(l: ScriptLimit): boolean {
  return l.kind !== 'rl';
}

/** The TYPE a limit's key has locally ('gcra' for CL.THROTTLE and GCRA). */
function typeNameOf(l: ScriptLimit): string {
  return l.kind === 'rl' ? typeName(l.type) : GCRA_KEY.typeName;
}

/** prefix + the key in argument `i`, in one small buffer (from Node's pool). */
function prefixedKey(prefix: Buffer, argv: CommandArgs, i: number): Buffer {
  const key = Buffer.allocUnsafe(prefix.length + argv.byteLength(i));
  prefix.copy(key, 0);
  argv.source(i).copy(key, prefix.length, argv.start(i), argv.end(i));
  return key;
}

function writeOutcome(w: ReplyWriter, call: LimiterCall, limits: ScriptLimit[], outcome: ScriptOutcome): void {
  if (!call.allOrNothing) {
    writeValues(w, limits[0], outcome.limits[0].values);
    return;
  }
  w.arrayHeader(limits.length + 1);
  w.integer(outcome.limited ? 1 : 0);
  for (let n = 0; n < limits.length; n++) writeValues(w, limits[n], outcome.limits[n].values);
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
