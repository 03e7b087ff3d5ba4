/**
 * The backend test fixtures themselves (test/helpers/redis.ts, test/helpers/delay-proxy.ts): a
 * standalone redis-server that stops, dies, restarts on its port, pauses and resumes; a 3+3 Redis
 * Cluster whose slots are all served, whose key → master mapping matches CLUSTER KEYSLOT, and whose
 * replica takes over when a master is killed; a delay proxy that adds latency on demand. Nothing is
 * left running afterwards.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { DelayProxy } from '../helpers/delay-proxy.js';
import { keySlot, redisServerPids, RedisCluster, RedisNode, stopAllRedis } from '../helpers/redis.js';

afterAll(async () => {
  await stopAllRedis();
});

describe('standalone redis-server fixture', () => {
  it('stops, is killed, restarts on its port, pauses and resumes; destroy leaves no process', async () => {
    const node = await RedisNode.start();
    try {
      const port = node.port;
      expect(port).toBeGreaterThanOrEqual(20_000);
      expect(port).toBeLessThan(60_000);
      expect(await node.call('PING')).toBe('PONG');
      expect(await node.call('CONFIG', 'GET', 'save')).toEqual(['save', '']);
      expect(await node.call('CONFIG', 'GET', 'appendonly')).toEqual(['appendonly', 'no']);
      expect(await node.call('CONFIG', 'GET', 'dir')).toEqual(['dir', node.dir]);

      await node.stop();
      expect(node.alive).toBe(false);
      await expect(node.call('PING')).rejects.toThrow();
      await node.restart();
      expect(node.port).toBe(port);
      expect(await node.call('PING')).toBe('PONG');

      await node.kill();
      expect(node.alive).toBe(false);
      await node.restart();
      expect(await node.call('PING')).toBe('PONG');

      // Paused: the connection is accepted by the kernel but nothing is answered until SIGCONT.
      const c = node.client();
      await c.ping();
      node.pause();
      let answered = false;
      const pending = c.ping().then(() => (answered = true));
      await new Promise((r) => setTimeout(r, 300));
      expect(answered).toBe(false);
      node.resume();
      await pending;
      expect(answered).toBe(true);
      c.disconnect();

      const pid = node.pid!;
      await node.destroy();
      expect(redisServerPids()).not.toContain(pid);
    } finally {
      await node.destroy();
    }
  });
});

describe('delay proxy', () => {
  it('forwards both ways, adds the configured delay when on, and none once it is off again', async () => {
    const node = await RedisNode.start();
    const proxy = await DelayProxy.start(node.port);
    const c = new Redis({ port: proxy.port, host: '127.0.0.1', maxRetriesPerRequest: 0 });
    c.on('error', () => {}); // the cut below resets it
    try {
      expect(await c.set('k', 'v')).toBe('OK');
      expect(await c.get('k')).toBe('v');
      proxy.setDelay(150);
      let t0 = performance.now();
      expect(await c.get('k')).toBe('v');
      // A lower bound only: a delay cannot make a round trip shorter (request and reply: 2 × 150).
      expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
      // Order is kept while delayed: a pipeline's replies come back in order.
      const pipe = c.pipeline();
      for (let i = 0; i < 20; i++) pipe.incr('n');
      const replies = (await pipe.exec())!.map(([, v]) => v);
      expect(replies).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
      proxy.setDelay(0);
      t0 = performance.now();
      for (let i = 0; i < 5; i++) await c.ping();
      expect(proxy.delay).toBe(0);
      // Cut: every connection through the proxy is reset; a new one works.
      proxy.cut();
      await new Promise((r) => setTimeout(r, 50));
      const c2 = new Redis({ port: proxy.port, host: '127.0.0.1', maxRetriesPerRequest: 0 });
      expect(await c2.get('k')).toBe('v');
      c2.disconnect();
    } finally {
      c.disconnect();
      await proxy.close();
      await node.destroy();
    }
  });
});

describe('Redis Cluster fixture', () => {
  it('3 masters + 3 replicas, every slot served; keys spread over all masters; a killed master is replaced by its replica', async () => {
    const cluster = await RedisCluster.start();
    try {
      expect(await cluster.healthy(true)).toBe(true);
      const topo = await cluster.topology();
      expect(topo.filter((n) => n.role === 'master')).toHaveLength(3);
      expect(topo.filter((n) => n.role === 'replica')).toHaveLength(3);

      // keySlot agrees with the server's CLUSTER KEYSLOT, hash tags included.
      const some = ['a', 'cellgate:user:1', 'cellgate:{user:42}:s', '{user:42}:h', 'x{}y', '{a}{b}', '{', 'é', 'foo', 'user:42', '{}x', '{x', 'a{b}c{d}', '', '123456789'];
      for (const k of some) expect(keySlot(k)).toBe(await cluster.nodes[0].call('CLUSTER', 'KEYSLOT', k));

      const groups = await cluster.keysPerMaster('k', 3);
      expect(groups).toHaveLength(3);
      expect(new Set(groups.map((g) => g.master.port)).size).toBe(3);
      for (const g of groups) {
        expect(g.keys).toHaveLength(3);
        for (const k of g.keys) expect((await cluster.masterFor(`cellgate:${k}`)).port).toBe(g.master.port);
        // The master accepts a write of that key itself (no MOVED); WAIT: its replica has it too.
        const c = g.master.client();
        expect(await c.set(`cellgate:${g.keys[0]}`, '1')).toBe('OK');
        expect(await c.call('WAIT', '1', '5000')).toBe(1);
        c.disconnect();
      }

      const victim = groups[1].master;
      const key = `cellgate:${groups[1].keys[0]}`;
      const promoted = await cluster.killMasterAndWaitFailover(victim);
      expect(victim.alive).toBe(false);
      expect((await cluster.masterFor(key)).port).toBe(promoted.port);
      expect(await promoted.call('GET', key)).toBe('1');
      expect((await cluster.masters())).toHaveLength(3);
    } finally {
      const pids = cluster.nodes.map((n) => n.pid);
      await cluster.destroy();
      const left = redisServerPids();
      for (const pid of pids) expect(left).not.toContain(pid);
    }
  }, 90_000);
});
