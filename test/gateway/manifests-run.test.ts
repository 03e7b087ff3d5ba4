/**
 * Each topology of examples/kubernetes run for real from its own manifest: cellgate with exactly the
 * arguments and environment its container gets (the image's ENV, then the container's env with the
 * file's Secrets, the pod address and `$(VAR)` expansion; mounted Secrets and ConfigMaps laid out as
 * the kubelet lays them out, `..data` link included), ports moved to free ones, the pod's address
 * 127.0.0.2 (test/gateway/topology.ts). Each answers /healthz and /readyz, PING with the Secret's
 * password, and does what its topology is for; the probes' own commands pass against it and fail
 * against a port that answers 503 or nothing; the app container's probe spends no budget.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/server.js';
import { RedisNode } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { dataOf, workloads, type Doc, type Workload } from './kube.js';
import { POD_IP, startApp, startCellgate, type RunningApp, type RunningCellgate } from './topology.js';

/** Runs an exec probe's command with the metrics port moved to `port`: its exit status. */
function runProbe(command: string[], port: number): Promise<number | null> {
  const moved = command.map((a) => a.replace('/dev/tcp/127.0.0.1/9121', `/dev/tcp/127.0.0.1/${port}`));
  return new Promise((resolve) => {
    const child = spawn(moved[0], moved.slice(1), { stdio: 'ignore', timeout: 10_000 });
    child.on('exit', (status) => resolve(status));
  });
}

async function client<T>(port: number, password: string | undefined, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis({ port, host: '127.0.0.1', protocol: 2, password, lazyConnect: true, maxRetriesPerRequest: 0, enableReadyCheck: false });
  r.on('error', () => {});
  await r.connect();
  try {
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

const passwordOf = (w: Workload): string => dataOf(w.file, 'Secret', 'cellgate-auth', 'password');
const status = async (url: string): Promise<number> => (await fetch(url, { signal: AbortSignal.timeout(10_000) })).status;
const appContainer = (w: Workload): Doc => w.pod.containers.find((c: Doc) => c.name === 'app');

/** The checks every topology's cellgate passes: health on loopback, metrics on the pod address, the password. */
async function checkCellgate(w: Workload, c: RunningCellgate): Promise<void> {
  expect(await status(`http://127.0.0.1:${c.metricsPort}/healthz`)).toBe(200);
  await waitFor(async () => (await status(`http://127.0.0.1:${c.metricsPort}/readyz`)) === 200, '/readyz 200');
  expect(await status(`http://${POD_IP}:${c.metricsPort}/metrics`)).toBe(200);
  expect(await client(c.port, passwordOf(w), (r) => r.ping())).toBe('PONG');
  await expect(client(c.port, undefined, (r) => r.call('CL.THROTTLE', 'x', '1', '1', '1'))).rejects.toThrow(/NOAUTH/);
  for (const kind of ['startupProbe', 'livenessProbe', 'readinessProbe']) expect(await runProbe(w.cellgate[kind].exec.command, c.metricsPort), kind).toBe(0);
}

/**
 * The app container's readiness probe, asked more times than the app's limit (10 per 10 s), answers
 * 200 every time and spends nothing: the next limited request still has 9 left.
 */
async function checkAppProbe(w: Workload, app: RunningApp): Promise<void> {
  const probe = appContainer(w).readinessProbe.httpGet;
  expect(probe.port).toBe('http');
  for (let i = 0; i < 15; i++) expect(await status(`${app.base}${probe.path}`), `probe ${i}`).toBe(200);
  const res = await fetch(`${app.base}/api/hello`, { signal: AbortSignal.timeout(10_000) });
  expect(res.status).toBe(200);
  expect(res.headers.get('ratelimit')).toMatch(/^"default";r=9;t=\d+$/);
}

describe('sidecar-local.yaml: the sidecar deciding locally, and its app', () => {
  const [w] = workloads('sidecar-local.yaml');
  let cellgate: RunningCellgate;
  let app: RunningApp;
  beforeAll(async () => {
    cellgate = await startCellgate(w);
    app = await startApp(w, appContainer(w), cellgate.port);
  }, 60_000);
  afterAll(async () => {
    app?.close();
    await cellgate?.close();
  });

  it('starts with the manifest\'s arguments, environment and Secret file: /healthz, /readyz, metrics on the pod address, PING with the password, the probes pass', async () => {
    expect(cellgate.env.CELLGATE_REQUIREPASS_FILE).toMatch(/mount-\d+\/password$/);
    expect(cellgate.env.CELLGATE_METRICS_BIND).toBe(`127.0.0.1 ${POD_IP}`);
    await checkCellgate(w, cellgate);
  });

  it('the probes fail against a port that answers 503 (exit 1: the answer, not a timeout) or nothing', async () => {
    const unavailable = http.createServer((_req, res) => res.writeHead(503).end('not ready: loading the snapshot\n'));
    await new Promise<void>((resolve) => unavailable.listen(0, '127.0.0.1', resolve));
    try {
      const port = (unavailable.address() as AddressInfo).port;
      for (const kind of ['livenessProbe', 'readinessProbe']) expect(await runProbe(w.cellgate[kind].exec.command, port), kind).toBe(1);
    } finally {
      await new Promise((resolve) => unavailable.close(resolve));
    }
    expect(await runProbe(w.cellgate.livenessProbe.exec.command, await freePort())).toBe(1);
  });

  it("the app, with its container's environment, is limited through the sidecar; its readiness probe spends no budget", async () => {
    await checkAppProbe(w, app);
    expect(await client(cellgate.port, passwordOf(w), (r) => r.dbsize())).toBe(1);
  });
});

describe('sidecar-shared-backend.yaml: two sidecars on one Redis enforce one limit', () => {
  const [w] = workloads('sidecar-shared-backend.yaml');
  const url = new URL(dataOf(w.file, 'Secret', 'cellgate-backend', 'url'));
  let redis: RedisNode;
  const pods: RunningCellgate[] = [];
  let app: RunningApp;
  beforeAll(async () => {
    // The Secret's password is the Redis's: the URL is used as written, only its address moved.
    redis = await RedisNode.start({ args: ['--requirepass', decodeURIComponent(url.password)] });
    for (let i = 0; i < 2; i++) pods.push(await startCellgate(w, { backend: (u) => u.replace(`@${url.host}`, `@127.0.0.1:${redis.port}`) }));
    app = await startApp(w, appContainer(w), pods[0].port);
  }, 60_000);
  afterAll(async () => {
    app?.close();
    for (const p of pods) await p.close();
    await redis?.destroy();
  });

  it('each starts with the manifest\'s arguments and the backend URL from its Secret, reaches Redis, and passes its probes', async () => {
    expect(url.protocol).toBe('redis:');
    for (const p of pods) {
      expect(p.args).toEqual(w.cellgate.args.map((a: string, i: number, all: string[]) => (all[i - 1] === '--metrics-port' ? String(p.metricsPort) : a)));
      await waitFor(async () => String(await client(p.port, passwordOf(w), (r) => r.call('INFO', 'backend'))).includes('backend_state:up'), 'backend up');
      await checkCellgate(w, p);
    }
  });

  it('calls alternated over the two sidecars share one budget, decided on Redis (none by policy)', async () => {
    const allowed: number[] = [];
    for (let i = 0; i < 10; i++) {
      const reply = (await client(pods[i % 2].port, passwordOf(w), (r) => r.call('RL.FIXEDWINDOW', 'k8s:shared', '4', '3600000'))) as number[];
      allowed.push(reply[0] === 0 ? 1 : 0);
    }
    expect(allowed.filter((a) => a === 1)).toHaveLength(4);
    for (const p of pods) {
      const info = String(await client(p.port, passwordOf(w), (r) => r.call('INFO', 'backend')));
      expect(info).toMatch(/backend_policy_decisions:0\r\n/);
    }
    expect(await client(redis.port, decodeURIComponent(url.password), (r) => r.exists('cellgate:k8s:shared'))).toBe(1);
  });

  it("the app, with its container's environment, is limited through its sidecar; its readiness probe spends no budget", async () => {
    await checkAppProbe(w, app);
  });
});

describe('central-statefulset.yaml: the central service with the journal and the Envoy rate limit service', () => {
  const [w] = workloads('central-statefulset.yaml');
  let cellgate: RunningCellgate;
  beforeAll(async () => {
    cellgate = await startCellgate(w);
  }, 60_000);
  afterAll(async () => {
    await cellgate?.close();
  });

  it('starts with the manifest\'s arguments, environment, Secret and ConfigMap (mounted with its ..data link): health, readiness, PING with the password, the probes pass', async () => {
    expect(cellgate.rlsPort).not.toBeNull();
    await checkCellgate(w, cellgate);
  });

  it('the journal is on, in the data directory', async () => {
    const info = String(await client(cellgate.port, passwordOf(w), async (r) => {
      await r.call('CL.THROTTLE', 'central', '5', '10', '60');
      return r.call('INFO', 'persistence');
    }));
    expect(info).toMatch(/aof_enabled:1\r\n/);
    await waitFor(() => existsSync(join(cellgate.server.dir, 'appendonlydir')), 'the journal directory');
  });

  it("Envoy's service answers from the ConfigMap's limits: the gRPC port listens, and /json decides for the domain", async () => {
    const open = await new Promise((done) => {
      const s = net.connect(cellgate.rlsPort!, '127.0.0.1');
      s.on('connect', () => { s.destroy(); done(true); }).on('error', () => done(false));
    });
    expect(open).toBe(true);
    const body = JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value: '10.1.2.3' }] }] });
    const res = await fetch(`http://127.0.0.1:${cellgate.metricsPort}/json`, { method: 'POST', body, signal: AbortSignal.timeout(10_000) });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ overallCode: 'OK', statuses: [{ code: 'OK', currentLimit: { requestsPerUnit: 100, unit: 'MINUTE' }, limitRemaining: 99 }] });
  });
});
