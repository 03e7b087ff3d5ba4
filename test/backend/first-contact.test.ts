/**
 * The first contact with the backend, with real redis-server processes (one Redis, and a Cluster of
 * 3 masters + 3 replicas): sidecars started at once with a first burst sent at once, a CPU-bound
 * process beside them. Before a sidecar reached its backend, a call waits for it (within
 * backend-timeout) instead of being answered by the `backend-unavailable` policy: no call of the
 * first burst is answered by the policy and the limit holds exactly across the sidecars; /readyz
 * says not ready until the backend is reached.
 *
 * The mechanism is made visible by a backend whose port opens only later: the burst's calls are seen
 * held (INFO backend_first_contact_waiting), /readyz answers 503, then the port opens and every held
 * call is decided by the backend.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_WAITING } from '../../src/backend/first-contact.js';
import { freePort } from '../helpers/server.js';
import { RedisCluster, RedisNode, stopAllRedis } from '../helpers/redis.js';
import { randomFreePort } from '../helpers/ports.js';
import { backendInfo, countAllowed, freezeClocks, frozenInstant, pollUntil, startSidecar, stopSidecars, type Reply, type Sidecar } from './helpers.js';

const T0 = frozenInstant();
const LIMIT = 10;
/** Calls per sidecar in the first burst (2 connections × 20), on two keys. */
const PER_CONN = 20;
const CONNS = 2;
/**
 * Long enough that a busy machine's first contact (a Cluster's discovery included) comes within it:
 * what is asserted is that calls wait for it rather than being answered at once.
 */
const TIMEOUT_MS = '20000';
let keySeq = 0;

/** A CPU-bound process on the machine for the length of a test (a busy CI neighbour). */
function cpuHog(): ChildProcess {
  return spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' });
}

function readyz(s: Sidecar): Promise<{ status: number; body: string }> {
  return fetch(`http://127.0.0.1:${s.metricsPort}/readyz`).then(async (r) => ({ status: r.status, body: await r.text() }));
}

/**
 * The first burst of one sidecar: its clock frozen at T0, then PER_CONN calls on each connection,
 * alternately on keys `a` and `b`, all pipelined at once. Returns the replies per key.
 */
async function firstBurst(s: Sidecar, a: string, b: string): Promise<{ a: Reply[]; b: Reply[] }> {
  await freezeClocks([s], T0);
  const out = { a: [] as Reply[], b: [] as Reply[] };
  await Promise.all(s.conns.map(async (c) => {
    const pipe = c.pipeline();
    for (let i = 0; i < PER_CONN; i++) pipe.call('RL.FIXEDWINDOW', i % 2 === 0 ? a : b, String(LIMIT), '10000');
    const res = (await pipe.exec())!;
    res.forEach(([err, v], i) => (i % 2 === 0 ? out.a : out.b).push(err ?? v));
  }));
  return out;
}

/** Starts `n` sidecars on `url` at once, each sending its first burst as soon as its port is open. */
async function startWithBursts(n: number, url: string, a: string, b: string, args: string[] = []): Promise<{ sidecars: Sidecar[]; bursts: Promise<{ a: Reply[]; b: Reply[] }>[] }> {
  const sidecars: Sidecar[] = [];
  const bursts: Promise<{ a: Reply[]; b: Reply[] }>[] = [];
  await Promise.all(Array.from({ length: n }, async () => {
    const s = await startSidecar(url, { conns: CONNS, waitUp: false, metricsPort: await freePort(), args: ['--backend-timeout', TIMEOUT_MS, ...args] });
    sidecars.push(s);
    bursts.push(firstBurst(s, a, b));
  }));
  return { sidecars, bursts };
}

async function expectExact(sidecars: Sidecar[], bursts: Promise<{ a: Reply[]; b: Reply[] }>[]): Promise<void> {
  const done = await Promise.all(bursts);
  const infos = await Promise.all(sidecars.map((s) => backendInfo(s)));
  console.log(`[first contact] ${infos.map((i) => `waits ${i.backend_first_contact_waits}, policy ${i.backend_policy_decisions}, errors ${i.backend_errors}, timeouts ${i.backend_timeouts}`).join('; ')}`);
  for (const [i, info] of infos.entries()) {
    expect(info.backend_policy_decisions, `no call of the first burst answered by backend-unavailable: ${JSON.stringify(info)}\n${sidecars[i].server.logs.slice(-6).join('\n')}`).toBe('0');
  }
  expect(countAllowed(done.flatMap((d) => d.a)), 'key a: the limit across the sidecars').toBe(LIMIT);
  expect(countAllowed(done.flatMap((d) => d.b)), 'key b: the limit across the sidecars').toBe(LIMIT);
  for (const info of infos) expect(info.backend_first_contact_expired).toBe('0');
}

/**
 * Waits until each sidecar holds its whole first burst for the first contact, or its burst was
 * answered (as it was when calls got the policy at once): asserts it was held, unanswered.
 */
async function expectHeld(sidecars: Sidecar[], bursts: Promise<unknown>[]): Promise<void> {
  const answered = bursts.map(() => false);
  bursts.forEach((b, i) => void b.then(() => (answered[i] = true), () => (answered[i] = true)));
  for (const [i, s] of sidecars.entries()) {
    await pollUntil(async () => answered[i] || (await backendInfo(s)).backend_first_contact_waiting === String(CONNS * PER_CONN), 'the first burst held, or answered');
    const info = await backendInfo(s);
    expect(info.backend_policy_decisions, 'calls answered by backend-unavailable before the backend was reached').toBe('0');
    expect(answered[i], 'the burst waits for the backend').toBe(false);
    expect([info.backend_state, info.backend_reached, info.backend_first_contact_waiting]).toEqual(['connecting', '0', String(CONNS * PER_CONN)]);
  }
}

/** A TCP forwarder to `targetPort` on a port named now that starts listening only when `open()` is called. */
async function laterPort(targetPort: number): Promise<{ port: number; open(): Promise<void>; close(): Promise<void> }> {
  const port = await randomFreePort();
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const up = net.connect(targetPort, '127.0.0.1');
    for (const s of [client, up]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => { sockets.delete(s); client.destroy(); up.destroy(); });
    }
    client.pipe(up);
    up.pipe(client);
  });
  return {
    port,
    open: () => new Promise((resolve, reject) => { server.once('error', reject); server.listen(port, '127.0.0.1', () => resolve()); }),
    close: () => new Promise((resolve) => { for (const s of sockets) s.destroy(); server.close(() => resolve()); if (!server.listening) resolve(); }),
  };
}

afterAll(async () => {
  await stopAllRedis();
});

describe('one Redis', () => {
  let node: RedisNode;
  beforeAll(async () => {
    node = await RedisNode.start();
  });

  it('three sidecars started at once, a first burst at once, a CPU-bound process beside them: no policy answer, the limit exact', async () => {
    const hog = cpuHog();
    let started: Sidecar[] = [];
    try {
      for (let round = 0; round < 3; round++) {
        const n = ++keySeq;
        const { sidecars, bursts } = await startWithBursts(3, node.url, `fc:a${n}`, `fc:b${n}`);
        started = sidecars;
        await expectExact(sidecars, bursts);
        await stopSidecars(sidecars);
        started = [];
      }
    } finally {
      hog.kill('SIGKILL');
      await stopSidecars(started);
    }
  }, 120_000);

  it('a backend whose port opens later: the calls wait for it, /readyz says not ready, then the backend decides every one', async () => {
    const port = await randomFreePort();
    const n = ++keySeq;
    const { sidecars, bursts } = await startWithBursts(3, `redis://127.0.0.1:${port}`, `fc:a${n}`, `fc:b${n}`, ['--backend-unavailable', 'allow']);
    let later: RedisNode | undefined;
    try {
      await expectHeld(sidecars, bursts);
      for (const s of sidecars) {
        const r = await readyz(s);
        expect(r.status).toBe(503);
        expect(r.body).toMatch(/^not ready: backend not reached yet \(connecting/);
        expect((await fetch(`http://127.0.0.1:${s.metricsPort}/metrics`).then((x) => x.text()))).toMatch(/^cellgate_backend_first_contact_waits_total 40$/m);
      }
      later = await RedisNode.start({ port });
      await expectExact(sidecars, bursts);
      for (const s of sidecars) {
        expect((await backendInfo(s)).backend_reached).toBe('1');
        await pollUntil(async () => (await readyz(s)).status === 200, '/readyz ready once reached');
      }
    } finally {
      await stopSidecars(sidecars);
      await later?.destroy();
    }
  }, 120_000);

  it('a backend never reached: each held call gets the policy once backend-timeout passed; past the cap the policy at once (counted)', async () => {
    const port = await randomFreePort();
    const s = await startSidecar(`redis://127.0.0.1:${port}`, { conns: 3, waitUp: false, args: ['--backend-timeout', '3000', '--backend-unavailable', 'deny'] });
    try {
      await freezeClocks([s], T0);
      const perConn = Math.ceil((MAX_WAITING + 30) / 3);
      const all = await Promise.all(s.conns.map(async (c, ci) => {
        const pipe = c.pipeline();
        for (let i = 0; i < perConn; i++) pipe.call('RL.FIXEDWINDOW', `never:${ci}:${i % 7}`, '1000', '10000');
        return (await pipe.exec())!.map(([err, v]) => err ?? v);
      }));
      const sent = perConn * 3;
      for (const r of all.flat()) expect(r, 'the deny policy').toEqual([1, 1000, 0, 1000, 1000, 0]);
      const info = await backendInfo(s);
      expect(Number(info.backend_first_contact_waits)).toBe(MAX_WAITING);
      expect(Number(info.backend_first_contact_expired)).toBe(MAX_WAITING);
      expect(Number(info.backend_overflows)).toBe(sent - MAX_WAITING);
      expect(Number(info.backend_policy_decisions)).toBe(sent);
      expect(info.backend_first_contact_waiting).toBe('0');
      expect(info.backend_state).toBe('connecting');
      expect(await s.admin.ping()).toBe('PONG');
    } finally {
      await stopSidecars([s]);
    }
  }, 60_000);
});

describe('a Redis Cluster of 3 masters', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await RedisCluster.start();
  }, 120_000);

  /** Two keys on two different masters. */
  async function twoKeys(): Promise<[string, string]> {
    const groups = await cluster.keysPerMaster(`fc:${++keySeq}:`, 1);
    return [groups[0].keys[0], groups[1].keys[0]];
  }

  it('three sidecars started at once on a fresh Cluster, a first burst at once, a CPU-bound process beside them: no policy answer, the limit exact', async () => {
    const hog = cpuHog();
    let started: Sidecar[] = [];
    try {
      for (let round = 0; round < 3; round++) {
        const [a, b] = await twoKeys();
        const { sidecars, bursts } = await startWithBursts(3, cluster.url, a, b);
        started = sidecars;
        await expectExact(sidecars, bursts);
        await stopSidecars(sidecars);
        started = [];
      }
    } finally {
      hog.kill('SIGKILL');
      await stopSidecars(started);
    }
  }, 180_000);

  it('a seed whose port opens later: the calls wait, /readyz says not ready, then the Cluster decides every one', async () => {
    const seed = await laterPort(cluster.nodes[0].port);
    const [a, b] = await twoKeys();
    const { sidecars, bursts } = await startWithBursts(3, `redis-cluster://127.0.0.1:${seed.port}`, a, b, ['--backend-unavailable', 'local']);
    try {
      await expectHeld(sidecars, bursts);
      for (const s of sidecars) expect((await readyz(s)).status).toBe(503);
      await seed.open();
      await expectExact(sidecars, bursts);
      for (const s of sidecars) await pollUntil(async () => (await readyz(s)).status === 200, '/readyz ready once reached');
    } finally {
      await stopSidecars(sidecars);
      await seed.close();
    }
  }, 120_000);
});
