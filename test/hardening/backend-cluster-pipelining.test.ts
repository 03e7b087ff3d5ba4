/**
 * A Redis Cluster backend under concurrent calls on keys of different slots. The backend's client
 * auto-pipelines (the calls of one event-loop turn leave in one write), and a Cluster pipeline must
 * stay within one slot group: ioredis picks the group by a command's first argument. When the script
 * commands took the key count first, every concurrent batch was grouped by the slot of "1", failed
 * with "All keys in the pipeline should belong to the same slots allocation group", and every call
 * was answered by backend-unavailable while INFO still said backend_state:up. Started here: three
 * redis-server masters on random free loopback ports (and their bus ports), `redis-cli --cluster
 * create`, one cellgate on them.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startServer, type RunningServer } from '../helpers/server.ts';
import { keySlot } from '../../src/backend/key-slot.ts';
import { waitFor } from '../helpers/wait.js';

const nodes: { port: number; proc: ChildProcess; dir: string }[] = [];
let sidecar: RunningServer;
let client: Redis;

function canListen(port: number): Promise<boolean> {
  return new Promise((done) => {
    const s = net.createServer();
    s.once('error', () => done(false));
    s.listen(port, '127.0.0.1', () => s.close(() => done(true)));
  });
}

async function ping(port: number): Promise<boolean> {
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on('error', () => {});
  try {
    await c.connect();
    return (await c.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    c.disconnect();
  }
}

/** A cluster-enabled redis-server on a random port whose bus port (+10000) is free too. */
async function startNode(): Promise<number> {
  for (let attempt = 0; attempt < 30; attempt++) {
    const port = 20000 + Math.floor(Math.random() * 30000);
    if (!(await canListen(port)) || !(await canListen(port + 10000))) continue;
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-cluster-node-'));
    const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir,
      '--cluster-enabled', 'yes', '--cluster-config-file', join(dir, 'nodes.conf')], { stdio: 'ignore' });
    nodes.push({ port, proc, dir });
    for (let i = 0; i < 100 && proc.exitCode === null; i++) {
      if (await ping(port)) return port;
      await new Promise((r) => setTimeout(r, 50));
    }
    proc.kill('SIGKILL'); // the port was taken after all: another one
  }
  throw new Error('redis-server (cluster node) did not start');
}

function info(text: string, field: string): string | undefined {
  return new RegExp(`^${field}:(.*)$`, 'm').exec(text)?.[1]?.trim();
}

beforeAll(async () => {
  const ports = [await startNode(), await startNode(), await startNode()];
  const create = spawnSync('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0', '--cluster-yes'], { encoding: 'utf8', timeout: 20_000 });
  expect(create.status, create.stdout + create.stderr).toBe(0);
  for (const port of ports) {
    for (let i = 0; i < 200; i++) {
      const c = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0 });
      const state = info(String(await c.call('CLUSTER', 'INFO')), 'cluster_state');
      c.disconnect();
      if (state === 'ok') break;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  // A generous timeout: on a loaded 2-core machine this is about which answers come, not how fast.
  sidecar = await startServer({ args: ['--backend', `redis-cluster://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`, '--backend-timeout', '5000'] });
  client = new Redis({ port: sidecar.port, host: '127.0.0.1', protocol: 2, maxRetriesPerRequest: 0, enableAutoPipelining: true });
  await waitFor(async () => info(String(await client.info('backend')), 'backend_state') === 'up', 'backend_state up');
}, 60_000);

afterAll(async () => {
  client?.disconnect();
  await sidecar?.stop();
  for (const n of nodes) {
    n.proc.kill('SIGKILL');
    rmSync(n.dir, { recursive: true, force: true });
  }
});

/** `count` keys named `${prefix}<n>`, at least two of them on different slots of the backend (prefix included). */
function keysOnSeveralSlots(prefix: string, count: number): string[] {
  const keys = Array.from({ length: count }, (_, i) => `${prefix}${i}`);
  expect(new Set(keys.map((k) => keySlot(Buffer.from(`cellgate:${k}`)))).size).toBeGreaterThan(1);
  return keys;
}

describe('a Redis Cluster backend, calls on many slots at once', () => {
  it('CL.THROTTLE and RL.* on 200 keys of different slots, sent together: every one decided on the Cluster', async () => {
    const keys = keysOnSeveralSlots('spread:', 200);
    const before = String(await client.info('backend'));
    const replies = await Promise.all(keys.map((k, i) => (i % 2 === 0
      ? client.call('CL.THROTTLE', k, '0', '1', '3600', '1')
      : client.call('RL.TOKENBUCKET', k, '1', '3600000')) as Promise<number[]>));
    // A fresh key allows its first call; a second call on each is refused by the Cluster's state.
    expect(replies.every((r) => r[0] === 0)).toBe(true);
    const again = await Promise.all(keys.map((k, i) => (i % 2 === 0
      ? client.call('CL.THROTTLE', k, '0', '1', '3600', '1')
      : client.call('RL.TOKENBUCKET', k, '1', '3600000')) as Promise<number[]>));
    expect(again.filter((r) => r[0] === 1)).toHaveLength(keys.length);
    const after = String(await client.info('backend'));
    expect(Number(info(after, 'backend_policy_decisions'))).toBe(Number(info(before, 'backend_policy_decisions')));
    expect(Number(info(after, 'backend_errors'))).toBe(Number(info(before, 'backend_errors')));
    expect(info(after, 'backend_last_error')).toBe('');
  });

  it('RL.ALL with hash tags, 100 users at once: each call on its own slot, all decided on the Cluster', async () => {
    const users = Array.from({ length: 100 }, (_, i) => `{u${i}}`);
    expect(new Set(users.map((u) => keySlot(Buffer.from(`cellgate:${u}:s`)))).size).toBeGreaterThan(1);
    const before = String(await client.info('backend'));
    const replies = await Promise.all(users.map((u) => client.call('RL.ALL', '2', `${u}:s`, 'TOKENBUCKET', '1', '1000', `${u}:h`, 'TOKENBUCKET', '1', '3600000') as Promise<unknown[]>));
    expect(replies.every((r) => r[0] === 0)).toBe(true);
    const again = await Promise.all(users.map((u) => client.call('RL.ALL', '2', `${u}:s`, 'TOKENBUCKET', '1', '1000', `${u}:h`, 'TOKENBUCKET', '1', '3600000') as Promise<unknown[]>));
    expect(again.every((r) => r[0] === 1)).toBe(true);
    const after = String(await client.info('backend'));
    expect(Number(info(after, 'backend_policy_decisions'))).toBe(Number(info(before, 'backend_policy_decisions')));
    expect(Number(info(after, 'backend_errors'))).toBe(Number(info(before, 'backend_errors')));
  });

  it('EXISTS and TYPE on keys of different slots, sent together', async () => {
    const keys = keysOnSeveralSlots('spread:', 20);
    const [exists, ...types] = await Promise.all([client.exists(...keys), ...keys.map((k) => client.type(k))]);
    expect(exists).toBe(keys.length);
    expect(types).toEqual(keys.map((_, i) => (i % 2 === 0 ? 'gcra' : 'tokenbucket')));
  });
});
