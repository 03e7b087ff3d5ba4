/**
 * Starts a real cellgate process for a test and stops it afterwards. The server listens on a free
 * port (`--port 0`) and logs JSON; the port is read from its "ready" line.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';
import { Redis } from 'ioredis';

export const MAIN = fileURLToPath(new URL('../../dist/main.js', import.meta.url));

export interface RunningServer {
  port: number;
  proc: ChildProcess;
  dir: string;
  /** Every log line so far. */
  logs: string[];
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface StartOptions {
  /** Extra flags, e.g. ['--requirepass', 'x']. */
  args?: string[];
  env?: Record<string, string>;
  /** Enable DEBUG (default true: tests drive the clock). */
  debug?: boolean;
  /** Pass a config file path as the first argument. */
  configFile?: string;
  /**
   * A command that execs node with the server's arguments, e.g. ['prlimit', '--nofile=256:256', '--']
   * (it must exec, not fork: the process id is the server's).
   */
  wrap?: string[];
  /** The server's script (default: this repository's dist/main.js), e.g. the one an image's files hold. */
  main?: string;
  /** Node's own flags before the script, e.g. an image ENTRYPOINT's `--max-semi-space-size=8`. */
  nodeArgs?: string[];
  /** How long the start may take before it counts as failed (default 10 s). */
  readyTimeoutMs?: number;
}

export async function startServer(opts: StartOptions = {}): Promise<RunningServer> {
  const dir = mkdtempSync(join(tmpdir(), 'cellgate-test-'));
  const args = [
    ...(opts.nodeArgs ?? []),
    opts.main ?? MAIN,
    ...(opts.configFile ? [opts.configFile] : []),
    '--port', '0', '--bind', '127.0.0.1', '--log-format', 'json', '--dir', dir,
    ...(opts.debug === false ? [] : ['--enable-debug-command', 'yes']),
    // The start-up warm-up costs ~0.5 s per server on a busy machine; test/hardening/warmup.test.ts turns it on.
    '--warmup', 'no',
    ...(opts.args ?? []),
  ];
  const command = opts.wrap === undefined ? process.execPath : opts.wrap[0];
  const commandArgs = opts.wrap === undefined ? args : [...opts.wrap.slice(1), process.execPath, ...args];
  const proc = spawn(command, commandArgs, { env: { ...process.env, ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const logs: string[] = [];
  let exited: number | null | undefined;
  const exitPromise = new Promise<number | null>((resolve) => proc.on('exit', (code) => { exited = code; resolve(code); }));
  const port = await new Promise<number>((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error(`cellgate did not start: ${logs.join('\n')}`)), opts.readyTimeoutMs ?? 10_000);
    proc.stdout!.on('data', (chunk: Buffer) => {
      buf += chunk.toString('utf8');
      let nl: number;
      while ((nl = buf.indexOf('\n')) !== -1) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        logs.push(line);
        try {
          const entry = JSON.parse(line) as { msg?: string; port?: number };
          if (entry.msg?.includes('ready to accept connections') && entry.port) {
            clearTimeout(timer);
            resolve(entry.port);
          }
        } catch {
          /* not JSON: keep it in logs */
        }
      }
    });
    proc.stderr!.on('data', (chunk: Buffer) => logs.push(chunk.toString('utf8')));
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`cellgate exited with ${code}: ${logs.join('\n')}`));
    });
  });
  return {
    port,
    proc,
    dir,
    logs,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (exited === undefined) proc.kill(signal);
      const code = await exitPromise;
      rmSync(dir, { recursive: true, force: true });
      return code;
    },
  };
}

/**
 * For a test file: one server and one RESP2 ioredis client, started before its tests and stopped
 * after them. The returned object's fields are set once `beforeAll` has run.
 */
export function useServer(opts: StartOptions = {}): { server: RunningServer; redis: Redis } {
  const env = {} as { server: RunningServer; redis: Redis };
  beforeAll(async () => {
    env.server = await startServer(opts);
    env.redis = new Redis({ port: env.server.port, host: '127.0.0.1', protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0 });
    await env.redis.connect();
  });
  afterAll(async () => {
    env.redis?.disconnect();
    await env.server?.stop();
  });
  return env;
}

/**
 * For a test file: one server and two ioredis clients of it, RESP2 (`r2`) and RESP3 (`r3`), for
 * checking a reply in both protocols; started before its tests and stopped after them.
 */
export function useServerResp2And3(opts: StartOptions = {}): { server: RunningServer; r2: Redis; r3: Redis } {
  const env = {} as { server: RunningServer; r2: Redis; r3: Redis };
  beforeAll(async () => {
    env.server = await startServer(opts);
    env.r2 = new Redis({ port: env.server.port, host: '127.0.0.1', protocol: 2, lazyConnect: true });
    env.r3 = new Redis({ port: env.server.port, host: '127.0.0.1', protocol: 3, lazyConnect: true });
    await env.r2.connect();
    await env.r3.connect();
  });
  afterAll(async () => {
    env.r2?.disconnect();
    env.r3?.disconnect();
    await env.server?.stop();
  });
  return env;
}

export { freePort } from './ports.js';
