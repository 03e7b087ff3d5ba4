/**
 * What the HTTP middleware decides, independent of the framework: which key a request is counted
 * under, which cellgate call answers it, and the response it gets (status, header fields, body).
 * The adapters (express.ts, fastify.ts, node.ts) only read the request and write the response.
 *
 * Header fields follow the IETF RateLimit header fields draft (draft-ietf-httpapi-ratelimit-headers):
 * `RateLimit-Policy: "default";q=10;w=10` and `RateLimit: "default";r=4;t=6`, one list member per
 * policy; a refusal is `429` with `Retry-After` and an `application/problem+json` body (RFC 9457).
 * The guide with every option: README.md ("Use it").
 */
import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { CellgateClient, CellgateError, connect, ALGORITHMS, type Algorithm, type Connection, type Decision } from '../client/index.js';

export interface Policy {
  /** The name in the RateLimit fields (default "default", or "p1", "p2"... when there are several). */
  name?: string;
  /** Default "gcra" (RL.GCRA: smooth, one small state per key). */
  algorithm?: Algorithm;
  /** Requests (cost units) per period. */
  limit: number;
  periodMs: number;
  /** Capacity for tokenbucket, leakybucket and gcra (default `limit`). */
  burst?: number;
}

/** What the default key function reads; every framework's request has these. */
export interface RequestLike {
  headers: IncomingHttpHeaders;
  ip?: string;
  socket?: { remoteAddress?: string };
  user?: { id?: unknown } | null;
}

export interface RateLimitOptions<Req = RequestLike> {
  /** A `CellgateClient`, an ioredis / node-redis connection, or a URL (`redis://127.0.0.1:6379`) for a connection of its own. */
  client: CellgateClient | Connection | string;
  /** One policy, or several checked together (all-or-nothing, with `RL.ALL`). */
  policy: Policy | Policy[];
  /** Units a request spends (default 1), or a function of the request. */
  cost?: number | ((req: Req) => number | Promise<number>);
  /**
   * The client a request is counted for. Default: the authenticated user (`req.user.id`), then the
   * `X-API-Key` header (hashed: the key itself never reaches cellgate), then the client IP.
   */
  key?: (req: Req) => string | undefined | null | Promise<string | undefined | null>;
  /** Prefix of every cellgate key (default "cellgate:"). */
  prefix?: string;
  /** When cellgate does not answer in `timeoutMs` or is unreachable: let the request through ('allow', default) or refuse it with 503 ('deny'). */
  onUnavailable?: 'allow' | 'deny';
  /** Milliseconds to wait for cellgate (default 50). */
  timeoutMs?: number;
  /** Requests that are not counted at all (no fields, no call). */
  skip?: (req: Req) => boolean | Promise<boolean>;
  /** Also send `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (default false). */
  legacyHeaders?: boolean;
}

/** Counters an application can export to its metrics. */
export interface LimiterStats {
  allowed: number;
  limited: number;
  skipped: number;
  /** Requests answered by `onUnavailable` because cellgate timed out, was unreachable or answered an error. */
  unavailable: number;
  /** The last such failure, for a log line or a health check. */
  lastError: CellgateError | undefined;
}

export interface Outcome {
  /** True: pass the request on to the application; false: answer it with `status` and `body`. */
  proceed: boolean;
  status: number;
  headers: [string, string][];
  body: ProblemDetails | undefined;
}

export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail: string;
}

export interface Limiter<Req> {
  check(req: Req): Promise<Outcome>;
  readonly stats: LimiterStats;
}

interface ResolvedPolicy {
  name: string;
  algorithm: Algorithm;
  limit: number;
  periodMs: number;
  burst: number | undefined;
  /** `"name";q=10;w=10`, computed once. */
  policyMember: string;
  description: string;
}

export function createLimiter<Req extends RequestLike>(options: RateLimitOptions<Req>): Limiter<Req> {
  const policies = resolvePolicies(options.policy);
  const prefix = options.prefix ?? 'cellgate:';
  const timeoutMs = options.timeoutMs ?? 50;
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) throw new TypeError(`timeoutMs must be an integer >= 1, not ${String(timeoutMs)}`);
  const onUnavailable = options.onUnavailable ?? 'allow';
  if (onUnavailable !== 'allow' && onUnavailable !== 'deny') throw new TypeError(`onUnavailable must be 'allow' or 'deny', not ${String(onUnavailable)}`);
  const keyOf = options.key ?? defaultKey;
  const cost = options.cost ?? 1;
  const legacy = options.legacyHeaders === true;
  const policyHeader = policies.map((p) => p.policyMember).join(', ');
  const client = toClient(options.client);
  // A URL's connection comes up asynchronously; a rejected connect is reported per request.
  client.catch(() => {});
  const stats: LimiterStats = { allowed: 0, limited: 0, skipped: 0, unavailable: 0, lastError: undefined };

  async function check(req: Req): Promise<Outcome> {
    if (options.skip !== undefined && (await options.skip(req))) {
      stats.skipped++;
      return { proceed: true, status: 200, headers: [], body: undefined };
    }
    const who = (await keyOf(req)) || 'anonymous';
    const units = typeof cost === 'function' ? await cost(req) : cost;
    let results: Decision[];
    let limited: boolean;
    try {
      const c = await client;
      if (policies.length === 1) {
        const p = policies[0];
        const d = await c.rl(p.algorithm, `${prefix}${p.name}:${who}`, p.limit, p.periodMs, { burst: p.burst, cost: units, timeoutMs });
        results = [d];
        limited = d.limited;
      } else {
        const all = await c.all(
          policies.map((p) => ({ key: `${prefix}${p.name}:${who}`, algorithm: p.algorithm, limit: p.limit, periodMs: p.periodMs, burst: p.burst })),
          { cost: units, timeoutMs },
        );
        limited = all.limited;
        // RL.ALL answers each limit "as if asked alone": on a refusal, the limits that would have
        // allowed report what they would hold after spending, but nothing was spent.
        results = limited ? all.results.map((d) => (d.limited ? d : { ...d, remaining: Math.min(d.limit, d.remaining + units) })) : all.results;
      }
    } catch (err) {
      stats.unavailable++;
      stats.lastError = err instanceof CellgateError ? err : new CellgateError(String(err), { cause: err });
      if (onUnavailable === 'allow') return { proceed: true, status: 200, headers: [], body: undefined };
      return {
        proceed: false,
        status: 503,
        headers: [['Retry-After', '1'], ['Content-Type', 'application/problem+json']],
        body: { type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'the rate limiter is unavailable, try again shortly' },
      };
    }

    const headers: [string, string][] = [
      ['RateLimit-Policy', policyHeader],
      ['RateLimit', results.map((d, i) => `${sfString(policies[i].name)};r=${d.remaining};t=${ceilSeconds(d.resetAfterMs)}`).join(', ')],
    ];
    if (legacy) {
      // The legacy set has room for one limit: the tightest one.
      let tight = 0;
      for (let i = 1; i < results.length; i++) if (results[i].remaining < results[tight].remaining) tight = i;
      headers.push(['X-RateLimit-Limit', String(results[tight].limit)], ['X-RateLimit-Remaining', String(results[tight].remaining)], ['X-RateLimit-Reset', String(ceilSeconds(results[tight].resetAfterMs))]);
    }
    if (!limited) {
      stats.allowed++;
      return { proceed: true, status: 200, headers, body: undefined };
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
      detail = `this request costs ${units}, more than ${policies[never].description} can ever allow`;
    } else {
      headers.push(['Retry-After', String(Math.max(1, ceilSeconds(waitMs)))]);
      detail = `${policies[refusing].description} for this key`;
    }
    headers.push(['Content-Type', 'application/problem+json']);
    return { proceed: false, status: 429, headers, body: { type: 'about:blank', title: 'Too Many Requests', status: 429, detail } };
  }

  return { check, stats };
}

/** The default key: authenticated user, then API key, then client IP; never "undefined". */
export function defaultKey(req: RequestLike): string {
  const id = req.user?.id;
  if (id !== undefined && id !== null && String(id) !== '') return `user:${String(id)}`;
  const apiKey = req.headers['x-api-key'];
  const k = Array.isArray(apiKey) ? apiKey[0] : apiKey;
  if (k) return `apikey:${createHash('sha256').update(k).digest('hex').slice(0, 32)}`;
  const ip = req.ip ?? req.socket?.remoteAddress;
  return ip ? `ip:${ip}` : 'ip:unknown';
}

function toClient(c: RateLimitOptions['client']): Promise<CellgateClient> {
  if (c instanceof CellgateClient) return Promise.resolve(c);
  if (typeof c === 'string') return connect(c);
  return Promise.resolve(new CellgateClient(c));
}

function resolvePolicies(input: Policy | Policy[]): ResolvedPolicy[] {
  const list = Array.isArray(input) ? input : [input];
  if (list.length === 0 || list[0] === undefined) throw new TypeError('policy: at least one policy is needed');
  const names = new Set<string>();
  return list.map((p, i) => {
    const name = p.name ?? (list.length === 1 ? 'default' : `p${i + 1}`);
    // Structured-field strings are printable ASCII; a name outside that could not be sent.
    if (!/^[\x20-\x7e]+$/.test(name)) throw new TypeError(`policy name '${name}' must be printable ASCII`);
    if (names.has(name)) throw new TypeError(`policy name '${name}' is used twice`);
    names.add(name);
    const algorithm = p.algorithm ?? 'gcra';
    if (!ALGORITHMS.includes(algorithm)) throw new TypeError(`policy '${name}': algorithm must be one of ${ALGORITHMS.join(', ')}`);
    for (const [field, v] of [['limit', p.limit], ['periodMs', p.periodMs], ['burst', p.burst ?? 1]] as const) {
      if (!Number.isSafeInteger(v) || v < 1) throw new TypeError(`policy '${name}': ${field} must be an integer >= 1, not ${String(v)}`);
    }
    return {
      name,
      algorithm,
      limit: p.limit,
      periodMs: p.periodMs,
      burst: p.burst,
      policyMember: `${sfString(name)};q=${p.burst ?? p.limit};w=${ceilSeconds(p.periodMs)}`,
      description: `limit is ${p.limit} ${p.limit === 1 ? 'request' : 'requests'} per ${describePeriod(p.periodMs)}`,
    };
  });
}

function sfString(s: string): string {
  return `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

function ceilSeconds(ms: number): number {
  return ms <= 0 ? 0 : Math.ceil(ms / 1000);
}

function describePeriod(ms: number): string {
  const units: [number, string][] = [[86_400_000, 'day'], [3_600_000, 'hour'], [60_000, 'minute'], [1000, 'second'], [1, 'millisecond']];
  for (const [size, word] of units) {
    if (ms % size === 0) {
      const n = ms / size;
      return n === 1 ? word : `${n} ${word}s`;
    }
  }
  return `${ms} milliseconds`;
}

/** Writes a problem body as the response's JSON text. */
export function problemText(body: ProblemDetails): string {
  return JSON.stringify(body);
}
