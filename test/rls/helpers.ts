/**
 * A real cellgate with the rate limit service on, and a gRPC client built from Envoy's published
 * message definitions (proto/, loaded with @grpc/proto-loader: not cellgate's own code).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Redis } from 'ioredis';
import { freePort, startServer, type RunningServer } from '../helpers/server.js';

export const PROTO_DIR = fileURLToPath(new URL('../../proto/', import.meta.url));

const def = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'], {
  includeDirs: [PROTO_DIR], keepCase: true, longs: Number, enums: String, defaults: true,
});
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const pkg = grpc.loadPackageDefinition(def) as any;
export const RateLimitServiceClient = pkg.envoy.service.ratelimit.v3.RateLimitService as typeof grpc.Client;
export const HealthClient = pkg.grpc.health.v1.Health as typeof grpc.Client;

export interface Status {
  code: string;
  current_limit: { requests_per_unit: number; unit: string; name: string } | null;
  limit_remaining: number;
  duration_until_reset: { seconds: number; nanos: number } | null;
}
export interface Response {
  overall_code: string;
  statuses: Status[];
  response_headers_to_add: { key: string; value: string }[];
}
export interface Descriptor {
  entries: { key: string; value?: string }[];
  limit?: { requests_per_unit: number; unit: string };
  hits_addend?: { value: number };
}

export interface Rls {
  server: RunningServer;
  redis: Redis;
  rlsPort: number;
  metricsPort: number;
  configDir: string;
  client: grpc.Client;
  should(domain: string, descriptors: Descriptor[], hitsAddend?: number): Promise<Response>;
  /** The gRPC error of a call expected to fail. */
  shouldFail(request: unknown): Promise<grpc.ServiceError>;
  write(name: string, text: string): void;
  metrics(): Promise<string>;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/** T0: a frozen debug clock at the start of a minute, hour and day (ms). */
export const T0 = 1_800_000_000_000 - (1_800_000_000_000 % 86_400_000);

/** `wrap`: a command that execs the server (startServer's), e.g. prlimit. */
export async function startRls(files: Record<string, string>, args: string[] = [], wrap?: string[]): Promise<Rls> {
  const configDir = mkdtempSync(join(tmpdir(), 'cellgate-rls-'));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(configDir, name), text);
  const rlsPort = await freePort();
  const metricsPort = await freePort();
  // A wide start deadline: a start that reads its configuration in a worker thread takes seconds on a busy machine.
  const server = await startServer({ args: ['--rls-port', String(rlsPort), '--rls-config', configDir, '--metrics-port', String(metricsPort), ...args], wrap, readyTimeoutMs: 60_000 });
  const redis = new Redis({ port: server.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
  await redis.connect();
  await redis.call('DEBUG', 'CLOCK', 'SET', String(T0));
  const client = new RateLimitServiceClient(`127.0.0.1:${rlsPort}`, grpc.credentials.createInsecure());
  // The fields this service fills (the decoded message also has the defaults of the others: quota...).
  const call = (request: unknown): Promise<Response> =>
    new Promise((resolve, reject) => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      (client as any).ShouldRateLimit(request, (e: grpc.ServiceError | null, r: Response) => (e ? reject(e) : resolve({
        overall_code: r.overall_code,
        statuses: r.statuses.map((s) => ({ code: s.code, current_limit: s.current_limit, limit_remaining: s.limit_remaining, duration_until_reset: s.duration_until_reset })),
        response_headers_to_add: r.response_headers_to_add.map((h) => ({ key: h.key, value: h.value })),
      })));
    });
  return {
    server, redis, rlsPort, metricsPort, configDir, client,
    should: (domain, descriptors, hitsAddend = 0) => call({ domain, descriptors, hits_addend: hitsAddend }),
    shouldFail: async (request) => {
      try {
        await call(request);
      } catch (e) {
        return e as grpc.ServiceError;
      }
      throw new Error('the call succeeded');
    },
    write: (name, text) => writeFileSync(join(configDir, name), text),
    metrics: async () => (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text(),
    stop: async (signal?: NodeJS.Signals) => {
      client.close();
      redis.disconnect();
      await server.stop(signal);
      rmSync(configDir, { recursive: true, force: true });
    },
  };
}

/** Waits until `check` holds (a log line appeared, a counter moved), polling; fails after `ms`. */
export async function until(check: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A counter's value in a Prometheus exposition (`name{labels}`), or 0. */
export function counter(text: string, series: string): number {
  for (const line of text.split('\n')) if (line.startsWith(series + ' ')) return Number(line.slice(series.length + 1));
  return 0;
}
