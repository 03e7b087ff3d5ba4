/**
 * A Redis Sentinel set for the backend tests, all on loopback: a master and a replica
 * (redis-server, test/helpers/redis.ts) and three `redis-sentinel` processes (Debian's package,
 * scripts/install-test-deps.sh) monitoring the master under one name with a quorum of two, each
 * with its own config file in a temp dir (Sentinel rewrites it). The Sentinels can require a
 * password (`requirepass`, and `sentinel sentinel-pass` so they still hear each other).
 *
 * `failover()` asks one Sentinel for SENTINEL FAILOVER and waits until every Sentinel names the
 * replica as the master and the replica says role:master. `destroy()` ends every process; a
 * process exit hook kills whatever is left, so a crashed test file leaves no sentinel behind.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { randomFreePort } from './ports.js';
import { RedisNode } from './redis.js';
import { WAIT_LIMIT_MS } from './wait.js';

export const REDIS_SENTINEL = '/usr/bin/redis-sentinel';

const live = new Set<ChildProcess>();
let hooked = false;

/** One redis-sentinel process. */
export class SentinelProcess {
  readonly logs: string[] = [];
  private exited: Promise<void>;

  private constructor(readonly port: number, readonly proc: ChildProcess, private readonly password: string) {
    this.exited = new Promise((resolve) => proc.once('exit', () => resolve()));
  }

  static async start(dir: string, name: string, masterPort: number, password: string): Promise<SentinelProcess> {
    for (let attempt = 0; ; attempt++) {
      const port = await randomFreePort();
      const conf = join(dir, `sentinel-${port}.conf`);
      writeFileSync(conf, [
        `port ${port}`, 'bind 127.0.0.1', 'daemonize no', 'logfile ""', `dir ${dir}`, 'protected-mode no',
        `sentinel monitor ${name} 127.0.0.1 ${masterPort} 2`,
        `sentinel down-after-milliseconds ${name} 1000`,
        `sentinel failover-timeout ${name} 10000`,
        `sentinel parallel-syncs ${name} 1`,
        ...(password === '' ? [] : [`requirepass ${password}`, `sentinel sentinel-pass ${password}`]),
        '',
      ].join('\n'));
      const proc = spawn(REDIS_SENTINEL, [conf], { stdio: ['ignore', 'pipe', 'pipe'] });
      live.add(proc);
      proc.once('exit', () => live.delete(proc));
      if (!hooked) {
        hooked = true;
        process.on('exit', () => {
          for (const p of live) p.kill('SIGKILL');
        });
      }
      const s = new SentinelProcess(port, proc, password);
      const ok = await s.waitLine('+monitor master', 15_000);
      if (ok) return s;
      proc.kill('SIGKILL');
      await s.exited;
      if (!s.logs.join('\n').includes('Address already in use') || attempt >= 10) throw new Error(`redis-sentinel on ${port} did not start:\n${s.logs.slice(-10).join('\n')}`);
    }
  }

  private waitLine(text: string, ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      let buf = '';
      const timer = setTimeout(() => resolve(false), ms);
      const onData = (chunk: Buffer): void => {
        buf += chunk.toString('utf8');
        let nl: number;
        while ((nl = buf.indexOf('\n')) !== -1) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          this.logs.push(line);
          if (line.includes(text)) {
            clearTimeout(timer);
            resolve(true);
          }
        }
      };
      this.proc.stdout!.on('data', onData);
      this.proc.stderr!.on('data', onData);
      this.proc.once('exit', () => {
        clearTimeout(timer);
        resolve(false);
      });
    });
  }

  /** One command to this Sentinel on a short-lived connection. */
  async call(...args: string[]): Promise<unknown> {
    const c = new Redis({ port: this.port, host: '127.0.0.1', password: this.password === '' ? undefined : this.password, maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true });
    c.on('error', () => {});
    try {
      await c.connect();
      return await c.call(args[0], ...args.slice(1));
    } finally {
      c.disconnect();
    }
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
    await this.exited;
  }
}

export class SentinelSet {
  private constructor(
    readonly name: string,
    readonly master: RedisNode,
    readonly replica: RedisNode,
    readonly sentinels: SentinelProcess[],
    private readonly dir: string,
  ) {}

  /** Master, replica (in sync), three Sentinels that see the replica and each other. */
  static async start(opts: { name?: string; password?: string } = {}): Promise<SentinelSet> {
    const name = opts.name ?? 'cellgate-master';
    const password = opts.password ?? '';
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-sentinel-'));
    const master = await RedisNode.start();
    const replica = await RedisNode.start({ args: ['--replicaof', '127.0.0.1', String(master.port)] });
    const sentinels: SentinelProcess[] = [];
    const set = new SentinelSet(name, master, replica, sentinels, dir);
    try {
      await until(async () => String(await replica.call('INFO', 'replication')).includes('master_link_status:up'), 'the replica in sync');
      for (let i = 0; i < 3; i++) sentinels.push(await SentinelProcess.start(dir, name, master.port, password));
      await set.waitSettled(master);
      return set;
    } catch (e) {
      await set.destroy();
      throw e;
    }
  }

  /** The Sentinels' addresses, for redis-sentinel://. */
  get hosts(): string {
    return this.sentinels.map((s) => `127.0.0.1:${s.port}`).join(',');
  }

  /** The node every Sentinel names as the master now. */
  async currentMaster(): Promise<RedisNode> {
    const addr = (await this.sentinels[0].call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.name)) as string[];
    return Number(addr[1]) === this.master.port ? this.master : this.replica;
  }

  /**
   * Until every Sentinel names `master`, knows a replica in sync with it and the two other
   * Sentinels (a failover needs them).
   */
  async waitSettled(master: RedisNode): Promise<void> {
    await until(async () => {
      for (const s of this.sentinels) {
        const addr = (await s.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.name)) as string[];
        if (Number(addr[1]) !== master.port) return false;
        const replicas = (await s.call('SENTINEL', 'REPLICAS', this.name)) as string[][];
        if (!replicas.some((r) => flags(r).includes('slave') && !flags(r).includes('disconnected') && !flags(r).includes('s_down') && field(r, 'master-link-status') === 'ok')) return false;
        if (((await s.call('SENTINEL', 'SENTINELS', this.name)) as unknown[]).length < 2) return false;
      }
      return String(await master.call('INFO', 'replication')).includes('role:master');
    }, `the Sentinels settled on ${master.port}`);
  }

  /** SENTINEL FAILOVER through one Sentinel; resolves with the new master once everything agrees. */
  async failover(): Promise<RedisNode> {
    const from = await this.currentMaster();
    const to = from === this.master ? this.replica : this.master;
    await this.sentinels[0].call('SENTINEL', 'FAILOVER', this.name);
    await this.waitSettled(to);
    return to;
  }

  async destroy(): Promise<void> {
    await Promise.all(this.sentinels.map((s) => s.stop()));
    await Promise.all([this.master.destroy(), this.replica.destroy()]);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function flags(r: string[]): string {
  return field(r, 'flags') ?? '';
}

function field(r: string[], name: string): string | undefined {
  const i = r.indexOf(name);
  return i === -1 ? undefined : r[i + 1];
}

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + WAIT_LIMIT_MS;
  for (;;) {
    try {
      if (await check()) return;
    } catch {
      /* a process still starting: ask again */
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${WAIT_LIMIT_MS} ms waiting for ${what}`);
    await delay(100);
  }
}
