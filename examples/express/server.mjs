// An Express API whose GET /api/hello allows 10 requests per 10 seconds per client (the X-API-Key
// header, else the client IP), counted by cellgate.
//
//   PORT=3000 CELLGATE_URL=redis://127.0.0.1:6379 CELLGATE_UNAVAILABLE=allow node examples/express/server.mjs
//
// CELLGATE_UNAVAILABLE: what to do when cellgate does not answer within CELLGATE_TIMEOUT_MS (default 50): `allow` (default)
// lets requests through, `deny` answers 503. Inside this repository `cellgate/express` resolves to
// the package itself (build it first: npm run build); elsewhere, `npm install cellgate express ioredis`.
// HOST (default 127.0.0.1) is the address it listens on: 0.0.0.0 in a container
// (examples/replicas runs two of them, each with its own cellgate sidecar, sharing one limit).
import express from 'express';
import { rateLimit } from 'cellgate/express';

const port = Number(process.env.PORT ?? 3000);
const host = process.env.HOST ?? '127.0.0.1';
const limiter = rateLimit({
  client: process.env.CELLGATE_URL ?? 'redis://127.0.0.1:6379',
  policy: { name: 'default', limit: 10, periodMs: 10_000 },
  onUnavailable: process.env.CELLGATE_UNAVAILABLE === 'deny' ? 'deny' : 'allow',
  timeoutMs: Number(process.env.CELLGATE_TIMEOUT_MS ?? 50),
});

const app = express();
app.get('/api/hello', limiter, (req, res) => {
  res.json({ hello: 'world' });
});
// How often cellgate was unreachable, for a metrics scraper.
app.get('/stats', (req, res) => res.json({ ...limiter.stats, lastError: limiter.stats.lastError?.message }));

const server = app.listen(port, host, () => {
  console.log(JSON.stringify({ msg: 'listening', port: server.address().port }));
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
