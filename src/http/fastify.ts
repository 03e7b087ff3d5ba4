/**
 * `cellgate/fastify`: rate limiting for Fastify as an `onRequest` hook, for the whole instance or one
 * route. Every option is described in core.ts and README.md ("Use it").
 *
 *   fastify.addHook('onRequest', rateLimit({ client: 'redis://127.0.0.1:6379', policy: { limit: 10, periodMs: 10_000 } }));
 *   fastify.get('/api/hello', { onRequest: rateLimit(...) }, handler);
 */
import type { IncomingHttpHeaders } from 'node:http';
import { createLimiter, type LimiterStats, type RateLimitOptions, type RequestLike } from './core.js';

export { defaultKey, type Policy, type RateLimitOptions, type LimiterStats, type ProblemDetails } from './core.js';

/** What the hook uses of Fastify's request and reply (kept structural: no type dependency on fastify). */
export interface FastifyRequestLike extends RequestLike {
  headers: IncomingHttpHeaders;
  ip: string;
}
export interface FastifyReplyLike {
  header(name: string, value: string): unknown;
  code(status: number): unknown;
  type(contentType: string): unknown;
  send(payload?: unknown): unknown;
}

export interface FastifyRateLimit {
  (request: FastifyRequestLike, reply: FastifyReplyLike): Promise<void>;
  readonly stats: LimiterStats;
}

export function rateLimit<R extends FastifyRequestLike = FastifyRequestLike>(options: RateLimitOptions<R>): FastifyRateLimit {
  const limiter = createLimiter<R>(options);
  const hook = async (request: FastifyRequestLike, reply: FastifyReplyLike): Promise<void> => {
    const outcome = await limiter.check(request as R);
    for (const [name, value] of outcome.headers) if (name !== 'Content-Type') reply.header(name, value);
    if (outcome.proceed) return;
    reply.code(outcome.status);
    reply.type('application/problem+json');
    // Sending from an async onRequest hook ends the request there: the route handler does not run.
    await reply.send(Buffer.from(JSON.stringify(outcome.body)));
  };
  return Object.assign(hook, { stats: limiter.stats });
}

export default rateLimit;
