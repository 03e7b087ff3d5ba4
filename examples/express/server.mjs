// An Express API whose GET /api/hello allows 10 requests per 10 seconds per client, counted by
// cellgate. A client is its X-API-Key when that key is one of API_KEYS, else its IP: an unchecked
// header would let every client pick a new bucket for each request.
//
//   PORT=3000 CELLGATE_URL=redis://127.0.0.1:6379 API_KEYS=key-a,key-b node examples/express/server.mjs
//
// CELLGATE_UNAVAILABLE: what to do when cellgate does not answer within CELLGATE_TIMEOUT_MS (default 50): `allow` (default)
// lets requests through, `deny` answers 503, `insurance` decides in this process until cellgate is back
// (docs/middleware.md). Inside this repository `cellgate/express` is the workspace package packages/cellgate
// (npm ci builds it); elsewhere, install the `cellgate` package (docs/middleware.md, "Install").
// HOST (default 127.0.0.1) is the address it listens on: 0.0.0.0 in a container
// (examples/replicas runs two of them, each with its own cellgate sidecar, sharing one limit).
import { createHash } from 'node:crypto';
import express from 'express';
import { rateLimit, defaultKey } from 'cellgate/express';

const port = Number(process.env.PORT ?? 3000);
const host = process.env.HOST ?? '127.0.0.1';
const apiKeys = new Set((process.env.API_KEYS ?? '').split(',').map((k) => k.trim()).filter((k) => k !== ''));

const limiter = rateLimit({
  client: process.env.CELLGATE_URL ?? 'redis://127.0.0.1:6379',
  policy: { name: 'default', limit: 10, periodMs: 10_000 },
  // A listed key is counted per key (hashed: the key itself never reaches cellgate); anything else per IP.
  key: (req) => {
    const apiKey = req.get('x-api-key');
    return apiKey !== undefined && apiKeys.has(apiKey) ? `apikey:${createHash('sha256').update(apiKey).digest('hex').slice(0, 32)}` : defaultKey(req);
  },
  onUnavailable: process.env.CELLGATE_UNAVAILABLE ?? 'allow',
  timeoutMs: Number(process.env.CELLGATE_TIMEOUT_MS ?? 50),
});

const app = express();
app.get('/api/hello', limiter, (req, res) => {
  // req.rateLimit is set on every request the limiter did not skip, whoever decided (req.rateLimit.source).
  res.json({ hello: 'world', remaining: req.rateLimit.remaining });
});
// How often cellgate was unreachable, for a metrics scraper.
app.get('/stats', (req, res) => res.json({ ...limiter.stats, lastError: limiter.stats.lastError?.message }));

const server = app.listen(port, host, () => {
  console.log(JSON.stringify({ msg: 'listening', port: server.address().port }));
});
// Closing the server and the limiter's connection leaves nothing to wait for: the process exits.
process.on('SIGTERM', () => server.close(() => limiter.close()));
