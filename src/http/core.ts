/**
 * What the HTTP middleware decides, independent of the framework: which key a request is counted
 * under, which cellgate call answers it, and the response it gets (status, header fields, body).
 * The adapters (express.ts, fastify.ts, node.ts) only read the request and write the response.
 *
 * Beside this file: the default key (keys.ts), the policies (policies.ts), the header fields
 * (headers.ts: the IETF RateLimit header fields draft 11 by default, or drafts 7 or 6, and
 * X-RateLimit-*), and a refusal's `application/problem+json` body (problem.ts, RFC 9457). A refusal
 * is `429` with `Retry-After`. The guide with every option: docs/middleware.md.
 *
 * Two kinds of failure, never mixed: cellgate unavailable (timeout, connection, a server that says
 * it cannot serve now) is answered by `onUnavailable` (let through, refused with 503, or decided by
 * the in-process insurance limiter, insurance.ts), with one log line when the outage starts and one
 * when cellgate answers again; anything else (a `key`, `cost` or `policy` function that throws or
 * returns an invalid value, a command refused for a wrong setup such as NOPERM or CROSSSLOT) is the
 * application's bug: `check()` rejects, after one log line, and the adapter hands the error to the
 * framework's error path. Either way a request that was not skipped gets its `RateLimitInfo`, whose
 * `source` says who decided.
 */
import {
  CellgateArgumentError,
  CellgateClient,
  CellgateError,
  CellgateTimeoutError,
  CellgateUnavailableError,
  open,
  type Connection,
  type Decision,
} from '../client/index.js';
import { toCellgateError } from '../client/errors.js';
import { ConcurrencyGate, checkConcurrency, newConcurrencyStats, type Admission, type ConcurrencyInfo, type ConcurrencyOptions, type ConcurrencyStats, type HeldResponse } from './concurrency.js';
import { DRAFTS, pushRateLimitHeaders, retryAfterField, type HeaderDraft } from './headers.js';
import { InsuranceLimiter, insuranceMaxKeys } from './insurance.js';
import { defaultKey, type RequestLike } from './keys.js';
import { describe, resolvePolicies, type Policy, type PolicySet, type ResolvedPolicy } from './policies.js';
import { refusalProblem, unavailableProblem, type ProblemDetails } from './problem.js';

export type { ConcurrencyInfo, ConcurrencyOptions, ConcurrencyStats } from './concurrency.js';
export type { HeaderDraft } from './headers.js';
export { defaultKey, ipKey, type RequestLike } from './keys.js';
export type { Policy } from './policies.js';
export { problemText, type ProblemDetails } from './problem.js';

export interface RateLimitOptions<Req = RequestLike> {
  /** A `CellgateClient`, an ioredis / node-redis connection, or a URL (`redis://127.0.0.1:6379`) for a connection of its own. */
  client: CellgateClient | Connection | string;
  /**
   * One policy, or several checked together (all-or-nothing, with `RL.ALL`), or a function of the
   * request that returns them (plans). A function should return the same objects for the same plan:
   * they are checked and formatted once per object. Optional with `concurrency`.
   */
  policy?: Policy | Policy[] | ((req: Req) => Policy | Policy[] | Promise<Policy | Policy[]>);
  /**
   * A limit on requests in flight (leases, held while the response is open; see concurrency.ts),
   * alone or checked after the rate limit: `{ limit, leaseMs, waitMs?, key? }`.
   */
  concurrency?: ConcurrencyOptions<Req>;
  /** Units a request spends (default 1), or a function of the request; an integer >= 0. */
  cost?: number | ((req: Req) => number | Promise<number>);
  /**
   * The client a request is counted for: a non-empty string. Default: the authenticated user
   * (`req.user.id`), else the client IP (see `ipv6Subnet`). A header such as `X-API-Key` is a good
   * key only once the application has checked it: an unchecked header lets every client pick a new
   * bucket for each request.
   */
  key?: (req: Req) => string | Promise<string>;
  /** The default key counts an IPv6 client by this prefix length (default 56); false: the whole address. */
  ipv6Subnet?: number | false;
  /** Prefix of every cellgate key (default none: a `--backend` cellgate adds its own `backend-prefix`). */
  prefix?: string;
  /**
   * When cellgate does not answer in `timeoutMs`, is unreachable or cannot serve: let the request
   * through ('allow', default), refuse it with 503 ('deny'), or decide it in this process with the
   * same policies ('insurance': each replica then enforces the whole limit; see insurance.ts).
   */
  onUnavailable?: 'allow' | 'deny' | 'insurance';
  /** The insurance limiter's bounds (with `onUnavailable: 'insurance'`): `maxKeys` (default 10000) keys per policy and key kept at most. */
  insurance?: { maxKeys?: number };
  /** Milliseconds to wait for cellgate (default 50), the connection included while it is being opened. */
  timeoutMs?: number;
  /** Requests that are not counted at all (no fields, no call). */
  skip?: (req: Req) => boolean | Promise<boolean>;
  /**
   * Counts a request on the way in, then gives its units back (`REFUND`, on each policy it spent)
   * once the response has failed: a status >= 400, or the response errored or closed before it was
   * finished (default false). The refund never delays the response; its errors are counted in
   * `stats.refundErrors`, never thrown.
   */
  skipFailedRequests?: boolean;
  /** The same for a response that succeeded: a status < 400, finished (default false). */
  skipSuccessfulRequests?: boolean;
  /** The RateLimit fields' syntax (default 'draft-11'; 'draft-8' is the same syntax), or false for none. */
  standardHeaders?: HeaderDraft | false;
  /** Also send `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (epoch seconds), as express-rate-limit does (default false). */
  legacyHeaders?: boolean;
  /** Status of a refusal (default 429). */
  statusCode?: number;
  /** A refusal's body: a string replaces the problem's `detail`; an object is sent as the JSON body instead of the problem. */
  message?: string | Record<string, unknown>;
  /** Where the one line about an application error goes (default `console.error`). */
  log?: (line: string) => void;
}

/** Counters an application can export to its metrics. */
export interface LimiterStats {
  allowed: number;
  limited: number;
  skipped: number;
  /** Requests answered by `onUnavailable` because cellgate timed out, was unreachable or could not serve (insurance's included). */
  unavailable: number;
  /** Of those, the requests the insurance limiter decided (`onUnavailable: 'insurance'`): allowed or limited. */
  insurance: number;
  /** Requests handed to the framework's error path (a key/cost/policy function's bug, a wrong setup). */
  errors: number;
  /** Requests whose units were given back (`skipFailedRequests` / `skipSuccessfulRequests`). */
  refunded: number;
  /** Refunds that failed (cellgate unavailable, timed out, or refused them): the units stay spent. */
  refundErrors: number;
  /** The last unavailability, for a log line or a health check. */
  lastError: CellgateError | undefined;
  /** The concurrency limit's gauges and counters (zeros without `concurrency`). */
  concurrency: ConcurrencyStats;
}

/** One policy's state after a request, as `req.rateLimit.policies` shows it. */
export interface PolicyState {
  name: string;
  /** The policy's quota (its capacity). */
  limit: number;
  remaining: number;
  resetAfterMs: number;
  limited: boolean;
}

/**
 * Who decided a request: cellgate; `onUnavailable` ('allow' let it through, 'deny' refused it, while
 * cellgate was unavailable: the figures are then the policies' quotas, nothing is known of what was
 * spent); or the in-process insurance limiter.
 */
export type DecisionSource = 'cellgate' | 'onUnavailable' | 'insurance';

/**
 * What downstream handlers see as `req.rateLimit` (Fastify: `request.rateLimit`): set on every
 * request the middleware did not skip, whoever decided it.
 */
export interface RateLimitInfo {
  /** The key the request was counted under (without prefix and policy). */
  key: string;
  limited: boolean;
  /** The tightest policy's figures (the one with the fewest remaining). */
  limit: number;
  remaining: number;
  resetAfterMs: number;
  /** How long until the refused request would pass; -1 when allowed or when it never can. */
  retryAfterMs: number;
  policies: PolicyState[];
  /** Who decided: 'cellgate', 'onUnavailable' or 'insurance'. */
  source: DecisionSource;
  /** The lease this request holds (with `concurrency`; absent when refused or let through by onUnavailable: 'allow'). */
  concurrency?: ConcurrencyInfo;
}

export interface Outcome {
  /** True: pass the request on to the application; false: answer it with `status` and `body`. */
  proceed: boolean;
  status: number;
  headers: [string, string][];
  body: ProblemDetails | Record<string, unknown> | undefined;
  /** Undefined only when the request was skipped. */
  info: RateLimitInfo | undefined;
  /**
   * Set when the request spent units that `skipFailedRequests` / `skipSuccessfulRequests` may give
   * back: the adapter calls it once the response is done, with its status, or with undefined when it
   * errored or closed before finishing (see `settleWhenDone`). Later calls do nothing.
   */
  settle?: (status: number | undefined) => void;
  /** Set when the request holds a lease: the adapter hands it the response, which renews the lease while open and releases it when done. */
  hold?: (res: HeldResponse) => void;
}

/** What settleWhenDone uses of a node:http response (Express's and Fastify's `reply.raw` are one). */
export interface ResponseEvents extends HeldResponse {
  statusCode: number;
  writableFinished: boolean;
  once(event: 'finish' | 'close', listener: () => void): unknown;
}

/**
 * Calls `outcome.settle` when `res` is done: at 'finish' with its status, or at 'close' without a
 * finish (the client went away, or the response errored) as failed.
 */
export function settleWhenDone(res: ResponseEvents, outcome: Outcome): void {
  outcome.hold?.(res);
  const settle = outcome.settle;
  if (settle === undefined) return;
  res.once('finish', () => settle(res.statusCode));
  res.once('close', () => settle(res.writableFinished ? res.statusCode : undefined));
}

export interface Limiter<Req> {
  /** Rejects only for the application's errors (logged once); unavailability is an Outcome. */
  check(req: Req): Promise<Outcome>;
  readonly stats: LimiterStats;
  /**
   * Resolves once cellgate answers; rejects when it does not within `waitMs` (default 1000: a
   * connection being opened needs more than a request's `timeoutMs`).
   */
  ready(waitMs?: number): Promise<void>;
  /** Closes the connection the limiter opened from a URL (a connection the application passed stays open). */
  close(): Promise<void>;
}

/** The connection a limiter uses, and whether it is the limiter's own (opened from a URL). */
export interface SharedClient {
  client: Promise<CellgateClient>;
  owned: boolean;
}

/** Every option of every adapter (`handler` is read by the adapters). */
const KNOWN_OPTIONS: ReadonlySet<string> = new Set([
  'client', 'policy', 'cost', 'key', 'ipv6Subnet', 'prefix', 'onUnavailable', 'insurance', 'timeoutMs', 'skip',
  'standardHeaders', 'legacyHeaders', 'statusCode', 'message', 'log', 'handler',
  'skipFailedRequests', 'skipSuccessfulRequests', 'concurrency',
]);

/** ready()'s default wait: a TCP connection, the ready check and a PING, on a busy host. */
const READY_WAIT_MS = 1000;

/** The connection for `client`: a URL's is opened now (not waited for: the first calls wait for it). */
export function shareClient(c: RateLimitOptions['client']): SharedClient {
  if (c instanceof CellgateClient) return { client: Promise.resolve(c), owned: false };
  if (typeof c === 'string') {
    const client = open(c);
    // A failed open is reported by each request (as unavailable), not as an unhandled rejection.
    client.catch(() => {});
    return { client, owned: true };
  }
  if (c === null || typeof c !== 'object') throw new CellgateArgumentError('client', 'client: a URL, a CellgateClient, or an ioredis / node-redis connection is needed');
  return { client: Promise.resolve(new CellgateClient(c)), owned: false };
}

export function createLimiter<Req extends RequestLike>(options: RateLimitOptions<Req>, shared?: SharedClient): Limiter<Req> {
  if (options === null || typeof options !== 'object') throw new CellgateArgumentError('options', 'rateLimit() needs an options object');
  for (const name of Object.keys(options)) {
    // A misspelt or unsupported option (e.g. express-rate-limit's `max` or `requestWasSuccessful`)
    // would otherwise be ignored in silence.
    if (!KNOWN_OPTIONS.has(name)) throw new CellgateArgumentError(name, `unknown option '${name}' (the options: ${[...KNOWN_OPTIONS].join(', ')})`);
  }
  const prefix = options.prefix ?? '';
  if (typeof prefix !== 'string' || /[{}]/.test(prefix)) {
    // The key's hash tag must be the first braces in it, so that the keys of a request share a slot.
    throw new CellgateArgumentError('prefix', `prefix must be a string without braces, not ${String(prefix)}`);
  }
  const timeoutMs = options.timeoutMs ?? 50;
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) throw new CellgateArgumentError('timeoutMs', `timeoutMs must be an integer >= 1, not ${String(timeoutMs)}`);
  const onUnavailable = options.onUnavailable ?? 'allow';
  if (onUnavailable !== 'allow' && onUnavailable !== 'deny' && onUnavailable !== 'insurance') throw new CellgateArgumentError('onUnavailable', `onUnavailable must be 'allow', 'deny' or 'insurance', not ${describe(onUnavailable)}`);
  const insurance = onUnavailable === 'insurance' ? new InsuranceLimiter(insuranceMaxKeys(options.insurance)) : undefined;
  if (options.insurance !== undefined && insurance === undefined) throw new CellgateArgumentError('insurance', "the insurance option applies with onUnavailable: 'insurance'");
  const draft = options.standardHeaders ?? 'draft-11';
  if (!DRAFTS.includes(draft)) throw new CellgateArgumentError('standardHeaders', `standardHeaders must be one of 'draft-11', 'draft-8', 'draft-7', 'draft-6' or false, not ${String(draft)}`);
  const statusCode = options.statusCode ?? 429;
  if (!Number.isSafeInteger(statusCode) || statusCode < 400 || statusCode > 599) throw new CellgateArgumentError('statusCode', `statusCode must be an HTTP error status (400-599), not ${String(statusCode)}`);
  const message = options.message;
  if (message !== undefined && typeof message !== 'string' && (message === null || typeof message !== 'object')) throw new CellgateArgumentError('message', 'message must be a string or an object');
  const ipv6Subnet = options.ipv6Subnet ?? 56;
  if (ipv6Subnet !== false && (!Number.isSafeInteger(ipv6Subnet) || ipv6Subnet < 1 || ipv6Subnet > 128)) throw new CellgateArgumentError('ipv6Subnet', `ipv6Subnet must be an integer from 1 to 128 or false, not ${String(ipv6Subnet)}`);
  for (const name of ['skipFailedRequests', 'skipSuccessfulRequests'] as const) {
    if (options[name] !== undefined && typeof options[name] !== 'boolean') throw new CellgateArgumentError(name, `${name} must be true or false, not ${describe(options[name])}`);
  }
  const skipFailed = options.skipFailedRequests === true;
  const skipSuccessful = options.skipSuccessfulRequests === true;
  for (const name of ['key', 'skip', 'log'] as const) {
    if (options[name] !== undefined && typeof options[name] !== 'function') throw new CellgateArgumentError(name, `${name} must be a function`);
  }
  const cost = options.cost ?? 1;
  if (typeof cost !== 'function') checkCost(cost);
  const policyOption = options.policy;
  if (policyOption === undefined && options.concurrency === undefined) throw new CellgateArgumentError('policy', 'a policy or a concurrency limit is needed');
  const fixedPolicies = typeof policyOption === 'function' || policyOption === undefined ? undefined : resolvePolicies(policyOption);
  // Plans: a policy function returns one of a few objects; each is checked and formatted once.
  const planCache = new WeakMap<object, PolicySet>();
  const keyOf = options.key ?? ((req: Req) => defaultKey(req, ipv6Subnet));
  const legacy = options.legacyHeaders === true;
  const log = options.log ?? ((line: string) => console.error(line));
  const connection = shared ?? shareClient(options.client);
  const stats: LimiterStats = newStats();
  const concurrency = options.concurrency === undefined ? undefined : checkConcurrency<Req>(options.concurrency);
  const gate = concurrency === undefined ? undefined : new ConcurrencyGate(concurrency as ConcurrencyOptions<never>, connection.client, timeoutMs, stats.concurrency, insuranceMaxKeys(options.insurance));
  /** The outage in progress (since its first failed call), or undefined while cellgate answers. */
  let outage: CellgateError | undefined;

  /**
   * The settle function of an allowed request that spent `units` on each of `policies` under
   * `tagged`: when the response's result is one the options skip, one REFUND per policy key, with
   * the parameters it was spent with, not awaited by anyone.
   */
  function settleFor(tagged: string, policies: ResolvedPolicy[], units: number, source: DecisionSource): (status: number | undefined) => void {
    let settled = false;
    return (status) => {
      if (settled) return;
      settled = true;
      const failed = status === undefined || status >= 400;
      if (failed ? !skipFailed : !skipSuccessful) return;
      if (source === 'insurance') {
        // Spent in this process: given back here (after an outage that ended, there is nothing to give back).
        insurance?.refund(tagged, policies, units);
        stats.refunded++;
        return;
      }
      connection.client.then(
        (c) => Promise.all(policies.map((p) => c.reward(tagged + p.name, units, { algorithm: p.algorithm, limit: p.limit, periodMs: p.periodMs, burst: p.burst, timeoutMs }))),
      ).then(
        () => { stats.refunded++; },
        () => { stats.refundErrors++; },
      );
    };
  }

  /** The application's bug: counted, logged once, and thrown for the framework's error path. */
  function misuse(err: unknown): never {
    stats.errors++;
    log(`cellgate rate limiter: ${err instanceof Error ? err.message : String(err)}`);
    throw err;
  }

  async function inputs(req: Req): Promise<{ who: string; units: number; set: PolicySet | undefined }> {
    let who: unknown;
    try {
      who = await keyOf(req);
    } catch (err) {
      throw new CellgateArgumentError('key', `the key function threw: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
    if (typeof who !== 'string' || who.length === 0) throw new CellgateArgumentError('key', `the key function must return a non-empty string, not ${describe(who)}`);
    let units: unknown = cost;
    if (typeof cost === 'function') {
      try {
        units = await cost(req);
      } catch (err) {
        throw new CellgateArgumentError('cost', `the cost function threw: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
      checkCost(units);
    }
    let set = fixedPolicies;
    if (set === undefined && policyOption !== undefined) {
      let p: unknown;
      try {
        p = await (policyOption as (req: Req) => unknown)(req);
      } catch (err) {
        throw new CellgateArgumentError('policy', `the policy function threw: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
      if (p === null || typeof p !== 'object') throw new CellgateArgumentError('policy', `the policy function must return a policy or an array of policies, not ${describe(p)}`);
      set = planCache.get(p);
      if (set === undefined) {
        set = resolvePolicies(p as Policy | Policy[]);
        planCache.set(p, set);
      }
    }
    return { who, units: units as number, set };
  }

  /** The first failure of an outage is logged, with what the requests get meanwhile. */
  function outageStarts(err: CellgateError): void {
    if (outage !== undefined) return;
    outage = err;
    const meanwhile = onUnavailable === 'allow' ? 'requests are let through' : onUnavailable === 'deny' ? 'requests are refused with 503' : 'the insurance limiter decides in this process';
    log(`cellgate rate limiter: ${err.message}; ${meanwhile} (onUnavailable: '${onUnavailable}') until cellgate answers again`);
  }

  /** cellgate answered: an outage in progress ends (logged), and insurance forgets what it held. */
  function answered(): void {
    if (outage === undefined) return;
    outage = undefined;
    insurance?.clear();
    gate?.clearInsurance();
    log('cellgate rate limiter: cellgate answers again');
  }

  function unavailable(err: CellgateError, who: string, units: number, set: PolicySet, tagged: string, slots?: number): Outcome {
    stats.unavailable++;
    stats.lastError = err;
    outageStarts(err);
    if (insurance !== undefined && slots === undefined) {
      stats.insurance++;
      const { limited, results } = insurance.decide(tagged, set.list, units);
      return decided(who, units, set, tagged, results, limited, 'insurance');
    }
    // Nothing is known of what was spent: the figures are the quotas, the tightest first.
    let tight = 0;
    for (let i = 1; i < set.list.length; i++) if (set.list[i].capacity < set.list[tight].capacity) tight = i;
    const deny = onUnavailable === 'deny';
    const info: RateLimitInfo = {
      key: who,
      limited: deny,
      limit: slots ?? set.list[tight].capacity,
      remaining: slots ?? set.list[tight].capacity,
      resetAfterMs: 0,
      retryAfterMs: deny ? 1000 : -1,
      policies: set.list.map((p) => ({ name: p.name, limit: p.capacity, remaining: p.capacity, resetAfterMs: 0, limited: false })),
      source: 'onUnavailable',
    };
    if (!deny) return { proceed: true, status: 200, headers: [], body: undefined, info };
    return {
      proceed: false,
      status: 503,
      headers: [['Retry-After', '1'], ['Content-Type', 'application/problem+json']],
      body: unavailableProblem(),
      info,
    };
  }

  async function check(req: Req): Promise<Outcome> {
    let skipped: boolean;
    try {
      skipped = options.skip !== undefined && (await options.skip(req)) === true;
    } catch (err) {
      return misuse(new CellgateArgumentError('skip', `the skip function threw: ${err instanceof Error ? err.message : String(err)}`, { cause: err }));
    }
    if (skipped) {
      stats.skipped++;
      return { proceed: true, status: 200, headers: [], body: undefined, info: undefined };
    }
    let input: { who: string; units: number; set: PolicySet | undefined };
    try {
      input = await inputs(req);
    } catch (err) {
      return misuse(err);
    }
    const { who, units, set } = input;
    const rate = set === undefined ? undefined : await rateCheck(who, units, set);
    if (gate === undefined) return rate!;
    if (rate !== undefined && !rate.proceed) return rate;
    let key = who;
    if (concurrency!.key !== undefined) {
      try {
        key = await concurrency!.key(req);
      } catch (err) {
        return misuse(new CellgateArgumentError('concurrency', `the concurrency key function threw: ${err instanceof Error ? err.message : String(err)}`, { cause: err }));
      }
      if (typeof key !== 'string' || key.length === 0) return misuse(new CellgateArgumentError('concurrency', `the concurrency key function must return a non-empty string, not ${describe(key)}`));
    }
    const tagged = `${prefix}{${key}}:concurrency`;
    let admission: Admission;
    let source: DecisionSource = 'cellgate';
    try {
      admission = await gate.admit(tagged);
      answered();
    } catch (err) {
      const e = toCellgateError(err);
      if (!(e instanceof CellgateTimeoutError || e instanceof CellgateUnavailableError)) return misuse(e);
      if (onUnavailable === 'deny') return unavailable(e, who, units, { list: [] } as unknown as PolicySet, tagged, concurrency!.limit);
      stats.lastError = e;
      outageStarts(e);
      if (rate === undefined) stats.unavailable++;
      if (insurance === undefined) return rate ?? admitted(who, concurrency!.limit, undefined, 'onUnavailable');
      if (rate === undefined) stats.insurance++;
      admission = gate.insure(tagged);
      source = 'insurance';
    }
    return admitted(who, concurrency!.limit, admission, source, rate);
  }

  /** The outcome of a concurrency admission, on top of the rate limit's (when there is one). */
  function admitted(who: string, limit: number, a: Admission | undefined, source: DecisionSource, rate?: Outcome): Outcome {
    const info: RateLimitInfo = rate?.info ?? { key: who, limited: false, limit, remaining: limit, resetAfterMs: 0, retryAfterMs: -1, policies: [], source };
    if (a === undefined || !a.limited) {
      if (rate === undefined) stats.allowed++;
      if (a !== undefined) info.concurrency = { limit: a.limit, remaining: a.remaining, id: a.id };
      if (rate === undefined && a !== undefined) info.remaining = a.remaining;
      return { ...(rate ?? { proceed: true, status: 200, headers: [], body: undefined }), info, hold: a?.hold };
    }
    // Refused: what the rate limit spent is given back as for any failed request (skipFailedRequests).
    if (rate !== undefined && rate.info?.source !== 'onUnavailable') stats.allowed--;
    stats.limited++;
    rate?.settle?.(statusCode);
    info.limited = true;
    info.retryAfterMs = a.retryAfterMs;
    if (rate === undefined) info.remaining = 0;
    const headers: [string, string][] = [...(rate?.headers ?? []), retryAfterField(Math.max(0, a.retryAfterMs))];
    if (message !== undefined && typeof message !== 'string') {
      headers.push(['Content-Type', 'application/json']);
      return { proceed: false, status: statusCode, headers, body: message, info };
    }
    headers.push(['Content-Type', 'application/problem+json']);
    return { proceed: false, status: statusCode, headers, body: refusalProblem(statusCode, message ?? `at most ${a.limit} requests at once for this key`), info };
  }

  /** The rate limit's decision (cellgate's, or onUnavailable's when it is unavailable). */
  async function rateCheck(who: string, units: number, set: PolicySet): Promise<Outcome> {
    const policies = set.list;
    // The hash tag comes first, so every policy's key of this request lives in one Cluster slot.
    const tagged = `${prefix}{${who}}:`;
    let results: Decision[];
    let limited: boolean;
    try {
      const c = await connection.client;
      if (policies.length === 1) {
        const p = policies[0];
        const d = await c.rl(p.algorithm, tagged + p.name, p.limit, p.periodMs, { burst: p.burst, cost: units, timeoutMs });
        results = [d];
        limited = d.limited;
      } else {
        const limits = policies.map((p) => ({ key: tagged + p.name, algorithm: p.algorithm, limit: p.limit, periodMs: p.periodMs, burst: p.burst }));
        const all = await c.all(limits, { cost: units, timeoutMs });
        limited = all.limited;
        results = all.results;
        if (limited) {
          // RL.ALL answers each limit "as if asked alone": a limit that would have allowed reports
          // what it would hold after spending, but nothing was spent. Its own state is a peek away.
          const now = await c.all(limits, { cost: 0, timeoutMs }).catch(() => undefined);
          results = results.map((d, i) => (d.limited ? d : now !== undefined ? { ...now.results[i], limited: false } : { ...d, remaining: Math.min(d.limit, d.remaining + units) }));
        }
      }
    } catch (err) {
      const e = toCellgateError(err);
      if (e instanceof CellgateTimeoutError || e instanceof CellgateUnavailableError) return unavailable(e, who, units, set, tagged);
      // An argument or reply error (NOPERM, WRONGTYPE, CROSSSLOT...) is a setup to fix, not an outage.
      return misuse(e);
    }
    answered();
    return decided(who, units, set, tagged, results, limited, 'cellgate');
  }

  /** The outcome of a decision (cellgate's or insurance's): header fields, `info`, and a refusal's answer. */
  function decided(who: string, units: number, set: PolicySet, tagged: string, results: Decision[], limited: boolean, source: DecisionSource): Outcome {
    const policies = set.list;
    const headers: [string, string][] = [];
    let tight = 0;
    for (let i = 1; i < results.length; i++) if (results[i].remaining < results[tight].remaining) tight = i;
    pushRateLimitHeaders(headers, draft, legacy, policies, set, results, tight);
    const info: RateLimitInfo = {
      key: who,
      limited,
      limit: results[tight].limit,
      remaining: results[tight].remaining,
      resetAfterMs: results[tight].resetAfterMs,
      retryAfterMs: -1,
      policies: results.map((d, i) => ({ name: policies[i].name, limit: d.limit, remaining: d.remaining, resetAfterMs: d.resetAfterMs, limited: d.limited })),
      source,
    };
    if (!limited) {
      stats.allowed++;
      const outcome: Outcome = { proceed: true, status: 200, headers, body: undefined, info };
      if ((skipFailed || skipSuccessful) && units > 0) outcome.settle = settleFor(tagged, policies, units, source);
      return outcome;
    }
    stats.limited++;
    // The request passes when every refusing policy allows it: the longest wait, unless one never can.
    let refusing = -1;
    let waitMs = 0;
    let never = -1;
    for (let i = 0; i < results.length; i++) {
      if (!results[i].limited) continue;
      if (refusing === -1) refusing = i;
      if (results[i].retryAfterMs < 0) { never = i; break; }
      if (results[i].retryAfterMs > waitMs) { waitMs = results[i].retryAfterMs; refusing = i; }
    }
    if (refusing === -1) refusing = 0;
    let detail: string;
    if (never !== -1) {
      const p = policies[never];
      detail = `this request costs ${units}, and the limit of ${p.quota} never allows more than ${p.capacity} at once`;
    } else {
      info.retryAfterMs = waitMs;
      headers.push(retryAfterField(waitMs));
      detail = `limit is ${policies[refusing].quota} for this key`;
    }
    if (message !== undefined && typeof message !== 'string') {
      headers.push(['Content-Type', 'application/json']);
      return { proceed: false, status: statusCode, headers, body: message, info };
    }
    headers.push(['Content-Type', 'application/problem+json']);
    return { proceed: false, status: statusCode, headers, body: refusalProblem(statusCode, message ?? detail), info };
  }

  return {
    check,
    stats,
    async ready(waitMs = READY_WAIT_MS) {
      await (await connection.client).ready(waitMs);
    },
    async close() {
      await gate?.close();
      if (!connection.owned) return;
      const c = await connection.client.catch(() => undefined);
      await c?.close();
    },
  };
}

/** Counters at zero. */
export function newStats(): LimiterStats {
  return { allowed: 0, limited: 0, skipped: 0, unavailable: 0, insurance: 0, errors: 0, refunded: 0, refundErrors: 0, lastError: undefined, concurrency: newConcurrencyStats() };
}

function checkCost(units: unknown): void {
  if (typeof units !== 'number' || !Number.isSafeInteger(units) || units < 0) throw new CellgateArgumentError('cost', `cost must be an integer >= 0, not ${describe(units)}`);
}
