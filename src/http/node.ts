/**
 * `cellgate/http`: rate limiting for a plain `node:http` server. `limit(req, res)` resolves to true
 * when the request may go on (the RateLimit fields are already set on `res`, the figures on
 * `req.rateLimit`), false when it has been answered (429, 503 when cellgate is unavailable and
 * `onUnavailable` is 'deny', or 500 when a `key`, `cost` or `policy` function threw or returned an
 * invalid value: node:http has no error handler of its own, and the error is logged once).
 *
 *   const limit = createRateLimiter({ client: 'redis://127.0.0.1:6379', policy: { limit: 10, periodMs: 10_000 } });
 *   http.createServer(async (req, res) => { if (!(await limit(req, res))) return; ... });
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createLimiter, problemText, settleWhenDone, type LimiterStats, type RateLimitInfo, type RateLimitOptions, type RequestLike } from './core.js';

export { createLimiter, defaultKey, ipKey, type RequestLike, type Policy, type RateLimitOptions, type LimiterStats, type ProblemDetails, type Outcome, type RateLimitInfo, type PolicyState, type HeaderDraft, type DecisionSource, type ConcurrencyOptions, type ConcurrencyInfo, type ConcurrencyStats } from './core.js';

type Req = IncomingMessage & RequestLike & { rateLimit?: RateLimitInfo };

export interface HttpRateLimitOptions<R extends Req = Req> extends RateLimitOptions<R> {
  /** Answers a refusal instead of the default problem+json (the RateLimit fields are already set). */
  handler?: (req: R, res: ServerResponse, info: RateLimitInfo) => void;
}

export interface HttpRateLimit {
  (req: Req, res: ServerResponse): Promise<boolean>;
  readonly stats: LimiterStats;
  /** Resolves once cellgate answers (rejects after `waitMs`, default 1000). */
  ready(waitMs?: number): Promise<void>;
  /** Closes the connection opened from a URL, so that a closed app can exit. */
  close(): Promise<void>;
}

export function createRateLimiter<R extends Req = Req>(options: HttpRateLimitOptions<R>): HttpRateLimit {
  const limiter = createLimiter<R>(options);
  const handler = options.handler;
  if (handler !== undefined && typeof handler !== 'function') throw new TypeError('handler must be a function');
  const limit = async (req: Req, res: ServerResponse): Promise<boolean> => {
    let outcome;
    try {
      outcome = await limiter.check(req as R);
    } catch {
      res.statusCode = 500;
      res.setHeader('Content-Type', 'application/problem+json');
      res.end(problemText({ type: 'about:blank', title: 'Internal Server Error', status: 500, detail: 'the rate limiter is misconfigured' }));
      return false;
    }
    for (const [name, value] of outcome.headers) res.setHeader(name, value);
    if (outcome.info !== undefined) req.rateLimit = outcome.info;
    if (outcome.proceed) {
      settleWhenDone(res, outcome);
      return true;
    }
    // The handler answers the limit's refusals; a 503 of onUnavailable: 'deny' is the middleware's own.
    if (handler !== undefined && outcome.info !== undefined && outcome.info.source !== 'onUnavailable') {
      res.removeHeader('Content-Type');
      handler(req as R, res, outcome.info);
      return false;
    }
    res.statusCode = outcome.status;
    res.end(problemText(outcome.body!));
    return false;
  };
  return Object.assign(limit, { stats: limiter.stats, ready: limiter.ready, close: limiter.close });
}
