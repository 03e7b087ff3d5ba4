/**
 * `POST /json` shares the metrics port's 16 served connections: under a burst every request gets a
 * status, never silence. A connection answering a request is never closed to make room; while all
 * 16 are answering, a new connection's request is answered 503 with Retry-After (a health probe is
 * still answered 200), and the 16 are answered when their requests complete.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import { RawConnection } from '../helpers/raw.js';
import { counter, startRls, type Rls } from './helpers.js';

const CONFIG = `
domain: d
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1000000 }
`;

const BODY = JSON.stringify({ domain: 'd', descriptors: [{ entries: [{ key: 'user', value: 'u' }] }] });

let rls: Rls;
beforeAll(async () => {
  // A metrics-timeout longer than the test: only the server's handling can answer the burst.
  rls = await startRls({ 'd.yaml': CONFIG }, ['--metrics-timeout', '60000']);
});
afterAll(async () => {
  await rls?.stop();
});

/** One request on a new connection: its status and Retry-After, or the error; bounded. */
function request(port: number, method: string, path: string, body?: string): Promise<{ status: number | string; retryAfter?: string }> {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, agent: false, timeout: 20_000, headers: body === undefined ? {} : { 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'] }));
      res.on('error', (e) => resolve({ status: `response error ${e.message}` }));
    });
    req.on('timeout', () => {
      req.destroy();
      resolve({ status: 'no answer within 20 s' });
    });
    req.on('error', (e) => resolve({ status: `error ${(e as NodeJS.ErrnoException).code ?? e.message}` }));
    req.end(body);
  });
}

describe('/json under load', () => {
  it('60 concurrent requests: each answered 200 or refused 503 with Retry-After', async () => {
    const results = await Promise.all(Array.from({ length: 60 }, () => request(rls.metricsPort, 'POST', '/json', BODY)));
    for (const r of results) {
      if (r.status === 503) expect(r.retryAfter).toBe('1');
      else expect(r.status).toBe(200);
    }
  }, 60_000);

  it('16 connections answering (their bodies still arriving) are never closed; 47 more get 503 + Retry-After, a probe 200', async () => {
    const len = Buffer.byteLength(BODY);
    const held: RawConnection[] = [];
    const before = await rls.metrics();
    try {
      for (let i = 0; i < 16; i++) {
        const conn = await RawConnection.open(rls.metricsPort, { allowHalfOpen: true });
        await conn.write(`POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\n\r\n${BODY.slice(0, 10)}`);
        held.push(conn);
      }
      // The server has parsed their headers: each is a request being answered.
      await new Promise((r) => setTimeout(r, 200));
      // 48 connections beyond the 16 are answered 503 at once (beyond those, one is closed).
      const burst = await Promise.all(Array.from({ length: 48 }, (_, i) => (i === 24 ? request(rls.metricsPort, 'GET', '/healthz') : request(rls.metricsPort, 'POST', '/json', BODY))));
      const probe = burst.splice(24, 1)[0];
      expect(probe.status).toBe(200);
      expect(burst).toEqual(Array(47).fill({ status: 503, retryAfter: '1' }));
      // The 16 held requests complete now and each is answered.
      for (const conn of held) await conn.write(BODY.slice(10));
      for (const conn of held) await conn.waitFor(() => /^HTTP\/1\.1 200 /.test(conn.text()) && conn.text().includes('"overallCode":"OK"'), 10_000, 'the held request\'s answer');
      const text = await rls.metrics();
      // (None of the 16 answering was closed: each got its answer above.) The 47 were told 503.
      expect(counter(text, 'cellgate_metrics_busy_refusals_total{result="status_503"}') - counter(before, 'cellgate_metrics_busy_refusals_total{result="status_503"}')).toBe(47);
    } finally {
      for (const c of held) c.destroy();
    }
  }, 60_000);
});
