/**
 * `cellgate-server ratelimit` as a process, for the tests: started with an environment and nothing
 * else (no CELLGATE_* of the test runner leaks in), in a working directory of its own (so a file
 * written by mistake would show), and the environments of Envoy Gateway's and Envoy AI Gateway's
 * Deployments, from their source (test/fixtures).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import * as grpc from '@grpc/grpc-js';
import { MAIN } from '../helpers/server.js';
import { RateLimitServiceClient } from './helpers.js';

/** A Deployment fixture's environment, as the container sees it. */
export function deploymentEnv(path: string): Record<string, string> {
  const doc = parse(readFileSync(new URL(`../fixtures/${path}`, import.meta.url), 'utf8')) as { env: { name: string; value: string }[] };
  return Object.fromEntries(doc.env.map((e) => [e.name, e.value]));
}

export interface ModeProcess {
  proc: ChildProcess;
  /** Its working directory: the mode writes nothing, so it stays empty. */
  cwd: string;
  logs: string[];
  exited: Promise<number | null>;
  /** Ends it (its working directory stays, to be looked at). */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** Ends it and removes its working directory. */
  destroy(): Promise<void>;
}

/** Starts the mode with exactly `env` (and PATH); `args` after `ratelimit`. */
export function runMode(env: Record<string, string>, args: string[] = []): ModeProcess {
  const cwd = mkdtempSync(join(tmpdir(), 'cellgate-ratelimit-cwd-'));
  const proc = spawn(process.execPath, [MAIN, 'ratelimit', ...args], { cwd, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const logs: string[] = [];
  let buf = '';
  const take = (chunk: Buffer): void => {
    buf += chunk.toString('utf8');
    let nl: number;
    while ((nl = buf.indexOf('\n')) !== -1) {
      logs.push(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
    }
  };
  proc.stdout!.on('data', take);
  proc.stderr!.on('data', take);
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  return {
    proc, cwd, logs, exited,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
    async destroy() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
      rmSync(cwd, { recursive: true, force: true });
    },
  };
}

/** GET `path` on the HTTP port: status and body, or null while nothing answers. */
export async function httpGet(port: number, path: string): Promise<{ status: number; body: string; type: string | null } | null> {
  try {
    const r = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(5000) });
    return { status: r.status, body: await r.text(), type: r.headers.get('content-type') };
  } catch {
    return null;
  }
}

/** Waits until `check` holds; a start takes seconds on a busy machine, so the deadline is wide. */
export async function eventually(check: () => boolean | Promise<boolean>, what: string, mode?: ModeProcess, ms = 90_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (mode !== undefined && mode.proc.exitCode !== null) throw new Error(`the ratelimit mode exited (${mode.proc.exitCode}) before ${what}:\n${mode.logs.join('\n')}`);
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${mode === undefined ? '' : `:\n${mode.logs.join('\n')}`}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A CA and a server certificate for 127.0.0.1, made with openssl in `dir` (ca.crt, tls.crt, tls.key). */
export function makeCerts(dir: string): void {
  mkdirSync(dir, { recursive: true });
  const openssl = (args: string[]): void => {
    const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8', timeout: 30_000 });
    if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
  };
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', '/CN=envoy-gateway-ca']);
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'tls.key', '-out', 'tls.csr', '-subj', '/CN=envoy-ratelimit']);
  spawnSync('sh', ['-c', "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > tls.ext"], { cwd: dir });
  openssl(['x509', '-req', '-in', 'tls.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'tls.crt', '-days', '2', '-extfile', 'tls.ext']);
}

/** ShouldRateLimit over plaintext gRPC for domain `edge`, descriptor `user=value`: the overall code. */
export function plainUserCall(port: number, value: string): Promise<string> {
  const client = new RateLimitServiceClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  return new Promise((resolve, reject) => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    (client as any).ShouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value }] }] }, { deadline: Date.now() + 20_000 }, (e: Error | null, r: { overall_code: string }) => {
      client.close();
      if (e) reject(e);
      else resolve(r.overall_code);
    });
  });
}
