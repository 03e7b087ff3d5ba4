/**
 * A `redis-sentinel://` backend, with a real master and replica (redis-server) and three real
 * `redis-sentinel` processes on loopback that require a password of their own
 * (backend-sentinel-password; the URL's credentials are the master's): three sidecars decide
 * exactly; a failover (SENTINEL FAILOVER) moves them to the new master, which decides exactly from
 * the state the old one replicated, and the switch shows meanwhile as the backend going down (the
 * `backend-unavailable` policy, in INFO and the log) and up again. Also `cellgate-server ratelimit`
 * with REDIS_TYPE=sentinel and REDIS_SENTINEL_AUTH.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/server.js';
import { SentinelSet } from '../helpers/sentinel.js';
import { eventually, httpGet, plainUserCall as call, runMode, type ModeProcess } from '../rls/ratelimit-helpers.js';
import { backendInfo, freezeClocks, frozenInstant, limited, pollUntil, startSidecars, stopSidecars, waitBackendState, type Sidecar } from './helpers.js';

const PASSWORD = 's3nt-pass';
const T0 = frozenInstant();
const LIMIT = 10;
let set: SentinelSet;
let sidecars: Sidecar[] = [];

beforeAll(async () => {
  set = await SentinelSet.start({ password: PASSWORD });
  // A timeout a busy machine does not reach for a healthy master.
  sidecars = await startSidecars(3, `redis-sentinel://${set.hosts}/${set.name}`, { args: ['--backend-sentinel-password', PASSWORD, '--backend-timeout', '2000', '--backend-unavailable', 'deny'] });
  await freezeClocks(sidecars, T0);
}, 120_000);

afterAll(async () => {
  await stopSidecars(sidecars);
  await set?.destroy();
});

/** `n` calls of RL.FIXEDWINDOW on `key` spread over the sidecars, all at once; the limited flags. */
async function spread(key: string, n: number): Promise<number[]> {
  const replies = await Promise.all(Array.from({ length: n }, (_, i) => sidecars[i % sidecars.length].conns[i % 3].call('RL.FIXEDWINDOW', key, String(LIMIT), '10000')));
  return replies.map(limited);
}

describe('a redis-sentinel:// backend', () => {
  it('three sidecars on the master the Sentinels name: INFO says so, 30 calls at once allow exactly the limit, the key on the master', async () => {
    for (const s of sidecars) {
      const info = await backendInfo(s);
      expect([info.backend_mode, info.backend_state, info.backend_url]).toEqual(['sentinel', 'up', `redis-sentinel://${set.hosts}/${set.name}`]);
    }
    const flags = await spread('s:burst', 30);
    expect(flags.filter((f) => f === 0)).toHaveLength(LIMIT);
    expect(await set.master.call('EXISTS', 'cellgate:s:burst')).toBe(1);
    for (const s of sidecars) expect((await backendInfo(s)).backend_policy_decisions).toBe('0');
  });

  it('a wrong Sentinel password: the backend is never reached (state connecting), calls answered by the policy after backend-timeout', async () => {
    const [wrong] = await startSidecars(1, `redis-sentinel://${set.hosts}/${set.name}`, { waitUp: false, args: ['--backend-sentinel-password', 'not-it', '--backend-timeout', '300', '--backend-unavailable', 'deny'] });
    try {
      expect(await wrong.admin.call('RL.FIXEDWINDOW', 's:wrong', '5', '1000')).toEqual([1, 5, 0, 1000, 1000, 0]);
      const info = await backendInfo(wrong);
      expect([info.backend_state, info.backend_reached, info.backend_first_contact_expired]).toEqual(['connecting', '0', '1']);
    } finally {
      await stopSidecars([wrong]);
    }
  });

  it('SENTINEL FAILOVER: the sidecars see the backend go down (the policy) and up on the new master, which decides exactly from the replicated state', async () => {
    const key = 's:failover';
    // 6 of the 10 spent on the old master, replicated before the switch.
    expect((await spread(key, 6)).every((f) => f === 0)).toBe(true);
    const old = await set.currentMaster();
    expect(await old.call('WAIT', '1', '10000')).toBe(1);
    const before = await Promise.all(sidecars.map((s) => backendInfo(s)));
    const promoted = await set.failover();
    expect(promoted).not.toBe(old);
    // Sentinel closes the clients of the demoted master: each sidecar went down (answering by the
    // policy, logged) and came back up on the new master.
    for (const [i, s] of sidecars.entries()) {
      await pollUntil(async () => Number((await backendInfo(s)).backend_state_changes) >= Number(before[i].backend_state_changes) + 2, 'down and up again');
      await waitBackendState(s, 'up');
      expect(s.server.logs.some((l) => /backend down: .*answering by backend-unavailable deny/.test(l)), 'the down state logged').toBe(true);
    }
    // Each sidecar reaches the new master (a call decided there, not by the policy).
    const policyBefore = await Promise.all(sidecars.map(async (s) => Number((await backendInfo(s)).backend_policy_decisions)));
    const flags = await spread(key, 9);
    expect(flags.filter((f) => f === 0)).toHaveLength(LIMIT - 6);
    expect(await promoted.call('EXISTS', `cellgate:${key}`)).toBe(1);
    for (const [i, s] of sidecars.entries()) expect(Number((await backendInfo(s)).backend_policy_decisions)).toBe(policyBefore[i]);
  }, 120_000);
});

describe('cellgate-server ratelimit with REDIS_TYPE=sentinel', () => {
  const root = mkdtempSync(join(tmpdir(), 'cellgate-ratelimit-sentinel-'));
  const running: ModeProcess[] = [];
  afterAll(async () => {
    for (const m of running) await m.destroy();
    rmSync(root, { recursive: true, force: true });
  });

  it('REDIS_URL <master name>,<sentinels>, REDIS_SENTINEL_AUTH: two instances share one limit on the master', async () => {
    mkdirSync(join(root, 'ratelimit', 'config'), { recursive: true });
    writeFileSync(join(root, 'ratelimit', 'config', 'edge.yaml'), 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n');
    const instances: { m: ModeProcess; port: number; grpcPort: number }[] = [];
    for (let i = 0; i < 2; i++) {
      const port = await freePort();
      const grpcPort = await freePort();
      const m = runMode({
        RUNTIME_ROOT: root, RUNTIME_SUBDIRECTORY: 'ratelimit', RUNTIME_WATCH_ROOT: 'false', USE_STATSD: 'false', LOG_LEVEL: 'info',
        REDIS_SOCKET_TYPE: 'tcp', REDIS_TYPE: 'sentinel', REDIS_URL: `${set.name},${set.hosts}`, REDIS_SENTINEL_AUTH: PASSWORD,
        PORT: String(port), GRPC_PORT: String(grpcPort),
      });
      running.push(m);
      instances.push({ m, port, grpcPort });
    }
    for (const { m, port } of instances) await eventually(async () => (await httpGet(port, '/healthcheck'))?.status === 200, '/healthcheck 200', m);
    const [a, b] = instances;
    const codes = [await call(a.grpcPort, 'u1'), await call(b.grpcPort, 'u1'), await call(a.grpcPort, 'u1'), await call(b.grpcPort, 'u1')];
    expect(codes).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    const master = await set.currentMaster();
    expect(((await master.call('KEYS', 'cellgate:edge_user_u1_*')) as string[])).toHaveLength(1);
  }, 120_000);
});
