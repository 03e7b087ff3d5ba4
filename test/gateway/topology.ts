/**
 * A manifest's containers started for real, for the manifests' tests: cellgate with exactly the
 * arguments and environment its container gets (the image's ENV first, then the container's env as
 * the kubelet resolves it), the ports moved to free ones, the pod's address a loopback one, the
 * mounted Secrets and ConfigMaps laid out in a scratch folder as the kubelet lays them out, and a
 * backend URL pointed at the test's Redis. The example app the same way, from its container's env.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readDockerfile, parseEnv } from '../build/dockerfile.js';
import { freePort, startServer, type RunningServer } from '../helpers/server.js';
import { kubeletEnv, mountVolumes, ROOT, type Doc, type Workload } from './kube.js';

/** The address the tests give a pod (a loopback address other than 127.0.0.1, as a pod's is). */
export const POD_IP = '127.0.0.2';

/** The ENV of the image's last stage, as the Dockerfile sets it. */
export function imageEnv(): Record<string, string> {
  const stages = readDockerfile(ROOT, 'Dockerfile');
  const env: Record<string, string> = {};
  for (const ins of stages[stages.length - 1].instructions) if (ins.keyword === 'ENV') Object.assign(env, parseEnv(ins.rest));
  return env;
}

export interface RunningCellgate {
  server: RunningServer;
  /** The RESP port, the metrics port, and the gRPC port when the manifest turns it on. */
  port: number;
  metricsPort: number;
  rlsPort: number | null;
  /** The arguments and environment it was started with. */
  args: string[];
  env: Record<string, string>;
  close(): Promise<void>;
}

/**
 * Starts the workload's cellgate container. `backend` rewrites the backend URL of its environment
 * (e.g. to the test's Redis); the scratch folder is removed by close().
 */
export async function startCellgate(w: Workload, opts: { backend?: (url: string) => string } = {}): Promise<RunningCellgate> {
  const dir = mkdtempSync(join(tmpdir(), 'cellgate-k8s-'));
  const inPod = mountVolumes(w.file, w, w.cellgate, dir);
  const metricsPort = await freePort();
  const rlsPort = (w.cellgate.args as string[]).includes('--rls-port') ? await freePort() : null;
  const args = (w.cellgate.args as string[]).map((a, i, all) => {
    if (all[i - 1] === '--metrics-port') return String(metricsPort);
    if (all[i - 1] === '--rls-port') return String(rlsPort);
    return inPod(a);
  });
  const env = { ...imageEnv(), ...kubeletEnv(w.file, w.cellgate, POD_IP) };
  for (const [k, v] of Object.entries(env)) env[k] = inPod(v);
  if (env.CELLGATE_BACKEND !== undefined && opts.backend !== undefined) env.CELLGATE_BACKEND = opts.backend(env.CELLGATE_BACKEND);
  // The gRPC service on loopback too (the image's bind is every address; the test's network is loopback).
  const server = await startServer({ args: [...args, ...(rlsPort === null ? [] : ['--rls-bind', '127.0.0.1'])], env });
  return {
    server, port: server.port, metricsPort, rlsPort, args, env,
    close: async () => {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface RunningApp {
  base: string;
  proc: ChildProcess;
  close(): void;
}

/**
 * Starts the example app (examples/express/server.mjs, what the app image runs) with the app
 * container's environment, asking `cellgatePort` instead of the pod's 127.0.0.1:6379 and listening
 * on a free loopback port.
 */
export function startApp(w: Workload, app: Doc, cellgatePort: number): Promise<RunningApp> {
  const env = kubeletEnv(w.file, app, POD_IP);
  const proc = spawn(process.execPath, ['examples/express/server.mjs'], {
    cwd: ROOT,
    env: { ...process.env, ...env, HOST: '127.0.0.1', PORT: '0', CELLGATE_URL: env.CELLGATE_URL.replace(/:6379$/, `:${cellgatePort}`), CELLGATE_TIMEOUT_MS: '5000' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Promise((done, fail) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`the app did not start: ${out}`)), 20_000);
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /"port":(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        done({ base: `http://127.0.0.1:${m[1]}`, proc, close: () => proc.kill('SIGKILL') });
      }
    });
    proc.stderr!.on('data', (c: Buffer) => { out += c.toString(); });
    proc.on('exit', (code) => { clearTimeout(timer); fail(new Error(`the app exited with ${code}: ${out}`)); });
  });
}
