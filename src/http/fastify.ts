/**
 * `cellgate/fastify`: rate limiting for Fastify, as a plugin or as an `onRequest` hook. Every option
 * is described in core.ts and docs/middleware.md.
 *
 *   await app.register(cellgatePlugin, { client: 'redis://127.0.0.1:6379', policy: { limit: 10, periodMs: 10_000 } });
 *   app.get('/api/hello', { config: { rateLimit: { policy: { limit: 2, periodMs: 1000 } } } }, handler); // its own policy
 *   app.get('/health', { config: { rateLimit: false } }, handler);                                        // not limited
 *
 *   app.addHook('onRequest', rateLimit({ ... }));                  // the hook alone, for the instance
 *   await app.register(rateLimit({ ... }));                        // the same, registered
 *   app.get('/api/hello', { onRequest: rateLimit({ ... }) }, handler); // or for one route
 *
 * The limiter's figures are on `request.rateLimit`. An application error (a `key`, `cost` or
 * `policy` function that throws or returns an invalid value) is thrown from the hook: Fastify's
 * error handler answers it (500).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { createLimiter, newStats, settleWhenDone, shareClient, type LimiterStats, type ResponseEvents, type RateLimitInfo, type RateLimitOptions, type RequestLike, type SharedClient } from './core.js';

export { defaultKey, ipKey, type Policy, type RateLimitOptions, type LimiterStats, type ProblemDetails, type RateLimitInfo, type PolicyState, type HeaderDraft, type DecisionSource, type ConcurrencyOptions, type ConcurrencyInfo, type ConcurrencyStats } from './core.js';

/** What the hook uses of Fastify's request and reply (kept structural: no type dependency on fastify). */
export interface FastifyRequestLike extends RequestLike {
  headers: IncomingHttpHeaders;
  ip: string;
  rateLimit?: RateLimitInfo;
}
export interface FastifyReplyLike {
  header(name: string, value: string): unknown;
  code(status: number): unknown;
  type(contentType: string): unknown;
  send(payload?: unknown): unknown;
  /** node:http's response (for skipFailedRequests / skipSuccessfulRequests). */
  raw?: ResponseEvents;
}

export interface FastifyRateLimitOptions<R extends FastifyRequestLike = FastifyRequestLike> extends RateLimitOptions<R> {
  /** Answers a refusal instead of the default problem+json (the RateLimit fields are already set). */
  handler?: (request: R, reply: FastifyReplyLike, info: RateLimitInfo) => unknown;
}

export interface FastifyRateLimit {
  /** The onRequest hook. */
  (request: FastifyRequestLike, reply: FastifyReplyLike): Promise<void>;
  /** As a plugin: `app.register(rateLimit({...}))` adds the hook to the registering instance. */
  (instance: FastifyInstanceLike, options?: unknown): Promise<void>;
  readonly stats: LimiterStats;
  /** Resolves once cellgate answers (rejects after `waitMs`, default 1000). */
  ready(waitMs?: number): Promise<void>;
  /** Closes the connection opened from a URL, so that a closed app can exit. */
  close(): Promise<void>;
}

export function rateLimit<R extends FastifyRequestLike = FastifyRequestLike>(options: FastifyRateLimitOptions<R>): FastifyRateLimit {
  return hookFor(options, undefined);
}

function hookFor<R extends FastifyRequestLike>(options: FastifyRateLimitOptions<R>, shared: SharedClient | undefined): FastifyRateLimit {
  const limiter = createLimiter<R>(options, shared);
  const handler = options.handler;
  if (handler !== undefined && typeof handler !== 'function') throw new TypeError('handler must be a function');
  const hook = async (request: FastifyRequestLike | FastifyInstanceLike, reply?: unknown): Promise<void> => {
    // `app.register(rateLimit({...}))` calls this as a plugin, with the instance: become its hook.
    if (isInstance(request)) {
      request.addHook('onRequest', hook);
      request.addHook('onClose', () => limiter.close());
      return;
    }
    const res = reply as FastifyReplyLike;
    const outcome = await limiter.check(request as R);
    for (const [name, value] of outcome.headers) if (name !== 'Content-Type') res.header(name, value);
    if (outcome.info !== undefined) request.rateLimit = outcome.info;
    if (outcome.proceed) {
      // Fastify's reply wraps node:http's response: its events say when the response is done.
      if ((outcome.settle !== undefined || outcome.hold !== undefined) && res.raw !== undefined) settleWhenDone(res.raw, outcome);
      return;
    }
    // The handler answers the limit's refusals; a 503 of onUnavailable: 'deny' is the middleware's own.
    if (handler !== undefined && outcome.info !== undefined && outcome.info.source !== 'onUnavailable') {
      await handler(request as R, res, outcome.info);
      return;
    }
    res.code(outcome.status);
    res.type(outcome.headers.find(([name]) => name === 'Content-Type')?.[1] ?? 'application/problem+json');
    // Sending from an async onRequest hook ends the request there: the route handler does not run.
    await res.send(Buffer.from(JSON.stringify(outcome.body)));
  };
  // Registered as a plugin, the hook applies to the instance that registers it (as fastify-plugin does).
  return Object.assign(hook, { stats: limiter.stats, ready: limiter.ready, close: limiter.close, [Symbol.for('skip-override')]: true });
}

function isInstance(x: unknown): x is FastifyInstanceLike {
  return typeof (x as { addHook?: unknown }).addHook === 'function' && typeof (x as { register?: unknown }).register === 'function';
}

/** `app.cellgate` after the plugin is registered: the instance policy's counters, and a readiness check. */
export interface CellgateHandle {
  readonly stats: LimiterStats;
  /** Resolves once cellgate answers (rejects after `waitMs`, default 1000). */
  ready(waitMs?: number): Promise<void>;
}

/** The plugin's options: the instance's limit (optional when only some routes are limited). */
export type CellgatePluginOptions = FastifyRateLimitOptions;

/** A route's `config.rateLimit`: its own options over the plugin's (same connection), or false for none. */
export type RouteRateLimit = Partial<Omit<FastifyRateLimitOptions, 'client'>> | false;

export interface FastifyInstanceLike {
  addHook(name: 'onRoute', hook: (route: RouteOptionsLike) => void): unknown;
  addHook(name: 'onClose', hook: () => Promise<void>): unknown;
  addHook(name: 'onRequest', hook: (request: FastifyRequestLike, reply: FastifyReplyLike) => Promise<void>): unknown;
  register(plugin: unknown, options?: unknown): unknown;
  decorateRequest(name: string, value: unknown): unknown;
  decorate(name: string, value: unknown): unknown;
  hasDecorator(name: string): boolean;
  hasRequestDecorator(name: string): boolean;
}
export interface RouteOptionsLike {
  config?: { rateLimit?: RouteRateLimit };
  onRequest?: unknown;
}

/**
 * `app.register(cellgatePlugin, options)`: limits every route registered after it by `options.policy`
 * (when given), a route with `config: { rateLimit: {...} }` by its own options, and none with
 * `config: { rateLimit: false }`. One connection for all, opened at registration and closed with the
 * app (`app.close()`).
 */
export async function cellgatePlugin(app: FastifyInstanceLike, options: CellgatePluginOptions): Promise<void> {
  const shared = shareClient(options.client);
  const global = options.policy !== undefined || options.concurrency !== undefined ? hookFor(options as FastifyRateLimitOptions, shared) : undefined;
  if (!app.hasRequestDecorator('rateLimit')) app.decorateRequest('rateLimit', null);
  const stats: LimiterStats = global?.stats ?? newStats();
  const handle: CellgateHandle = {
    stats,
    ready: async (waitMs?: number) => { await (await shared.client).ready(waitMs ?? 1000); },
  };
  if (!app.hasDecorator('cellgate')) app.decorate('cellgate', handle);
  app.addHook('onRoute', (route) => {
    const own = route.config?.rateLimit;
    if (own === false) return;
    let hook = global;
    if (own !== undefined && own !== null) {
      if (typeof own !== 'object') throw new TypeError('config.rateLimit must be an options object or false');
      const merged = { ...options, ...own, client: options.client } as FastifyRateLimitOptions;
      if (merged.policy === undefined && merged.concurrency === undefined) throw new TypeError('config.rateLimit needs a policy or a concurrency limit (the plugin was registered without either)');
      hook = hookFor(merged, shared);
    }
    if (hook === undefined) return;
    const existing = route.onRequest;
    route.onRequest = existing === undefined ? [hook] : Array.isArray(existing) ? [...(existing as unknown[]), hook] : [existing, hook];
  });
  app.addHook('onClose', async () => {
    if (shared.owned) await (await shared.client.catch(() => undefined))?.close();
  });
}

// Fastify applies a plugin marked so to the instance that registers it, not to a child context
// (what the fastify-plugin package does), so the hooks reach the routes registered beside it.
Object.assign(cellgatePlugin, { [Symbol.for('skip-override')]: true, [Symbol.for('fastify.display-name')]: 'cellgate' });

export default rateLimit;
