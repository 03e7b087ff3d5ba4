/**
 * `cellgate/express`: rate-limiting middleware for Express (4 and 5). Every option is described in
 * core.ts and README.md ("Use it").
 *
 *   app.use('/api', rateLimit({ client: 'redis://127.0.0.1:6379', policy: { limit: 10, periodMs: 10_000 } }));
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createLimiter, problemText, type LimiterStats, type RateLimitOptions, type RequestLike } from './core.js';

export { defaultKey, type Policy, type RateLimitOptions, type LimiterStats, type ProblemDetails } from './core.js';

type Req = IncomingMessage & RequestLike;
type Next = (err?: unknown) => void;

export interface ExpressRateLimit {
  (req: Req, res: ServerResponse, next: Next): void;
  readonly stats: LimiterStats;
}

export function rateLimit<R extends Req = Req>(options: RateLimitOptions<R>): ExpressRateLimit {
  const limiter = createLimiter<R>(options);
  const middleware = (req: Req, res: ServerResponse, next: Next): void => {
    limiter.check(req as R).then(
      (outcome) => {
        for (const [name, value] of outcome.headers) res.setHeader(name, value);
        if (outcome.proceed) return next();
        res.statusCode = outcome.status;
        res.end(problemText(outcome.body!));
      },
      // A throwing key, cost or skip function is the application's error: Express's handler reports it.
      (err: unknown) => next(err),
    );
  };
  return Object.assign(middleware, { stats: limiter.stats });
}

export default rateLimit;
