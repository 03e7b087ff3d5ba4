/**
 * Real Redis fixtures for the backend tests: a standalone `redis-server` and a Redis Cluster of
 * three masters and three replicas, all on loopback, each node with its own temp dir, no
 * persistence (`--save '' --appendonly no`). A node can be stopped (SIGTERM), killed (SIGKILL),
 * restarted on its port, paused (SIGSTOP) and resumed (SIGCONT).
 *
 * Ports are drawn at random from a range (several engineers run tests on one machine at the same
 * time) and a start that loses the race for its port (EADDRINUSE) retries on another one. Every
 * process started here is registered: `stopAllRedis()` ends them all (the `useRedis`/`useCluster`
 * hooks call it in afterAll, also when a test failed), and a process exit handler SIGKILLs whatever
 * is left, so a crashed test file leaves no redis-server behind.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll } from 'vitest';
import { Redis } from 'ioredis';
import { keySlot as backendKeySlot } from '../../src/backend/key-slot.js';
import { randomFreePort } from './ports.js';

export const REDIS_SERVER = '/usr/bin/redis-server';
export const REDIS_CLI = '/usr/bin/redis-cli';

/**
 * The Redis the suite compares with and runs as a backend: the replies in test/server/redis-diffs
 * are Redis 7.0's byte for byte, and the suite was checked with Debian 12's redis-server 7.0.15
 * (README.md, Development). Another version fails the check with its name instead of as a list of
 * differing replies.
 */
export const ORACLE_REDIS = '7.0';

let versionSeen: string | undefined;
const versions = new Map<string, string>();

/** `redis-server --version`'s `v=` field (`7.0.15`) of `bin` (asked once per binary). */
export function redisServerVersion(bin = REDIS_SERVER): string {
  const known = versions.get(bin);
  if (known !== undefined) return known;
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
  const v = /\bv=(\d+\.\d+\.\d+)/.exec(r.stdout ?? '')?.[1];
  if (v === undefined) throw new Error(`${bin} --version: no version in ${JSON.stringify(r.stdout ?? r.error?.message)}`);
  versions.set(bin, v);
  return v;
}

/**
 * Prints (once per test file) and checks the version of the redis-server the tests compare with:
 * Redis `ORACLE_REDIS`.x. Returns it.
 */
export function expectOracleRedis(bin = REDIS_SERVER): string {
  const v = redisServerVersion(bin);
  if (versionSeen !== v) {
    versionSeen = v;
    console.log(`[oracle] ${bin}: Redis ${v} (the suite compares with Redis ${ORACLE_REDIS}.x)`);
  }
  if (!v.startsWith(`${ORACLE_REDIS}.`)) throw new Error(`${bin} is Redis ${v}; these tests compare with Redis ${ORACLE_REDIS}.x (README.md, Development)`);
  return v;
}

// ---------------------------------------------------------------------------------------------
// The registry of running processes
// ---------------------------------------------------------------------------------------------

const running = new Set<RedisNode>();
let exitHookInstalled = false;

function register(node: RedisNode): void {
  running.add(node);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Last resort when afterAll never ran (the worker is exiting): only synchronous work is possible.
  process.on('exit', () => {
    for (const n of running) n.killSync();
  });
}

/** Ends every redis-server this process started and removes their dirs. */
export async function stopAllRedis(): Promise<void> {
  await Promise.all([...running].map((n) => n.destroy()));
}

// ---------------------------------------------------------------------------------------------
// One redis-server
// ---------------------------------------------------------------------------------------------

export interface RedisNodeOptions {
  /** Extra redis-server arguments, e.g. ['--maxmemory', '10mb']. */
  args?: string[];
  /** A fixed port (restart uses the node's own); otherwise a random free one. */
  port?: number;
  /** Cluster nodes need their bus port (port + 10000) free as well. */
  cluster?: boolean;
  /** Milliseconds to wait for "Ready to accept connections" (default 15 s). */
  readyTimeoutMs?: number;
}

class AddressInUse extends Error {}

export class RedisNode {
  proc: ChildProcess | null = null;
  /** Every log line of the current and earlier runs. */
  readonly logs: string[] = [];
  private exitPromise: Promise<void> = Promise.resolve();
  private paused = false;

  private constructor(
    public port: number,
    readonly dir: string,
    private readonly args: string[],
    private readonly readyTimeoutMs: number,
  ) {}

  /** Starts a redis-server on a free random port (retrying when another process takes it first). */
  static async start(opts: RedisNodeOptions = {}): Promise<RedisNode> {
    expectOracleRedis();
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-redis-'));
    for (let attempt = 0; ; attempt++) {
      const port = opts.port ?? (await randomFreePort({ bus: opts.cluster }));
      const node = new RedisNode(port, dir, opts.args ?? [], opts.readyTimeoutMs ?? 15_000);
      register(node);
      try {
        await node.spawn();
        return node;
      } catch (e) {
        running.delete(node);
        if (e instanceof AddressInUse && opts.port === undefined && attempt < 10) continue;
        rmSync(dir, { recursive: true, force: true });
        throw e;
      }
    }
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get alive(): boolean {
    return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  /** Resolves at the log line containing `readyLine` (by default: ready to accept connections). */
  private spawn(extraArgs: string[] = [], readyLine = 'Ready to accept connections'): Promise<void> {
    const argv = [
      '--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir,
      '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--logfile', '',
      '--protected-mode', 'no', '--enable-debug-command', 'yes',
      // Redis 7 waits 5 s for more replicas before a diskless full sync: a replica would have
      // none of its master's data for that long.
      '--repl-diskless-sync-delay', '0',
      ...this.args, ...extraArgs,
    ];
    const proc = spawn(REDIS_SERVER, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    this.paused = false;
    this.exitPromise = new Promise((resolve) => proc.once('exit', () => resolve()));
    return new Promise<void>((resolve, reject) => {
      let buf = '';
      let ready = false;
      const timer = setTimeout(() => {
        proc.kill('SIGKILL');
        reject(new Error(`redis-server on ${this.port} not ready after ${this.readyTimeoutMs} ms:\n${this.logs.slice(-20).join('\n')}`));
      }, this.readyTimeoutMs);
      const onData = (chunk: Buffer): void => {
        buf += chunk.toString('utf8');
        let nl: number;
        while ((nl = buf.indexOf('\n')) !== -1) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          this.logs.push(line);
          if (!ready && line.includes(readyLine)) {
            ready = true;
            clearTimeout(timer);
            resolve();
          }
        }
      };
      proc.stdout!.on('data', onData);
      proc.stderr!.on('data', onData);
      proc.once('exit', (code, signal) => {
        if (ready) return;
        clearTimeout(timer);
        const tail = this.logs.slice(-10).join('\n');
        if (tail.includes('Address already in use')) reject(new AddressInUse(`port ${this.port} taken`));
        else reject(new Error(`redis-server on ${this.port} exited (${code ?? signal}) before ready:\n${tail}`));
      });
    });
  }

  /** A new ioredis connection to this node (the caller disconnects it). */
  client(): Redis {
    // No ready check: ioredis would wait for the end of a load instead of showing us -LOADING.
    return new Redis({ port: this.port, host: '127.0.0.1', maxRetriesPerRequest: 0, enableReadyCheck: false, retryStrategy: () => null });
  }

  /** One command on a short-lived connection; resolves with the reply (or rejects with the error). */
  async call(...args: (string | number)[]): Promise<unknown> {
    const c = this.client();
    c.on('error', () => {});
    try {
      return await c.call(String(args[0]), ...args.slice(1).map(String));
    } finally {
      c.disconnect();
    }
  }

  /** Ends the server with `signal` and waits for the exit (a paused server is resumed first). */
  private async end(signal: NodeJS.Signals): Promise<void> {
    if (!this.alive) return;
    if (this.paused && signal !== 'SIGKILL') this.resume();
    this.proc!.kill(signal);
    await this.exitPromise;
  }

  /** SIGTERM: a clean shutdown (nothing is saved: `--save ''`). */
  stop(): Promise<void> {
    return this.end('SIGTERM');
  }

  /** SIGKILL: the process vanishes, connections are reset. */
  kill(): Promise<void> {
    return this.end('SIGKILL');
  }

  /**
   * Starts again on the same port and dir (after stop or kill); `extraArgs` apply to this run.
   * `until`: resolve at the first log line containing it instead of at "Ready to accept
   * connections" (e.g. 'Loading RDB', to act while the dataset loads).
   */
  async restart(extraArgs: string[] = [], opts: { until?: string } = {}): Promise<void> {
    if (this.alive) await this.stop();
    register(this);
    for (let attempt = 0; ; attempt++) {
      try {
        await this.spawn(extraArgs, opts.until);
        return;
      } catch (e) {
        // The old socket can linger for a moment after a kill: retry the same port a few times.
        if (e instanceof AddressInUse && attempt < 20) {
          await delay(100);
          continue;
        }
        throw e;
      }
    }
  }

  /** SIGSTOP: the process stays, its sockets stay open, nothing is answered. */
  pause(): void {
    if (!this.alive) throw new Error(`redis-server on ${this.port} is not running`);
    this.proc!.kill('SIGSTOP');
    this.paused = true;
  }

  /** SIGCONT after pause. */
  resume(): void {
    if (!this.alive) return;
    this.proc!.kill('SIGCONT');
    this.paused = false;
  }

  /** Kills the process (if any) and removes the dir: the end of this node. */
  async destroy(): Promise<void> {
    running.delete(this);
    if (this.alive) {
      this.proc!.kill('SIGKILL');
      await this.exitPromise;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** For the exit hook: no awaiting possible. */
  killSync(): void {
    if (this.alive) {
      try {
        this.proc!.kill('SIGKILL');
      } catch {
        /* already gone */
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** For a test file: one standalone redis-server, started before its tests, destroyed after them. */
export function useRedis(opts: RedisNodeOptions = {}): { node: RedisNode } {
  const env = {} as { node: RedisNode };
  beforeAll(async () => {
    env.node = await RedisNode.start(opts);
  });
  afterAll(async () => {
    await env.node?.destroy();
  });
  return env;
}

// ---------------------------------------------------------------------------------------------
// Cluster key slots
// ---------------------------------------------------------------------------------------------

/**
 * The Cluster slot of a key, as CLUSTER KEYSLOT computes it: cellgate's own (src/backend/key-slot.ts),
 * which the fixture self-test checks against a real Cluster's CLUSTER KEYSLOT.
 */
export function keySlot(key: string | Buffer): number {
  return backendKeySlot(typeof key === 'string' ? Buffer.from(key, 'utf8') : key);
}

// ---------------------------------------------------------------------------------------------
// A Redis Cluster: 3 masters + 3 replicas
// ---------------------------------------------------------------------------------------------

export interface ClusterNodeInfo {
  id: string;
  port: number;
  role: 'master' | 'replica';
  /** For a replica: its master's id. */
  masterId: string | null;
  /** [from, to] slot ranges (masters only). */
  slots: [number, number][];
  failed: boolean;
}

function parseClusterNodes(text: string): ClusterNodeInfo[] {
  const out: ClusterNodeInfo[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const parts = line.trim().split(' ');
    const [id, addr, flags, master] = parts;
    const port = Number(addr.split('@')[0].split(':')[1]);
    const flagList = flags.split(',');
    const slots: [number, number][] = [];
    for (const s of parts.slice(8)) {
      if (s.startsWith('[')) continue; // a slot being migrated
      const [from, to] = s.split('-').map(Number);
      slots.push([from, to ?? from]);
    }
    out.push({
      id,
      port,
      role: flagList.includes('master') ? 'master' : 'replica',
      masterId: master === '-' ? null : master,
      slots,
      failed: flagList.includes('fail') || flagList.includes('fail?'),
    });
  }
  return out;
}

export class RedisCluster {
  private constructor(readonly nodes: RedisNode[]) {}

  /**
   * Starts 6 nodes, joins them with `redis-cli --cluster create ... --cluster-replicas 1`, and waits
   * until every node says `cluster_state:ok` and sees all 16384 slots served.
   */
  static async start(opts: { nodeTimeoutMs?: number; args?: string[] } = {}): Promise<RedisCluster> {
    const nodeTimeout = opts.nodeTimeoutMs ?? 1000;
    const nodes: RedisNode[] = [];
    try {
      for (let i = 0; i < 6; i++) {
        nodes.push(await RedisNode.start({
          cluster: true,
          args: [
            '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
            '--cluster-node-timeout', String(nodeTimeout),
            // A replica takes over however stale its data looks (a test kills masters on purpose).
            '--cluster-replica-validity-factor', '0',
            ...(opts.args ?? []),
          ],
        }));
      }
      const cluster = new RedisCluster(nodes);
      const create = await runCli([
        '--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`),
        '--cluster-replicas', '1', '--cluster-yes',
      ], 60_000);
      if (create.status !== 0) throw new Error(`redis-cli --cluster create failed (${create.status}):\n${create.output}`);
      await cluster.waitHealthy(30_000, true);
      return cluster;
    } catch (e) {
      await Promise.all(nodes.map((n) => n.destroy()));
      throw e;
    }
  }

  /** Seed list for `redis-cluster://` (every node). */
  get url(): string {
    return `redis-cluster://${this.nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`;
  }

  get liveNodes(): RedisNode[] {
    return this.nodes.filter((n) => n.alive);
  }

  /** CLUSTER NODES as seen from a live node. */
  async topology(from?: RedisNode): Promise<ClusterNodeInfo[]> {
    const node = from ?? this.liveNodes[0];
    return parseClusterNodes(String(await node.call('CLUSTER', 'NODES')));
  }

  /** The live masters, as RedisNodes, in slot order. */
  async masters(): Promise<RedisNode[]> {
    const topo = await this.topology();
    return topo
      .filter((n) => n.role === 'master' && !n.failed && n.slots.length > 0)
      .sort((a, b) => a.slots[0][0] - b.slots[0][0])
      .map((info) => this.nodeByPort(info.port));
  }

  nodeByPort(port: number): RedisNode {
    const node = this.nodes.find((n) => n.port === port);
    if (!node) throw new Error(`no cluster node on port ${port}`);
    return node;
  }

  /** The master that serves `key`'s slot now. */
  async masterFor(key: string | Buffer): Promise<RedisNode> {
    const slot = keySlot(key);
    const topo = await this.topology();
    const owner = topo.find((n) => n.role === 'master' && !n.failed && n.slots.some(([a, b]) => slot >= a && slot <= b));
    if (!owner) throw new Error(`no live master serves slot ${slot}`);
    return this.nodeByPort(owner.port);
  }

  /**
   * `perMaster` key names for each master: `${base}${i}` whose backend key (`prefix` + name) falls
   * in that master's slots. Returns one list per master, in `masters()` order.
   */
  async keysPerMaster(base: string, perMaster: number, prefix = 'cellgate:'): Promise<{ master: RedisNode; keys: string[] }[]> {
    const topo = (await this.topology()).filter((n) => n.role === 'master' && !n.failed && n.slots.length > 0);
    topo.sort((a, b) => a.slots[0][0] - b.slots[0][0]);
    const groups = topo.map((info) => ({ info, keys: [] as string[] }));
    for (let i = 0; groups.some((g) => g.keys.length < perMaster); i++) {
      if (i > 100_000) throw new Error('could not spread keys over the masters');
      const name = `${base}${i}`;
      const slot = keySlot(prefix + name);
      const g = groups.find((x) => x.info.slots.some(([a, b]) => slot >= a && slot <= b));
      if (g && g.keys.length < perMaster) g.keys.push(name);
    }
    return groups.map((g) => ({ master: this.nodeByPort(g.info.port), keys: g.keys }));
  }

  /**
   * Every live node says cluster_state:ok and sees all 16384 slots assigned to live masters; with
   * `withReplicas`, it also sees a live replica for every master (right after `--cluster create`, a
   * node may not know yet that its peer became a replica) and every replication link is up.
   */
  async healthy(withReplicas = false): Promise<boolean> {
    for (const node of this.liveNodes) {
      try {
        const info = String(await node.call('CLUSTER', 'INFO'));
        if (!info.includes('cluster_state:ok')) return false;
        if (!/cluster_slots_ok:16384\b/.test(info)) return false;
        const topo = parseClusterNodes(String(await node.call('CLUSTER', 'NODES')));
        let served = 0;
        for (const n of topo) {
          if (n.role !== 'master' || n.failed) continue;
          if (!this.nodes.some((x) => x.port === n.port && x.alive)) return false;
          for (const [a, b] of n.slots) served += b - a + 1;
        }
        if (served !== 16384) return false;
        if (withReplicas) {
          for (const m of topo) {
            if (m.role !== 'master' || m.failed || m.slots.length === 0) continue;
            if (!topo.some((r) => r.role === 'replica' && !r.failed && r.masterId === m.id)) return false;
          }
          // And each master streams to its replica (the initial sync is over).
          const role = String(await node.call('INFO', 'replication'));
          if (role.includes('role:master') && !/slave0:.*state=online/.test(role)) return false;
          if (role.includes('role:slave') && !role.includes('master_link_status:up')) return false;
        }
      } catch {
        return false;
      }
    }
    return true;
  }

  /** Polls `healthy()` (every 100 ms) until it holds or `timeoutMs` passed. */
  async waitHealthy(timeoutMs = 30_000, withReplicas = false): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await this.healthy(withReplicas))) {
      if (Date.now() > deadline) {
        const info = await Promise.all(this.liveNodes.map(async (n) => `${n.port}: ${String(await n.call('CLUSTER', 'NODES').catch((e) => e))}`));
        throw new Error(`cluster not healthy after ${timeoutMs} ms:\n${info.join('\n')}`);
      }
      await delay(100);
    }
  }

  /**
   * SIGKILLs `master` and waits until its replica was promoted and the cluster is whole again.
   * Returns the promoted replica.
   */
  async killMasterAndWaitFailover(master: RedisNode, timeoutMs = 30_000): Promise<RedisNode> {
    const topo = await this.topology(this.liveNodes.find((n) => n !== master));
    const me = topo.find((n) => n.port === master.port);
    if (!me || me.role !== 'master') throw new Error(`node ${master.port} is not a master`);
    const replicaInfo = topo.find((n) => n.masterId === me.id);
    if (!replicaInfo) throw new Error(`master ${master.port} has no replica`);
    const replica = this.nodeByPort(replicaInfo.port);
    await master.kill();
    await this.waitPromoted(replica, timeoutMs);
    return replica;
  }

  /** Waits until `replica` is a master with slots and the cluster is healthy. */
  async waitPromoted(replica: RedisNode, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const topo = await this.topology(replica).catch(() => []);
      const me = topo.find((n) => n.port === replica.port);
      if (me?.role === 'master' && me.slots.length > 0 && (await this.healthy())) return;
      if (Date.now() > deadline) throw new Error(`replica ${replica.port} not promoted after ${timeoutMs} ms`);
      await delay(100);
    }
  }

  async destroy(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.destroy()));
  }
}

/** For a test file: one cluster, started before its tests (once), destroyed after them. */
export function useCluster(opts: { nodeTimeoutMs?: number } = {}): { cluster: RedisCluster } {
  const env = {} as { cluster: RedisCluster };
  beforeAll(async () => {
    env.cluster = await RedisCluster.start(opts);
  }, 90_000);
  afterAll(async () => {
    await env.cluster?.destroy();
  });
  return env;
}

function runCli(args: string[], timeoutMs: number): Promise<{ status: number | null; output: string }> {
  return new Promise((resolve) => {
    const proc = spawn(REDIS_CLI, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    proc.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')));
    proc.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')));
    const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
    proc.on('exit', (status) => {
      clearTimeout(timer);
      resolve({ status, output });
    });
  });
}

/** The pids of every redis-server on the machine (other engineers' included): for leak checks. */
export function redisServerPids(): number[] {
  const r = spawnSync('pgrep', ['-x', 'redis-server'], { encoding: 'utf8' });
  return r.stdout.split('\n').filter((s) => s.trim() !== '').map(Number);
}
