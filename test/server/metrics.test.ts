/**
 * Prometheus metrics on `metrics-port`: the text exposition format, fed by the same counters as INFO.
 */
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { freePort, startServer } from '../helpers/server.js';

describe('metrics', () => {
  it('serves Prometheus text on /metrics with limiter decisions, keys and commands', async () => {
    const metricsPort = await freePort();
    const s = await startServer({ args: ['--metrics-port', String(metricsPort)] });
    const redis = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    try {
      await redis.call('DEBUG', 'CLOCK', 'SET', '1800000000000');
      await redis.call('CL.THROTTLE', 'm', '0', '1', '60');
      await redis.call('CL.THROTTLE', 'm', '0', '1', '60');
      await redis.call('RL.FIXEDWINDOW', 'f', '5', '1000');
      const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
      const text = await res.text();
      expect(text).toContain('# TYPE cellgate_limiter_decisions_total counter\n');
      expect(text).toContain('cellgate_limiter_decisions_total{command="cl.throttle",result="allowed"} 1\n');
      expect(text).toContain('cellgate_limiter_decisions_total{command="cl.throttle",result="limited"} 1\n');
      expect(text).toContain('cellgate_keys{type="gcra"} 1\n');
      expect(text).toContain('cellgate_keys{type="fixedwindow"} 1\n');
      expect(text).toContain('cellgate_command_calls_total{command="cl.throttle"} 2\n');
      expect(text).toMatch(/\ncellgate_connected_clients 1\n/);
      expect(text).toMatch(/\ncellgate_memory_used_bytes \d+\n/);
      // Every sample line is `name{labels} number` or `name number`.
      for (const line of text.split('\n').filter((l) => l !== '' && !l.startsWith('#'))) {
        expect(line).toMatch(/^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[\d.e+]+$/);
      }
      expect((await fetch(`http://127.0.0.1:${metricsPort}/other`)).status).toBe(404);
    } finally {
      redis.disconnect();
      await s.stop();
    }
  });

  it('is off by default', async () => {
    const s = await startServer();
    try {
      expect(s.logs.join('\n')).not.toContain('Prometheus metrics on port');
    } finally {
      await s.stop();
    }
  });
});
