/**
 * A real cellgate whose rate limit configuration comes from the tests' xDS server (xds-server.ts),
 * with a gRPC client of its rls-port built from Envoy's published definitions (helpers.ts).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { freePort, MAIN, startServer, type RunningServer } from '../helpers/server.js';
import { RateLimitServiceClient, T0, type Response } from './helpers.js';

export interface XdsCellgate {
  server: RunningServer;
  redis: Redis;
  rlsPort: number;
  metricsPort: number;
  should(domain: string, entries: { key: string; value?: string }[]): Promise<Response>;
  /** INFO rls as a field → value map. */
  info(): Promise<Record<string, string>>;
  readyz(): Promise<{ status: number; text: string }>;
  metrics(): Promise<string>;
  /** Log lines (JSON) whose message includes `text`. */
  logged(text: string): { msg: string; [k: string]: unknown }[];
  stop(): Promise<void>;
}

export async function startXdsCellgate(xdsPort: number, args: string[] = [], env: Record<string, string> = {}): Promise<XdsCellgate> {
  const rlsPort = await freePort();
  const metricsPort = await freePort();
  const server = await startServer({
    args: ['--rls-port', String(rlsPort), '--metrics-port', String(metricsPort), '--rls-xds-server', `127.0.0.1:${xdsPort}`, '--rls-xds-retry-ms', '100', ...args],
    env,
  });
  return wrap(server, rlsPort, metricsPort);
}

export async function wrap(server: RunningServer, rlsPort: number, metricsPort: number): Promise<XdsCellgate> {
  const redis = new Redis({ port: server.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
  await redis.connect();
  await redis.call('DEBUG', 'CLOCK', 'SET', String(T0));
  const client = new RateLimitServiceClient(`127.0.0.1:${rlsPort}`, grpc.credentials.createInsecure());
  return {
    server, redis, rlsPort, metricsPort,
    should: (domain, entries) => new Promise((resolve, reject) => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      (client as any).ShouldRateLimit({ domain, descriptors: [{ entries }] }, { deadline: Date.now() + 10_000 }, (e: grpc.ServiceError | null, r: Response) => (e ? reject(e) : resolve(r)));
    }),
    info: async () => {
      const text = String(await redis.call('INFO', 'rls'));
      const out: Record<string, string> = {};
      for (const line of text.split('\r\n')) {
        const i = line.indexOf(':');
        if (i > 0 && !line.startsWith('#')) out[line.slice(0, i)] = line.slice(i + 1);
      }
      return out;
    },
    readyz: async () => {
      const r = await fetch(`http://127.0.0.1:${metricsPort}/readyz`);
      return { status: r.status, text: await r.text() };
    },
    metrics: async () => (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text(),
    logged: (text) => server.logs.flatMap((line) => {
      try {
        const entry = JSON.parse(line) as { msg: string };
        return entry.msg.includes(text) ? [entry] : [];
      } catch {
        return [];
      }
    }),
    stop: async () => {
      client.close();
      redis.disconnect();
      await server.stop();
    },
  };
}

/** A domain `name` with one limit on key `k`: `n` a minute. */
export function oneLimit(name: string, domain: string, n: number, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { name, domain, descriptors: [{ key: 'k', rate_limit: { unit: 'MINUTE', requests_per_unit: n }, ...extra }] };
}

/** Runs cellgate with `args` until it exits (a start that must be refused): its exit code and output. */
export async function refusedStart(args: string[]): Promise<{ status: number | null; output: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'cellgate-xds-start-'));
  try {
    const proc = spawn(process.execPath, [MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--warmup', 'no', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    proc.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')));
    proc.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')));
    // A busy machine may take long to start node; a server that kept running is killed at the end.
    const timer = setTimeout(() => proc.kill('SIGKILL'), 60_000);
    const status = await new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
    clearTimeout(timer);
    return { status, output };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
