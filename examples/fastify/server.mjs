// A Fastify API whose GET /api/hello allows 10 requests per 10 seconds per client, counted by
// cellgate. A client is its X-API-Key when that key is one of API_KEYS, else its IP: an unchecked
// header would let every client pick a new bucket for each request.
//
//   PORT=3000 CELLGATE_URL=redis://127.0.0.1:6379 API_KEYS=key-a,key-b node examples/fastify/server.mjs
//
// CELLGATE_UNAVAILABLE: what to do when cellgate does not answer within CELLGATE_TIMEOUT_MS (default 50): `allow` (default)
// lets requests through, `deny` answers 503, `insurance` decides in this process until cellgate is back
// (docs/middleware.md). Inside this repository `cellgate/fastify` is the workspace package packages/cellgate
// (npm ci builds it); elsewhere, install the `cellgate` package (docs/middleware.md, "Install").
import { createHash } from 'node:crypto';
import Fastify from 'fastify';
import { cellgatePlugin, defaultKey } from 'cellgate/fastify';

const port = Number(process.env.PORT ?? 3000);
const apiKeys = new Set((process.env.API_KEYS ?? '').split(',').map((k) => k.trim()).filter((k) => k !== ''));

const app = Fastify();
await app.register(cellgatePlugin, {
  client: process.env.CELLGATE_URL ?? 'redis://127.0.0.1:6379',
  policy: { name: 'default', limit: 10, periodMs: 10_000 },
  // A listed key is counted per key (hashed: the key itself never reaches cellgate); anything else per IP.
  key: (request) => {
    const apiKey = request.headers['x-api-key'];
    return typeof apiKey === 'string' && apiKeys.has(apiKey) ? `apikey:${createHash('sha256').update(apiKey).digest('hex').slice(0, 32)}` : defaultKey(request);
  },
  onUnavailable: process.env.CELLGATE_UNAVAILABLE ?? 'allow',
  timeoutMs: Number(process.env.CELLGATE_TIMEOUT_MS ?? 50),
});

// request.rateLimit is set on every request the limiter did not skip, whoever decided (request.rateLimit.source).
app.get('/api/hello', async (request) => ({ hello: 'world', remaining: request.rateLimit.remaining }));
// How often cellgate was unreachable, for a metrics scraper (not limited).
app.get('/stats', { config: { rateLimit: false } }, async () => ({ ...app.cellgate.stats, lastError: app.cellgate.stats.lastError?.message }));

await app.listen({ port, host: process.env.HOST ?? '127.0.0.1' });
console.log(JSON.stringify({ msg: 'listening', port: app.server.address().port }));
// app.close() closes the limiter's connection too: the process exits.
process.on('SIGTERM', () => app.close());
