/**
 * `cellgate/http`: rate limiting for a plain `node:http` server. `limit(req, res)` resolves to true
 * when the request may go on (the RateLimit fields are already set on `res`), false when it has
 * been answered (429, or 503 when cellgate is unavailable and `onUnavailable` is 'deny').
 *
 *   const limit = createRateLimiter({ client: 'redis://127.0.0.1:6379', policy: { limit: 10, periodMs: 10_000 } });
 *   http.createServer(async (req, res) => { if (!(await limit(req, res))) return; ... });
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createLimiter, problemText, type LimiterStats, type RateLimitOptions, type RequestLike } from './core.js';

export { createLimiter, defaultKey, type Policy, type RateLimitOptions, type LimiterStats, type ProblemDetails, type Outcome } from './core.js';

type Req = IncomingMessage & RequestLike;

export interface HttpRateLimit {
  (req: Req, res: ServerResponse): Promise<boolean>;
  readonly stats: LimiterStats;
}

export function createRateLimiter<R extends Req = Req>(options: RateLimitOptions<R>): HttpRateLimit {
  const limiter = createLimiter<R>(options);
  const limit = async (req: Req, res: ServerResponse): Promise<boolean> => {
    const outcome = await limiter.check(req as R);
    for (const [name, value] of outcome.headers) res.setHeader(name, value);
    if (outcome.proceed) return true;
    res.statusCode = outcome.status;
    res.end(problemText(outcome.body!));
    return false;
  };
  return Object.assign(limit, { stats: limiter.stats });
}
