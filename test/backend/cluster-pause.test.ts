/**
 * A Cluster master paused (SIGSTOP) under bounded pipelined load, then failed over to its replica
 * (CLUSTER FAILOVER TAKEOVER), with a real Redis Cluster of 3 masters + 3 replicas: the other
 * masters' keys are decided by the backend throughout; the paused master's keys get the policy
 * (its node marked down, not the backend) and then go to the new master; the sidecar's memory stays
 * flat and no node ever has more calls pending than the cap.
 *
 * The load is 20 connections × 100 pipelined calls per round; the paused phase lasts 15 rounds
 * (150 with CELLGATE_SOAK=1). RSS is printed, bounded generously.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisCluster, type RedisNode } from '../helpers/redis.js';
import { MAX_PENDING_PER_NODE } from '../../src/backend/redis-backend.js';
import { backendInfo, startSidecar, stopSidecars, type Sidecar } from './helpers.js';

const SOAK = process.env.CELLGATE_SOAK === '1';
const CONNS = 20;
const PER_CONN = 100;
const PAUSED_ROUNDS = SOAK ? 150 : 15;
const BIG = 1_000_000_000;
const DENY = [1, BIG, 0, 1000, 1000, 0];

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

describe('cluster: one master paused, then failed over', () => {
  let cluster: RedisCluster;
  let s: Sidecar | undefined;
  let victim: RedisNode | undefined;

  beforeAll(async () => {
    // Without full coverage the live masters keep their slots while one is unreachable; a node
    // timeout longer than the paused phase: the failover is the test's TAKEOVER, not Redis's own.
    cluster = await RedisCluster.start({ nodeTimeoutMs: SOAK ? 60_000 : 15_000, args: ['--cluster-require-full-coverage', 'no'] });
    // A timeout a busy machine does not reach for a healthy master; deny: a policy answer is told
    // apart from the backend's (which always allows this limit).
    s = await startSidecar(cluster.url, { conns: CONNS, args: ['--backend-timeout', '1000', '--backend-unavailable', 'deny'] });
  }, 120_000);

  afterAll(async () => {
    victim?.resume();
    await stopSidecars([s]);
    await cluster?.destroy();
  });

  it('other masters\' keys decided throughout; the paused master\'s keys get the policy, then go to its promoted replica; memory flat, pending never above the cap', async () => {
    const sc = s!;
    const groups = await cluster.keysPerMaster('pause:', 10);
    const victimGroup = 1;
    victim = groups[victimGroup].master;
    const topo = await cluster.topology();
    const me = topo.find((n) => n.port === victim!.port)!;
    const replica = cluster.nodeByPort(topo.find((n) => n.masterId === me.id)!.port);
    const keys = groups.flatMap((g) => g.keys);
    const groupOf = (k: number): number => Math.floor(k / groups[0].keys.length);
    const pid = sc.server.proc.pid!;

    /** One round: every connection sends PER_CONN calls pipelined over all keys; per group, [backend, policy, errors]. */
    async function round(): Promise<number[][]> {
      const counts = groups.map(() => [0, 0, 0]);
      await Promise.all(sc.conns.map(async (c, ci) => {
        const pipe = c.pipeline();
        const ks: number[] = [];
        for (let i = 0; i < PER_CONN; i++) {
          const k = (ci * PER_CONN + i) % keys.length;
          ks.push(k);
          pipe.call('RL.FIXEDWINDOW', keys[k], String(BIG), '10000');
        }
        const res = (await pipe.exec())!;
        res.forEach(([err, v], i) => {
          const g = counts[groupOf(ks[i])];
          if (err) g[2]++;
          else if ((v as number[])[0] === 0) g[0]++;
          else {
            expect(v).toEqual(DENY);
            g[1]++;
          }
        });
      }));
      return counts;
    }

    const rss: number[] = [];
    let peak = 0;
    let sawNodeDown = false;
    const sample = async (): Promise<void> => {
      rss.push(rssMb(pid));
      const info = await backendInfo(sc);
      peak = Math.max(peak, Number(info.backend_pending_peak));
      if (Number(info.backend_nodes_down) > 0) sawNodeDown = true;
      expect(info.backend_state, 'the backend as a whole stays up').toBe('up');
    };

    // Warm-up: the Cluster client connects to each node and loads the script there (a call for a
    // node not connected yet gets the policy at once).
    let warm = 0;
    for (; warm < 50; warm++) {
      const c = await round();
      if (c.every((g) => g[1] === 0 && g[2] === 0)) break;
    }
    expect(warm, `warm-up: ${JSON.stringify(await backendInfo(sc))}`).toBeLessThan(50);
    // Before: everything decided by the backend.
    for (let i = 0; i < 3; i++) {
      const c = await round();
      for (const g of c) expect(g).toEqual([expect.any(Number), 0, 0]);
    }
    await sample();
    const rssStart = rss[0];

    victim.pause();
    const paused: number[][][] = [];
    for (let i = 0; i < PAUSED_ROUNDS; i++) {
      paused.push(await round());
      await sample();
    }
    // Take over on the replica (it needs no agreement from the paused master).
    expect(await replica.call('CLUSTER', 'FAILOVER', 'TAKEOVER')).toBe('OK');
    const after: number[][][] = [];
    let victimBack = -1;
    for (let i = 0; i < 200 && (victimBack < 0 || i < victimBack + 5); i++) {
      const c = await round();
      after.push(c);
      await sample();
      if (victimBack < 0 && c[victimGroup][0] === c[victimGroup].reduce((a, b) => a + b, 0)) victimBack = i;
    }
    const show = (rs: number[][][]) => groups.map((_, gi) => rs.reduce((a, r) => a.map((x, j) => x + r[gi][j]), [0, 0, 0]).join('/')).join(', ');
    const info = await backendInfo(sc);
    console.log(`[attack] cluster pause: ${CONNS}x${PER_CONN} pipelined per round; backend/policy/errors per master (victim #${victimGroup}) paused ${PAUSED_ROUNDS} rounds: ${show(paused)}; after TAKEOVER: ${show(after)} (victim back after ${victimBack < 0 ? 'never' : `${victimBack + 1} rounds`}); RSS MB ${rss.map((x) => x.toFixed(0)).join(' ')}; pending peak ${peak} (cap ${MAX_PENDING_PER_NODE}); overflows ${info.backend_overflows}; timeouts ${info.backend_timeouts}; node down/up: ${sc.server.logs.filter((l) => l.includes('"backend node')).map((l) => String(JSON.parse(l).msg)).join(' | ')}`);

    // Other masters: answered by the backend in every round, paused or not.
    for (const rs of [paused, after]) {
      for (const c of rs) {
        for (const [gi, g] of c.entries()) {
          expect(g[2], `group ${gi}: no error replies`).toBe(0);
          if (gi !== victimGroup) expect(g[1], `group ${gi}: decided by the backend`).toBe(0);
        }
      }
    }
    // The paused master's keys: the policy, never a backend decision, while paused.
    const victimPaused = paused.reduce((a, c) => a + c[victimGroup][0], 0);
    expect(victimPaused).toBe(0);
    expect(sawNodeDown, 'the paused master was marked down').toBe(true);
    // Then the promoted replica decides them.
    expect(victimBack, 'the victim\'s keys reached the new master').toBeGreaterThanOrEqual(0);
    for (const c of after.slice(victimBack)) expect(c[victimGroup][1]).toBe(0);
    expect(sc.server.proc.exitCode).toBeNull();
    expect(peak).toBeLessThanOrEqual(MAX_PENDING_PER_NODE);
    expect(Math.max(...rss)).toBeLessThan(2 * rssStart + 100);
    expect(sc.server.logs.filter((l) => l.includes('"backend down'))).toEqual([]);
  }, SOAK ? 600_000 : 240_000);
});
