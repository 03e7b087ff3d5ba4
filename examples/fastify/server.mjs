// A Fastify API whose GET /api/hello allows 10 requests per 10 seconds per client (the X-API-Key
// header, else the client IP), counted by cellgate.
//
//   PORT=3000 CELLGATE_URL=redis://127.0.0.1:6379 CELLGATE_UNAVAILABLE=allow node examples/fastify/server.mjs
//
// CELLGATE_UNAVAILABLE: what to do when cellgate does not answer within CELLGATE_TIMEOUT_MS (default 50): `allow` (default)
// lets requests through, `deny` answers 503. Inside this repository `cellgate/fastify` resolves to
// the package itself (build it first: npm run build); elsewhere, `npm install cellgate fastify ioredis`.
import Fastify from 'fastify';
import { rateLimit } from 'cellgate/fastify';

const port = Number(process.env.PORT ?? 3000);
const limiter = rateLimit({
  client: process.env.CELLGATE_URL ?? 'redis://127.0.0.1:6379',
  policy: { name: 'default', limit: 10, periodMs: 10_000 },
  onUnavailable: process.env.CELLGATE_UNAVAILABLE === 'deny' ? 'deny' : 'allow',
  timeoutMs: Number(process.env.CELLGATE_TIMEOUT_MS ?? 50),
});

const app = Fastify();
app.get('/api/hello', { onRequest: limiter }, async () => ({ hello: 'world' }));
// How often cellgate was unreachable, for a metrics scraper.
app.get('/stats', async () => ({ ...limiter.stats, lastError: limiter.stats.lastError?.message }));

await app.listen({ port, host: '127.0.0.1' });
console.log(JSON.stringify({ msg: 'listening', port: app.server.address().port }));
process.on('SIGTERM', () => app.close().then(() => process.exit(0)));
