/**
 * `cellgate/express`: rate-limiting middleware for Express (4 and 5). Every option is described in
 * core.ts and docs/middleware.md.
 *
 *   app.use('/api', rateLimit({ client: 'redis://127.0.0.1:6379', policy: { limit: 10, periodMs: 10_000 } }));
 *
 * The limiter's figures are on `req.rateLimit` for the handlers downstream. An application error (a
 * `key`, `cost` or `policy` function that throws or returns an invalid value) goes to `next(err)`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createLimiter, problemText, settleWhenDone, type LimiterStats, type RateLimitInfo, type RateLimitOptions, type RequestLike } from './core.js';

export { defaultKey, ipKey, type Policy, type RateLimitOptions, type LimiterStats, type ProblemDetails, type RateLimitInfo, type PolicyState, type HeaderDraft, type DecisionSource, type ConcurrencyOptions, type ConcurrencyInfo, type ConcurrencyStats } from './core.js';

type Req = IncomingMessage & RequestLike & { rateLimit?: RateLimitInfo };
type Next = (err?: unknown) => void;

export interface ExpressRateLimitOptions<R extends Req = Req> extends RateLimitOptions<R> {
  /** Answers a refusal instead of the default problem+json (the RateLimit fields are already set). */
  handler?: (req: R, res: ServerResponse, next: Next, info: RateLimitInfo) => void;
}

export interface ExpressRateLimit {
  (req: Req, res: ServerResponse, next: Next): void;
  readonly stats: LimiterStats;
  /** Resolves once cellgate answers (rejects after `waitMs`, default 1000). */
  ready(waitMs?: number): Promise<void>;
  /** Closes the connection opened from a URL, so that a closed app can exit. */
  close(): Promise<void>;
}

export function rateLimit<R extends Req = Req>(options: ExpressRateLimitOptions<R>): ExpressRateLimit {
  const limiter = createLimiter<R>(options);
  const handler = options.handler;
  if (handler !== undefined && typeof handler !== 'function') throw new TypeError('handler must be a function');
  const middleware = (req: Req, res: ServerResponse, next: Next): void => {
    limiter.check(req as R).then(
      (outcome) => {
        for (const [name, value] of outcome.headers) res.setHeader(name, value);
        if (outcome.info !== undefined) req.rateLimit = outcome.info;
        if (outcome.proceed) {
          settleWhenDone(res, outcome);
          return next();
        }
        // The handler answers the limit's refusals; a 503 of onUnavailable: 'deny' is the middleware's own.
        if (handler !== undefined && outcome.info !== undefined && outcome.info.source !== 'onUnavailable') {
          res.removeHeader('Content-Type');
          try {
            return handler(req as R, res, next, outcome.info);
          } catch (err) {
            return next(err);
          }
        }
        res.statusCode = outcome.status;
        res.end(problemText(outcome.body!));
      },
      // The application's error (already logged once): Express's error handler answers it.
      (err: unknown) => next(err),
    );
  };
  return Object.assign(middleware, { stats: limiter.stats, ready: limiter.ready, close: limiter.close });
}

export default rateLimit;
