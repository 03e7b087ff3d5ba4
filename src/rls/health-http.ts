/**
 * envoyproxy/ratelimit's `/healthcheck` and `/rlconfig` on the metrics port (docs/envoy.md), for
 * the probes and the operators that know them:
 *  - `/healthcheck`: `200 OK` while the service can decide (the server ready, a configuration in
 *    force or `rls-force-start yes`, the backend reachable); `500` with an empty body otherwise, as
 *    its health checker answers. The reason is on `/readyz` and in the log, not in this body.
 *  - `/rlconfig`: the configuration in force, one line per limit as its Dump prints it; empty when
 *    none is loaded.
 * Any method, as its router takes any.
 */
import type http from 'node:http';
import type { RlsConfig } from './config.js';

/** Answers `path` if it is one of the two (true), else leaves it (false). */
export function answerHealthHttp(
  path: string,
  res: http.ServerResponse,
  healthReason: () => string | null,
  config: () => RlsConfig | null,
): boolean {
  if (path === '/healthcheck') {
    if (healthReason() === null) res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end('OK');
    else res.writeHead(500, { 'content-length': '0' }).end();
    return true;
  }
  if (path === '/rlconfig') {
    res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(config()?.dump() ?? '');
    return true;
  }
  return false;
}
