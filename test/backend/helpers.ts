/**
 * Shared by the backend tests: cellgate sidecars on one backend (each a real cellgate process,
 * test/helpers/server.ts), their INFO backend section, frozen clocks on one timeline, concurrent
 * pipelined bursts from several connections per sidecar, and the eight limiter commands with the
 * seeds' numbers (10 requests per 10 s).
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { RedisNode } from '../helpers/redis.js';
import { startServer, type RunningServer } from '../helpers/server.js';
import { WAIT_LIMIT_MS } from '../helpers/wait.js';

export interface Sidecar {
  server: RunningServer;
  /** The admin connection (INFO, CONFIG, DEBUG CLOCK). */
  admin: Redis;
  /** Extra connections for bursts. */
  conns: Redis[];
  metricsPort?: number;
}

function connect(port: number): Redis {
  const c = new Redis({ port, host: '127.0.0.1', protocol: 2, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on('error', () => {});
  return c;
}

/** Starts one cellgate with `--backend url` and `conns` burst connections; waits for backend up. */
export async function startSidecar(
  backend: string,
  opts: { args?: string[]; conns?: number; metricsPort?: number; waitUp?: boolean } = {},
): Promise<Sidecar> {
  const args = [...(backend === '' ? [] : ['--backend', backend]), ...(opts.args ?? [])];
  if (opts.metricsPort !== undefined) args.push('--metrics-port', String(opts.metricsPort));
  const server = await startServer({ args });
  const admin = connect(server.port);
  const conns = Array.from({ length: opts.conns ?? 3 }, () => connect(server.port));
  const sidecar: Sidecar = { server, admin, conns, metricsPort: opts.metricsPort };
  if (backend !== '' && opts.waitUp !== false) await waitBackendState(sidecar, 'up');
  return sidecar;
}

export async function startSidecars(n: number, backend: string, opts: Parameters<typeof startSidecar>[1] = {}): Promise<Sidecar[]> {
  return Promise.all(Array.from({ length: n }, () => startSidecar(backend, opts)));
}

/**
 * For a test file that compares the backend's answers with local ones step by step: a real
 * redis-server, a cellgate without a backend (the reference) and two sidecars on that Redis, none with
 * burst connections; started before its tests and stopped after them.
 */
export function useLocalAndPair(): { redis: RedisNode; local: Sidecar; sidecars: Sidecar[] } {
  const env = { sidecars: [] } as unknown as { redis: RedisNode; local: Sidecar; sidecars: Sidecar[] };
  beforeAll(async () => {
    env.redis = await RedisNode.start();
    const [local, ...sidecars] = await Promise.all([startSidecar('', { conns: 0 }), startSidecar(env.redis.url, { conns: 0 }), startSidecar(env.redis.url, { conns: 0 })]);
    env.local = local!;
    env.sidecars = sidecars;
  }, 60_000);
  afterAll(async () => {
    await stopSidecars([env.local, ...env.sidecars]);
    await env.redis?.destroy();
  });
  return env;
}

export async function stopSidecars(sidecars: (Sidecar | undefined)[]): Promise<void> {
  await Promise.all(sidecars.map(async (s) => {
    if (!s) return;
    s.admin.disconnect();
    for (const c of s.conns) c.disconnect();
    await s.server.stop();
  }));
}

/** INFO backend as a field → value map. */
export async function backendInfo(s: Sidecar): Promise<Record<string, string>> {
  const text = String(await s.admin.call('INFO', 'backend'));
  const out: Record<string, string> = {};
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0 && !line.startsWith('#')) out[line.slice(0, i)] = line.slice(i + 1);
  }
  return out;
}

/**
 * Polls INFO backend (every `intervalMs`) until backend_state is `state`: at least `polls` times
 * and for at least WAIT_LIMIT_MS (test/helpers/wait.ts), so a loaded machine's slow polls do not
 * use the bound up. Not a sleep: fails with the last INFO when it never gets there.
 */
export async function waitBackendState(s: Sidecar, state: string, polls = 200, intervalMs = 50): Promise<Record<string, string>> {
  let info: Record<string, string> = {};
  const deadline = Date.now() + WAIT_LIMIT_MS;
  for (let i = 0; i < polls || Date.now() < deadline; i++) {
    info = await backendInfo(s);
    if (info.backend_state === state) return info;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`backend_state never became ${state} in ${WAIT_LIMIT_MS} ms: ${JSON.stringify(info)}\n${s.server.logs.slice(-10).join('\n')}`);
}

/** Freezes every sidecar's clock at `unixMs` (DEBUG CLOCK SET): one timeline for all of them. */
export async function freezeClocks(sidecars: Sidecar[], unixMs: number): Promise<void> {
  await Promise.all(sidecars.map((s) => s.admin.call('DEBUG', 'CLOCK', 'SET', String(unixMs))));
}

/**
 * A frozen instant on a whole minute (windows of 10 s start there), 10 minutes ahead of the real
 * time: the scripts set a key's expiry from the frozen time (PEXPIREAT), and the backend expires
 * by its own clock, so an instant in the past would make every key vanish at once.
 */
export function frozenInstant(): number {
  return Math.ceil(Date.now() / 60_000) * 60_000 + 600_000;
}

export type Reply = unknown;

/**
 * Sends `perConn` calls of `argv` pipelined on every burst connection of every sidecar, all at
 * once, and returns every reply (an error reply as its Error) with the sidecar it came from.
 */
export async function burst(sidecars: Sidecar[], argv: (key: string) => string[], key: string, perConn: number): Promise<{ sidecar: number; reply: Reply }[]> {
  const jobs: Promise<{ sidecar: number; reply: Reply }[]>[] = [];
  sidecars.forEach((s, si) => {
    for (const c of s.conns) {
      const pipe = c.pipeline();
      const [cmd, ...args] = argv(key);
      for (let i = 0; i < perConn; i++) pipe.call(cmd, ...args);
      jobs.push(pipe.exec().then((res) => res!.map(([err, v]) => ({ sidecar: si, reply: err ?? v }))));
    }
  });
  return (await Promise.all(jobs)).flat();
}

/** The limited flag of a limiter reply ([limited, ...]); throws on an error reply. */
export function limited(reply: Reply): number {
  if (reply instanceof Error) throw reply;
  if (!Array.isArray(reply)) throw new Error(`not a limiter reply: ${JSON.stringify(reply)}`);
  return Number(reply[0]);
}

export function countAllowed(replies: Reply[]): number {
  return replies.filter((r) => limited(r) === 0).length;
}

export interface Algo {
  name: string;
  argv: (key: string) => string[];
  /** What one server allows of a burst on a fresh key at one instant. */
  limit: number;
  /** The `deny` policy's reply (limit field, ms or s). */
  denyReply: number[];
}

/** The eight limiter commands, each with the seeds' numbers: 10 requests per 10 s. */
export const ALGOS: Algo[] = [
  { name: 'CL.THROTTLE', argv: (k) => ['CL.THROTTLE', k, '9', '10', '10'], limit: 10, denyReply: [1, 10, 0, 1, 1] },
  { name: 'GCRA', argv: (k) => ['GCRA', k, '9', '10', '10'], limit: 10, denyReply: [1, 10, 0, 1, 1] },
  { name: 'RL.TOKENBUCKET', argv: (k) => ['RL.TOKENBUCKET', k, '10', '10000'], limit: 10, denyReply: [1, 10, 0, 1000, 1000, 0] },
  { name: 'RL.LEAKYBUCKET', argv: (k) => ['RL.LEAKYBUCKET', k, '10', '10000'], limit: 10, denyReply: [1, 10, 0, 1000, 1000, 0] },
  { name: 'RL.FIXEDWINDOW', argv: (k) => ['RL.FIXEDWINDOW', k, '10', '10000'], limit: 10, denyReply: [1, 10, 0, 1000, 1000, 0] },
  { name: 'RL.SLIDINGWINDOW', argv: (k) => ['RL.SLIDINGWINDOW', k, '10', '10000'], limit: 10, denyReply: [1, 10, 0, 1000, 1000, 0] },
  { name: 'RL.SLIDINGLOG', argv: (k) => ['RL.SLIDINGLOG', k, '10', '10000'], limit: 10, denyReply: [1, 10, 0, 1000, 1000, 0] },
  { name: 'RL.GCRA', argv: (k) => ['RL.GCRA', k, '10', '10000'], limit: 10, denyReply: [1, 10, 0, 1000, 1000, 0] },
];

/**
 * One call through each sidecar until the backend, not the policy, answered it (at most `tries`):
 * the first call after a start sends the script's body to Redis, and on a loaded machine a first
 * burst of those can outlast a short backend-timeout.
 */
export async function warmUp(sidecars: Sidecar[], tries = 50): Promise<void> {
  await Promise.all(sidecars.map(async (s) => {
    for (let i = 0; i < tries; i++) {
      const before = Number((await backendInfo(s)).backend_policy_decisions);
      await s.admin.call('RL.FIXEDWINDOW', 'warm-up', '1000000', '10000');
      if (Number((await backendInfo(s)).backend_policy_decisions) === before) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`warm-up: the backend never answered through ${s.server.port}`);
  }));
}

/**
 * Polls `check` (every `intervalMs`) until it returns true: at least `polls` times and for at least
 * WAIT_LIMIT_MS (test/helpers/wait.ts). Returns the number of polls it took.
 */
export async function pollUntil(check: () => Promise<boolean>, what: string, polls = 200, intervalMs = 25): Promise<number> {
  const deadline = Date.now() + WAIT_LIMIT_MS;
  for (let i = 0; i < polls || Date.now() < deadline; i++) {
    if (await check()) return i;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`${what}: not true after ${WAIT_LIMIT_MS} ms`);
}
