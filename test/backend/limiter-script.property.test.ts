/**
 * The proof that the backend's Lua script decides as the local limiters do: random timelines are
 * replayed on a real cellgate (local mode, DEBUG CLOCK SET before each call) and on a real
 * redis-server (EVALSHA of LIMITER_SCRIPT with the same µs as nowUs), and every step must give the
 * same reply (all fields) or the same error, the same absolute expiry (cellgate: debug now + PTTL;
 * Redis: PEXPIRETIME, a key whose stored expiry is before now counting as absent) and the same TYPE.
 * Keys are reused across algorithms (WRONGTYPE, and the gcra family sharing its keys), parameters
 * change within a timeline (a key read with other limits than the ones that wrote it), costs include
 * 0 and more than the capacity, time steps include 0, sub-ms, big jumps and steps back; about one RL.*
 * call in five is a `REFUND n` instead, and about one decision in six is forced (`COST n FORCE`: recorded
 * beyond the limit, as debt).
 *
 * Each refusal's refusedForUs is checked too, on a copy of the key taken right after the call: the
 * same call at now + refusedForUs is refused, at now + refusedForUs + 1 allowed.
 *
 * Timelines start a week ahead of the real clock and step back by at most an hour at a time, so
 * Redis's own expiry (real time) never removes a key the script still considers alive.
 *
 * The same timelines are replayed as batches too (the calls of one sidecar turn, one script run with
 * the keys in ARGV, each call at its own debug clock): cut into batches of 1, 2, 3-30 and up to 100
 * calls (a key repeated within a batch sees its earlier calls), each call's reply or error must equal
 * cellgate's, and after each batch every key's expiry and TYPE.
 *
 * Bounds: CELLGATE_PROPERTY_RUNS timelines per algorithm (default 1000, 10-30 steps each), each
 * timeline one pipeline per server; a fifth of that as batches (and 20 timelines of 100-130 steps);
 * CELLGATE_LONG_TESTS=1 runs 20000.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { startServer, type RunningServer } from '../helpers/server.js';
import { RedisNode } from '../helpers/redis.js';
import { MAX_BACKEND_SLIDING_LOG_LIMIT, LIMITER_SCRIPT, TYPE_SCRIPT, batchScriptHeader, limiterScriptArgv, parseLimiterReply, splitBatchReply, type ScriptLimit } from '../../src/backend/limiter-script.js';
import { cellParams } from '../../src/limiters/cell-throttle.js';
import { gcraParams, type GcraParams } from '../../src/limiters/redis-gcra.js';
import { gcraMsParams, newGcraMsParams } from '../../src/limiters/gcra-ms.js';
import { MAX_SCALED } from '../../src/limiters/rate-decision.js';
import { KeyType } from '../helpers/key-types.js';
import { mulberry32 } from '../helpers/random.js';

const LONG = process.env.CELLGATE_LONG_TESTS === '1';
const RUNS = Number(process.env.CELLGATE_PROPERTY_RUNS ?? (LONG ? 20000 : 1000));

let cellgate: RunningServer;
let redisServer: RedisNode;
let local: Redis;
let backend: Redis;
let sha = '';
let typeSha = '';

beforeAll(async () => {
  [cellgate, redisServer] = await Promise.all([startServer(), RedisNode.start()]);
  local = new Redis({ port: cellgate.port, host: '127.0.0.1', protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0 });
  backend = new Redis({ port: redisServer.port, host: '127.0.0.1', protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0 });
  await Promise.all([local.connect(), backend.connect()]);
  sha = (await backend.script('LOAD', LIMITER_SCRIPT)) as string;
  typeSha = (await backend.script('LOAD', TYPE_SCRIPT)) as string;
});

afterAll(async () => {
  local?.disconnect();
  backend?.disconnect();
  await Promise.all([cellgate?.stop(), redisServer?.destroy()]);
});

type Rand = () => number;
const int = (r: Rand, min: number, max: number) => min + Math.floor(r() * (max - min + 1));
const pick = <T>(r: Rand, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];
/** A number in [min, max], biased to the edges and to small values. */
function edgy(r: Rand, min: number, max: number, small = 20): number {
  const u = r();
  if (u < 0.1) return min;
  if (u < 0.15) return max;
  if (u < 0.2) return Math.min(max, min + 1);
  if (u < 0.7) return int(r, min, Math.min(max, min + small));
  // log-uniform over the whole range
  const span = max - min;
  return Math.min(max, min + Math.floor(Math.exp(r() * Math.log(span + 1))) - 1 + (r() < 0.5 ? 0 : 1));
}

type Family = 'cl' | 'gcra' | 'tokenbucket' | 'leakybucket' | 'fixedwindow' | 'slidinglog' | 'slidingwindow' | 'rlgcra';
const RL_TYPES: Record<string, KeyType> = {
  tokenbucket: KeyType.TokenBucket, leakybucket: KeyType.LeakyBucket, fixedwindow: KeyType.FixedWindow,
  slidinglog: KeyType.SlidingLog, slidingwindow: KeyType.SlidingWindow, rlgcra: KeyType.Gcra,
};
const RL_NAMES: Record<string, string> = {
  tokenbucket: 'TOKENBUCKET', leakybucket: 'LEAKYBUCKET', fixedwindow: 'FIXEDWINDOW',
  slidinglog: 'SLIDINGLOG', slidingwindow: 'SLIDINGWINDOW', rlgcra: 'GCRA',
};

/** A limit's parameters, without key and cost. `capacity` is what costs are drawn around. */
interface Spec {
  family: Family;
  capacity: number;
  /** cellgate arguments after the key (RL: without COST), for a given cost. */
  args(cost: number): string[];
  limit(cost: number): ScriptLimit;
}

function clSpec(r: Rand): Spec {
  for (;;) {
    const maxBurst = r() < 0.05 ? edgy(r, 0, 1e12) : edgy(r, 0, 1000, 10);
    const count = r() < 0.1 ? edgy(r, 1, 4e9) : edgy(r, 1, 1000, 20);
    const period = r() < 0.1 ? edgy(r, 1, 1e7) : edgy(r, 1, 120, 10);
    const p = cellParams(maxBurst, count, period);
    if (typeof p === 'string') continue;
    return {
      family: 'cl', capacity: maxBurst + 1,
      args: (q) => [String(maxBurst), String(count), String(period), String(q)],
      limit: (q) => ({ kind: 'cl.throttle', params: p, quantity: q }),
    };
  }
}

function gcraSpec(r: Rand): Spec {
  for (;;) {
    const maxBurst = r() < 0.05 ? edgy(r, 0, 1e12) : edgy(r, 0, 1000, 10);
    const tpp = r() < 0.1 ? edgy(r, 1, 1e10) : edgy(r, 1, 1000, 20);
    const periodText = r() < 0.3 ? String(edgy(r, 1, 3600, 60)) : (int(r, 1, 600000) / 1000).toString();
    const period = Number(periodText);
    const p = gcraParams(maxBurst, tpp, period, 1);
    if (typeof p === 'string' || p.wide !== null) continue;
    // TOKENS whose increment passes 2^51 µs take redis-gcra.ts's BigInt path: one token instead.
    const clamp = (t: number) => {
      const q = gcraParams(maxBurst, tpp, period, t);
      return typeof q === 'string' || q.wide !== null ? 1 : t;
    };
    return {
      family: 'gcra', capacity: maxBurst + 1,
      args: (t) => [String(maxBurst), String(tpp), periodText, 'TOKENS', String(clamp(t))],
      limit: (t) => ({ kind: 'gcra', params: gcraParams(maxBurst, tpp, period, clamp(t)) as GcraParams }),
    };
  }
}

function rlSpec(r: Rand, family: Family): Spec {
  const type = RL_TYPES[family];
  for (;;) {
    const periodMs = r() < 0.15 ? edgy(r, 1, 1e12) : edgy(r, 1, 5000, 1000);
    const limit = type === KeyType.SlidingLog ? edgy(r, 1, r() < 0.05 ? MAX_BACKEND_SLIDING_LOG_LIMIT : 60, 10) : r() < 0.05 ? edgy(r, 1, MAX_SCALED) : edgy(r, 1, 1000, 20);
    const hasBurst = (type === KeyType.TokenBucket || type === KeyType.LeakyBucket || type === KeyType.Gcra) && r() < 0.6;
    const burst = hasBurst ? (r() < 0.05 ? edgy(r, 1, MAX_SCALED) : edgy(r, 1, 1000, 20)) : limit;
    const gcra = newGcraMsParams();
    if (type === KeyType.TokenBucket || type === KeyType.LeakyBucket) {
      if (burst * periodMs > MAX_SCALED) continue;
    } else if (type === KeyType.Gcra) {
      if (gcraMsParams(limit, periodMs, burst, gcra) !== null) continue;
    } else if (limit * periodMs > MAX_SCALED) continue;
    const capacity = hasBurst || type === KeyType.Gcra ? burst : limit;
    return {
      family, capacity,
      args: () => [String(limit), String(periodMs), ...(hasBurst ? ['BURST', String(burst)] : [])],
      limit: (cost) => ({ kind: 'rl', type, limit, periodMs, burst, gcra, cost }),
    };
  }
}

function specOf(r: Rand, family: Family): Spec {
  if (family === 'cl') return clSpec(r);
  if (family === 'gcra') return gcraSpec(r);
  return rlSpec(r, family);
}

/** A cost around a capacity: 0, 1, below, at, just above, far above. */
function costFor(r: Rand, capacity: number, family: Family): number {
  const u = r();
  let c: number;
  if (u < 0.08) c = 0;
  else if (u < 0.45) c = 1;
  else if (u < 0.75) c = int(r, 0, Math.min(capacity, 50));
  else if (u < 0.85) c = capacity;
  else if (u < 0.93) c = capacity + 1;
  else c = pick(r, [1e6, 2 ** 40, 1e15]);
  if (family === 'gcra') c = Math.max(1, c); // TOKENS >= 1
  return Math.min(c, Number.MAX_SAFE_INTEGER);
}

/** A time step in µs: 0, sub-ms, ms, seconds, a big jump, or back (at most an hour). */
function stepUs(r: Rand): number {
  const u = r();
  if (u < 0.12) return 0;
  if (u < 0.35) return int(r, 1, 999);
  if (u < 0.65) return int(r, 1, 5000) * (r() < 0.5 ? 1000 : 1) + int(r, 0, 999);
  if (u < 0.85) return int(r, 1, 120) * 1_000_000 + int(r, 0, 999_999);
  if (u < 0.93) return int(r, 1, 1e10);
  return -int(r, 1, r() < 0.5 ? 5_000_000 : 3.6e9);
}

interface Call {
  /** cellgate command. */
  command: string[];
  /** Backend keys, and the limits for the script, in the same order. */
  keys: string[];
  limits: ScriptLimit[];
  all: boolean;
}

function singleCall(spec: Spec, key: string, cost: number, force = false): Call {
  const command = spec.family === 'cl' ? ['CL.THROTTLE', key, ...spec.args(cost)]
    : spec.family === 'gcra' ? ['GCRA', key, ...spec.args(cost)]
      : [`RL.${RL_NAMES[spec.family]}`, key, ...spec.args(cost), 'COST', String(cost), ...(force ? ['FORCE'] : [])];
  return { command, keys: [key], limits: [force ? { ...spec.limit(cost), force: true } as ScriptLimit : spec.limit(cost)], all: false };
}

/** An RL.* `REFUND units` call (single-limit only). */
function refundCall(spec: Spec, key: string, units: number): Call {
  return {
    command: [`RL.${RL_NAMES[spec.family]}`, key, ...spec.args(0), 'REFUND', String(units)],
    keys: [key], limits: [{ ...spec.limit(0), refund: units } as ScriptLimit], all: false,
  };
}

/** An RL.* call on `key`: a decision of a random cost, or about one in five a refund. */
function rlOrRefundCall(r: Rand, spec: Spec, key: string): Call {
  const rl = spec.family !== 'cl' && spec.family !== 'gcra';
  if (rl && r() < 0.2) return refundCall(spec, key, Math.max(1, costFor(r, spec.capacity, spec.family)));
  return singleCall(spec, key, costFor(r, spec.capacity, spec.family), rl && r() < 0.17);
}

function allCall(specs: Spec[], keys: string[], cost: number): Call {
  const command = ['RL.ALL', String(specs.length)];
  specs.forEach((s, i) => command.push(keys[i], RL_NAMES[s.family], ...s.args(cost)));
  command.push('COST', String(cost));
  return { command, keys, limits: specs.map((s) => s.limit(cost)), all: true };
}

const ALL_FAMILIES: Family[] = ['cl', 'gcra', 'tokenbucket', 'leakybucket', 'fixedwindow', 'slidinglog', 'slidingwindow', 'rlgcra'];
const RL_FAMILIES: Family[] = ['tokenbucket', 'leakybucket', 'fixedwindow', 'slidinglog', 'slidingwindow', 'rlgcra'];

let timelineId = 0;

/**
 * A timeline for `main` (or RL.ALL when null): its calls and the µs of each. Mostly the main
 * algorithm with one of two parameter sets on three keys; sometimes another algorithm on the same
 * keys (WRONGTYPE, or the gcra family sharing a key).
 */
function timeline(seed: number, main: Family | null, steps: number): { calls: Call[]; start: number; deltas: number[] } {
  const r = mulberry32(seed);
  const prefix = `t${timelineId++}:`;
  const keyNames = [0, 1, 2, 3, 4].map((i) => `${prefix}{k}${i}`);
  const mainSpecs = main === null ? [] : [specOf(r, main), specOf(r, main)];
  const others = new Map<Family, Spec>();
  const other = (f: Family) => {
    let s = others.get(f);
    if (s === undefined) others.set(f, (s = specOf(r, f)));
    return s;
  };
  // RL.ALL: a limit per key, fixed for the timeline (each key keeps its algorithm, mostly).
  const allSpecs = main === null ? keyNames.map(() => specOf(r, pick(r, RL_FAMILIES))) : [];
  const calls: Call[] = [];
  const deltas: number[] = [];
  const start = (Date.now() + 7 * 86400_000) * 1000 + int(r, 0, 86400_000_000);
  for (let i = 0; i < steps; i++) {
    deltas.push(stepUs(r));
    if (main === null) {
      if (r() < 0.75) {
        const n = int(r, 2, 4);
        const chosen = [0, 1, 2, 3, 4].sort(() => r() - 0.5).slice(0, n);
        const specs = chosen.map((k) => allSpecs[k]);
        const cost = costFor(r, Math.min(...specs.map((s) => s.capacity)), 'tokenbucket');
        calls.push(allCall(specs, chosen.map((k) => keyNames[k]), cost));
      } else {
        const spec = other(pick(r, RL_FAMILIES));
        calls.push(rlOrRefundCall(r, spec, pick(r, keyNames)));
      }
      continue;
    }
    const key = keyNames[int(r, 0, 2)];
    const spec = r() < 0.82 ? mainSpecs[r() < 0.8 ? 0 : 1] : other(pick(r, ALL_FAMILIES));
    calls.push(rlOrRefundCall(r, spec, key));
  }
  return { calls, start, deltas };
}

function clockArg(us: number): string {
  return `${Math.floor(us / 1000)}.${String(us % 1000).padStart(3, '0')}`;
}

/** Reply integers as compared: i64::MAX saturations (CL.THROTTLE's remaining) as one value. */
function norm(values: unknown): unknown {
  if (Array.isArray(values)) return values.map(norm);
  if (typeof values === 'number' && values >= 9223372036854775807) return 'i64::MAX';
  return values;
}

type Result = [Error | null, unknown];

/**
 * Replays a segment of a timeline (calls[i] at times[i]) on both servers and compares; `expiry`
 * learns each key's absolute expiry (ms, or -2) after each call, `history` the calls so far.
 */
async function replaySegment(calls: Call[], times: number[], history: string[], expiry: Map<string, number>): Promise<void> {
  const lp = local.pipeline();
  const bp = backend.pipeline();
  for (let i = 0; i < calls.length; i++) {
    const c = calls[i];
    const nowUs = times[i];
    lp.call('DEBUG', 'CLOCK', 'SET', clockArg(nowUs));
    lp.call(c.command[0], ...c.command.slice(1));
    for (const k of c.keys) {
      lp.pttl(k);
      lp.type(k);
    }
    const argv = limiterScriptArgv(c.limits, c.all, nowUs);
    if (!Array.isArray(argv)) throw new Error(`limiterScriptArgv refused ${c.command.join(' ')}: ${argv.error}`);
    bp.evalsha(sha, c.keys.length, ...c.keys, ...argv);
    for (const k of c.keys) {
      bp.call('PEXPIRETIME', k);
      bp.evalsha(typeSha, 1, k, String(nowUs));
      bp.call('COPY', k, `probe:${k}:${i}`, 'REPLACE');
    }
  }
  const [lr, br] = (await Promise.all([lp.exec(), bp.exec()])) as [Result[], Result[]];
  let li = 0;
  let bi = 0;
  const probes: { call: Call; limit: number; key: string; at: number }[] = [];
  const copies: string[] = [];
  for (let i = 0; i < calls.length; i++) {
    const c = calls[i];
    const nowUs = times[i];
    const nowMs = Math.floor(nowUs / 1000);
    const where = () => `step ${i} at ${clockArg(nowUs)}: ${c.command.join(' ')}\n${history.join('\n')}`;
    li++; // DEBUG CLOCK SET
    const [lerr, lval] = lr[li++];
    const [berr, bval] = br[bi++];
    if (lerr !== null || berr !== null) {
      expect(berr?.message, `error, ${where()}`).toBe(lerr?.message);
    } else {
      const outcome = parseLimiterReply(bval, c.limits);
      const got = c.all ? [outcome.limited ? 1 : 0, ...outcome.limits.map((l) => l.values)] : outcome.limits[0].values;
      expect(norm(got), `reply, ${where()}`).toEqual(norm(lval));
      outcome.limits.forEach((l, n) => {
        const refused = l.values[0] === 1;
        if (!refused) expect(l.refusedForUs, `refusedForUs when allowed, ${where()}`).toBe(-1);
        // A forced charge is recorded whatever it finds: "the same call refused" does not apply to it.
        else if (l.refusedForUs !== -1 && (c.limits[n] as { force?: boolean }).force !== true) {
          expect(l.refusedForUs, `refusedForUs, ${where()}`).toBeGreaterThanOrEqual(0);
          probes.push({ call: c, limit: n, key: `probe:${c.keys[n]}:${i}`, at: nowUs + l.refusedForUs });
        }
      });
    }
    history.push(`  ${clockArg(nowUs)} ${c.command.join(' ')} -> ${lerr?.message ?? JSON.stringify(lval)}`);
    for (const k of c.keys) {
      const pttl = lr[li++][1] as number;
      const ltype = lr[li++][1] as string;
      const pexpiretime = br[bi++][1] as number;
      const btype = br[bi++][1] as string;
      bi++; // COPY
      copies.push(`probe:${k}:${i}`);
      const localAt = pttl === -2 ? -2 : nowMs + pttl;
      const backendAt = pexpiretime < nowMs ? -2 : pexpiretime;
      expect(backendAt, `expiry of ${k}, ${where()}`).toBe(localAt);
      // The last expiry written: Redis still holds the value (logically expired) after it passed.
      if (localAt !== -2) expiry.set(k, localAt);
      expect(btype, `TYPE ${k}, ${where()}`).toBe(ltype);
    }
  }
  if (probes.length === 0) {
    await backend.unlink(...copies);
    return;
  }
  // refusedForUs: still refused at its last µs, allowed one µs later (on the copy taken after the call).
  const pp = backend.pipeline();
  for (const p of probes) {
    const l = [p.call.limits[p.limit]];
    pp.evalsha(sha, 1, p.key, ...(limiterScriptArgv(l, false, p.at) as Buffer[]));
    pp.evalsha(sha, 1, p.key, ...(limiterScriptArgv(l, false, p.at + 1) as Buffer[]));
  }
  const pr = (await pp.exec()) as Result[];
  probes.forEach((p, n) => {
    const l = [p.call.limits[p.limit]];
    const [e1, before] = pr[2 * n];
    const [e2, after] = pr[2 * n + 1];
    expect(e1 ?? e2).toBeNull();
    const what = `${p.call.command.join(' ')} (limit ${p.limit + 1}) probed at ${clockArg(p.at)}`;
    expect(parseLimiterReply(before, l).limits[0].values[0], `refused at refusedForUs: ${what}`).toBe(1);
    expect(parseLimiterReply(after, l).limits[0].values[0], `allowed 1 µs after refusedForUs: ${what}`).toBe(0);
  });
  await backend.unlink(...copies);
}

/** The elements of one batch of calls (after EVALSHA sha 0), as a sidecar sends them (limiter-batches.ts). */
function batchElements(calls: Call[], times: number[]): Buffer[] {
  const out = [batchScriptHeader(true)];
  calls.forEach((c, i) => {
    const argv = limiterScriptArgv(c.limits, c.all, times[i]);
    if (!Array.isArray(argv)) throw new Error(`limiterScriptArgv refused ${c.command.join(' ')}: ${argv.error}`);
    out.push(argv[0], ...c.keys.map((k) => Buffer.from(k)));
  });
  return out;
}

/**
 * A segment replayed as batches: cut at random into batches of 1, 2, 3-30 or 100 calls, each one
 * EVALSHA on the backend and one pipeline locally (DEBUG CLOCK SET before each call); then every
 * key of the batch's expiry and TYPE at the batch's last time.
 */
function batchedSegment(r: Rand) {
  return async (calls: Call[], times: number[], history: string[], expiry: Map<string, number>): Promise<void> => {
    let i = 0;
    while (i < calls.length) {
      const size = pick(r, [1, 2, int(r, 3, 30), 100]);
      const batch = calls.slice(i, i + size);
      const at = times.slice(i, i + size);
      const keys = [...new Set(batch.flatMap((c) => c.keys))];
      const lastUs = at[at.length - 1];
      const lp = local.pipeline();
      batch.forEach((c, n) => {
        lp.call('DEBUG', 'CLOCK', 'SET', clockArg(at[n]));
        lp.call(c.command[0], ...c.command.slice(1));
      });
      for (const k of keys) {
        lp.pttl(k);
        lp.type(k);
      }
      const bp = backend.pipeline();
      bp.callBuffer('EVALSHA', sha, 0, ...batchElements(batch, at));
      for (const k of keys) {
        bp.call('PEXPIRETIME', k);
        bp.evalsha(typeSha, 1, k, String(lastUs));
      }
      const [lr, br] = (await Promise.all([lp.exec(), bp.exec()])) as [Result[], Result[]];
      const [batchError, packed] = br[0];
      expect(batchError).toBeNull();
      const replies = splitBatchReply(packed, batch.length);
      expect(replies).not.toBeNull();
      batch.forEach((c, n) => {
        const [lerr, lval] = lr[2 * n + 1];
        const one = replies![n];
        const where = () => `batch of ${batch.length}, call ${n} at ${clockArg(at[n])}: ${c.command.join(' ')}\n${history.join('\n')}`;
        if (lerr !== null || typeof one === 'string') {
          expect(typeof one === 'string' ? one : undefined, `error, ${where()}`).toBe(lerr?.message);
        } else {
          const outcome = parseLimiterReply(one, c.limits);
          const got = c.all ? [outcome.limited ? 1 : 0, ...outcome.limits.map((l) => l.values)] : outcome.limits[0].values;
          expect(norm(got), `reply, ${where()}`).toEqual(norm(lval));
        }
        history.push(`  ${clockArg(at[n])} ${c.command.join(' ')} -> ${lerr?.message ?? JSON.stringify(lval)} (batch of ${batch.length})`);
      });
      let li = 2 * batch.length;
      let bi = 1;
      const lastMs = Math.floor(lastUs / 1000);
      for (const k of keys) {
        const pttl = lr[li++][1] as number;
        const ltype = lr[li++][1] as string;
        const pexpiretime = br[bi++][1] as number;
        const btype = br[bi++][1] as string;
        const localAt = pttl === -2 ? -2 : lastMs + pttl;
        const backendAt = pexpiretime < lastMs ? -2 : pexpiretime;
        expect(backendAt, `expiry of ${k} after a batch of ${batch.length}\n${history.join('\n')}`).toBe(localAt);
        // The expiry Redis still holds (passed or not): a key written within the batch and expired
        // locally by its end is still there, logically expired, and a step back must not revive it.
        if (pexpiretime > 0) expiry.set(k, pexpiretime);
        expect(btype, `TYPE ${k} after a batch of ${batch.length}\n${history.join('\n')}`).toBe(ltype);
      }
      i += size;
    }
  };
}

type Segment = (calls: Call[], times: number[], history: string[], expiry: Map<string, number>) => Promise<void>;

/**
 * Replays a timeline in segments that end before each step back. A key the local keyspace saw
 * expired (at any time so far) is gone for good there, while on Redis (whose own clock is a week
 * behind) it would be alive again at an earlier time: so a step back stops 1 ms after the latest
 * expiry already passed.
 */
async function replay(calls: Call[], start: number, deltas: number[], segment: Segment = replaySegment): Promise<void> {
  const expiry = new Map<string, number>();
  const history: string[] = [];
  let t = start;
  let maxMs = -Infinity;
  let i = 0;
  while (i < calls.length) {
    const times: number[] = [];
    let j = i;
    for (; j < calls.length; j++) {
      if (j > i && deltas[j] < 0) break;
      let next = t + deltas[j];
      if (deltas[j] < 0) {
        let floorMs = -Infinity;
        for (const at of expiry.values()) if (at < maxMs && at + 1 > floorMs) floorMs = at + 1;
        if (next < floorMs * 1000) next = floorMs * 1000;
      }
      t = next;
      times.push(t);
      maxMs = Math.max(maxMs, Math.floor(t / 1000));
    }
    await segment(calls.slice(i, j), times, history, expiry);
    i = j;
  }
}

async function check(main: Family | null): Promise<void> {
  await fc.assert(
    fc.asyncProperty(fc.integer(), fc.integer({ min: 10, max: 30 }), async (seed, steps) => {
      const { calls, start, deltas } = timeline(seed, main, steps);
      await replay(calls, start, deltas);
    }),
    { numRuns: RUNS, endOnFailure: true },
  );
}

/** The same timelines (of `minSteps`..`maxSteps` steps), replayed as batches. */
async function checkBatched(main: Family | null, runs: number, minSteps: number, maxSteps: number): Promise<void> {
  await fc.assert(
    fc.asyncProperty(fc.integer(), fc.integer({ min: minSteps, max: maxSteps }), async (seed, steps) => {
      const { calls, start, deltas } = timeline(seed, main, steps);
      await replay(calls, start, deltas, batchedSegment(mulberry32(seed ^ 0x5bd1e995)));
    }),
    { numRuns: runs, endOnFailure: true },
  );
}

describe('the backend limiter script decides as the local limiters', () => {
  const timeout = LONG ? 3_600_000 : 300_000;
  for (const family of ALL_FAMILIES) {
    it(`${family}: replies, errors, expiry and TYPE equal cellgate's on random timelines`, () => check(family), timeout);
  }
  it('RL.ALL with mixed algorithms: replies, errors, expiry and TYPE equal cellgate\'s', () => check(null), timeout);
});

describe('batches of calls decide as the same calls one by one', () => {
  const timeout = LONG ? 3_600_000 : 300_000;
  const runs = Math.max(20, Math.floor(RUNS / 5));
  for (const family of ALL_FAMILIES) {
    it(`${family}: batches of 1, 2, 3-30 and 100 calls, replies, errors, expiry and TYPE equal cellgate's`, () => checkBatched(family, runs, 10, 30), timeout);
  }
  it('RL.ALL and single calls of every RL algorithm mixed in batches', () => checkBatched(null, runs, 10, 30), timeout);
  it('batches of 100 calls (timelines of 100-130 steps, mixed algorithms on shared keys)', async () => {
    await checkBatched('tokenbucket', 10, 100, 130);
    await checkBatched(null, 10, 100, 130);
  }, timeout);
});
