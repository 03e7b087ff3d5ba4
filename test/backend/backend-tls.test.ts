/**
 * The backend over TLS with a client certificate (backend-tls-cert-file, -key-file, -ca-cert-file),
 * against a real redis-server started with --tls-port and --tls-auth-clients yes, with certificates
 * made by openssl here: two client CAs, a pair signed by each, the files mounted as Kubernetes
 * mounts a Secret (`tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>`).
 *
 * What is asserted is the mechanism: Redis is told to trust only the new pair's CA and to close its
 * clients; the sidecar's reconnection succeeds only if it presents the new pair. A Secret swapped to
 * garbage is refused (counted, logged, the old pair kept: the next reconnection still succeeds);
 * CONFIG SET of the file settings takes another pair.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { randomFreePort } from '../helpers/ports.js';
import { freePort } from '../helpers/server.js';
import { RateLimitServiceClient } from '../rls/helpers.js';
import { eventually, httpGet, runMode } from '../rls/ratelimit-helpers.js';
import { REDIS_CLI, RedisNode } from '../helpers/redis.js';
import { backendInfo, limited, pollUntil, startSidecar, stopSidecars, waitBackendState, type Sidecar } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'cellgate-backend-tls-'));
const certs = join(dir, 'certs');
const secret = join(dir, 'secret');
let generation = 0;

function openssl(args: string[]): void {
  const r = spawnSync('openssl', args, { cwd: certs, encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
}

/** A CA `name` (name.crt, name.key), and `leaf` signed by it (leaf.crt, leaf.key), with a SAN for 127.0.0.1. */
function makeCa(name: string): void {
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`]);
}
function makeLeaf(leaf: string, ca: string): void {
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${leaf}.key`, '-out', `${leaf}.csr`, '-subj', `/CN=${leaf}`]);
  writeFileSync(join(certs, `${leaf}.ext`), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  openssl(['x509', '-req', '-in', `${leaf}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-out', `${leaf}.crt`, '-days', '2', '-extfile', `${leaf}.ext`]);
}

/**
 * Writes the Secret's files as the kubelet does: a new `..<n>` directory, then `..data` swapped to
 * it in one rename; tls.crt, tls.key and ca.crt are links through `..data`.
 */
function mountSecret(files: { crt: string | Buffer; key: string | Buffer; ca: string | Buffer }): void {
  mkdirSync(secret, { recursive: true });
  const version = `..v${++generation}`;
  mkdirSync(join(secret, version));
  writeFileSync(join(secret, version, 'tls.crt'), files.crt);
  writeFileSync(join(secret, version, 'tls.key'), files.key);
  writeFileSync(join(secret, version, 'ca.crt'), files.ca);
  symlinkSync(version, join(secret, '..data_tmp'));
  renameSync(join(secret, '..data_tmp'), join(secret, '..data'));
  if (generation === 1) for (const f of ['tls.crt', 'tls.key', 'ca.crt']) symlinkSync(join('..data', f), join(secret, f));
}

const pem = (name: string): Buffer => spawnSync('cat', [join(certs, name)]).stdout;

let node: RedisNode;
let tlsPort: number;
let s: Sidecar;

beforeAll(async () => {
  mkdirSync(certs, { recursive: true });
  makeCa('server-ca');
  makeLeaf('server', 'server-ca');
  makeCa('clients-a');
  makeLeaf('client-a', 'clients-a');
  makeCa('clients-b');
  makeLeaf('client-b', 'clients-b');
  tlsPort = await randomFreePort();
  // The plain port stays for the test's own commands; the sidecar uses the TLS port only.
  node = await RedisNode.start({
    args: ['--tls-port', String(tlsPort), '--tls-cert-file', join(certs, 'server.crt'), '--tls-key-file', join(certs, 'server.key'),
      '--tls-ca-cert-file', join(certs, 'clients-a.crt'), '--tls-auth-clients', 'yes'],
  });
  mountSecret({ crt: pem('client-a.crt'), key: pem('client-a.key'), ca: pem('server-ca.crt') });
  s = await startSidecar(`rediss://127.0.0.1:${tlsPort}`, {
    conns: 1,
    args: ['--backend-tls-cert-file', join(secret, 'tls.crt'), '--backend-tls-key-file', join(secret, 'tls.key'), '--backend-tls-ca-cert-file', join(secret, 'ca.crt'),
      '--backend-timeout', '2000', '--backend-unavailable', 'deny'],
  });
}, 120_000);

afterAll(async () => {
  await stopSidecars([s]);
  await node?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

/** Redis trusts only `ca`'s client certificates from now on, and closes every client (the sidecar reconnects). */
async function trustOnly(ca: string): Promise<void> {
  await node.call('CONFIG', 'SET', 'tls-ca-cert-file', join(certs, `${ca}.crt`));
  await node.call('CLIENT', 'KILL', 'TYPE', 'normal');
  await node.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
}

/** A call decided by the backend (not by the deny policy, which refuses this limit). */
async function decidedByBackend(key: string): Promise<void> {
  const before = Number((await backendInfo(s)).backend_policy_decisions);
  expect(limited(await s.admin.call('RL.FIXEDWINDOW', key, '1000', '10000'))).toBe(0);
  expect(Number((await backendInfo(s)).backend_policy_decisions)).toBe(before);
  expect(await node.call('EXISTS', `cellgate:${key}`)).toBe(1);
}

describe('backend TLS with a client certificate', () => {
  it('the pair is presented: Redis, which requires a client certificate, decides the calls', async () => {
    await decidedByBackend('tls:first');
    const info = await backendInfo(s);
    expect([info.backend_tls_reloads, info.backend_tls_reload_errors]).toEqual(['0', '0']);
  });

  it('without the pair the backend is never reached (Redis refuses the handshake)', async () => {
    const bare = await startSidecar(`rediss://127.0.0.1:${tlsPort}`, { conns: 0, waitUp: false, args: ['--backend-tls-ca-cert-file', join(certs, 'server-ca.crt'), '--backend-timeout', '300'] });
    try {
      await pollUntil(async () => /first contact|tls|certificate|socket|ECONNRESET/i.test((await backendInfo(bare)).backend_last_error), 'a handshake error');
      const info = await backendInfo(bare);
      expect([info.backend_state, info.backend_reached]).toEqual(['connecting', '0']);
    } finally {
      await stopSidecars([bare]);
    }
  });

  it('a ..data swap to a pair of another CA is taken: once Redis trusts only that CA, the sidecar reconnects with it', async () => {
    mountSecret({ crt: pem('client-b.crt'), key: pem('client-b.key'), ca: pem('server-ca.crt') });
    await pollUntil(async () => (await backendInfo(s)).backend_tls_reloads === '1', 'the new pair taken');
    expect(s.server.logs.some((l) => l.includes('backend-tls: the client certificate, key or CA changed'))).toBe(true);
    const changes = Number((await backendInfo(s)).backend_state_changes);
    await trustOnly('clients-b');
    await pollUntil(async () => Number((await backendInfo(s)).backend_state_changes) >= changes + 2, 'down, then up with the new pair');
    await waitBackendState(s, 'up');
    await decidedByBackend('tls:rotated');
  });

  it('a Secret swapped to garbage: refused, logged and counted; the pair in force stays and reconnects', async () => {
    mountSecret({ crt: 'not a certificate\n', key: pem('client-a.key'), ca: pem('server-ca.crt') });
    await pollUntil(async () => (await backendInfo(s)).backend_tls_reload_errors === '1', 'the broken pair refused');
    const info = await backendInfo(s);
    expect(info.backend_tls_last_error).toMatch(/^backend-tls-cert-file: no PEM certificate in it/);
    expect(info.backend_tls_reloads).toBe('1');
    expect(s.server.logs.some((l) => l.includes('the certificate, key and CA in force stay'))).toBe(true);
    const changes = Number(info.backend_state_changes);
    await trustOnly('clients-b');
    await pollUntil(async () => Number((await backendInfo(s)).backend_state_changes) >= changes + 2, 'down, then up with the pair in force');
    await waitBackendState(s, 'up');
    await decidedByBackend('tls:kept');
  });

  it('CONFIG SET of the file settings takes another pair (a mismatched one is refused on the way)', async () => {
    const other = join(dir, 'other');
    mkdirSync(other);
    copyFileSync(join(certs, 'client-a.crt'), join(other, 'a.crt'));
    copyFileSync(join(certs, 'client-a.key'), join(other, 'a.key'));
    const errors = Number((await backendInfo(s)).backend_tls_reload_errors);
    // The three settings in one CONFIG SET: one set read after it.
    expect(await s.admin.call('CONFIG', 'SET', 'backend-tls-cert-file', join(other, 'a.crt'), 'backend-tls-key-file', join(other, 'a.key'), 'backend-tls-ca-cert-file', join(certs, 'server-ca.crt'))).toBe('OK');
    await pollUntil(async () => (await backendInfo(s)).backend_tls_reloads === '2', 'the pair named by CONFIG SET taken');
    expect(Number((await backendInfo(s)).backend_tls_reload_errors)).toBe(errors);
    const changes = Number((await backendInfo(s)).backend_state_changes);
    await trustOnly('clients-a');
    await pollUntil(async () => Number((await backendInfo(s)).backend_state_changes) >= changes + 2, 'down, then up with pair a');
    await waitBackendState(s, 'up');
    await decidedByBackend('tls:config-set');
    // A key that is not the certificate's: refused, the pair in force kept.
    copyFileSync(join(certs, 'client-b.key'), join(other, 'b.key'));
    expect(await s.admin.call('CONFIG', 'SET', 'backend-tls-key-file', join(other, 'b.key'))).toBe('OK');
    await pollUntil(async () => Number((await backendInfo(s)).backend_tls_reload_errors) === errors + 1, 'the mismatched pair refused');
    expect((await backendInfo(s)).backend_tls_last_error).toMatch(/do not make a pair/);
  });

  it('hostile files: a FIFO and /dev/zero named by CONFIG SET are refused without blocking (counted), the pair in force kept', async () => {
    const fifo = join(dir, 'cert.fifo');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    const errors = Number((await backendInfo(s)).backend_tls_reload_errors);
    const reloads = (await backendInfo(s)).backend_tls_reloads;
    for (const [i, bad] of [fifo, '/dev/zero'].entries()) {
      expect(await s.admin.call('CONFIG', 'SET', 'backend-tls-cert-file', bad)).toBe('OK');
      await pollUntil(async () => Number((await backendInfo(s)).backend_tls_reload_errors) === errors + i + 1, `${bad} refused`);
      expect((await backendInfo(s)).backend_tls_last_error).toMatch(/regular file|not a file|FIFO|character|device/i);
      expect(await s.admin.ping()).toBe('PONG');
    }
    expect((await backendInfo(s)).backend_tls_reloads).toBe(reloads);
    await decidedByBackend('tls:hostile');
  });

  it('cellgate-server ratelimit with REDIS_TLS=true and REDIS_TLS_CLIENT_CERT/KEY/CACERT: the pair presented, the calls decided on Redis', async () => {
    await trustOnly('clients-a');
    const root = join(dir, 'runtime');
    mkdirSync(join(root, 'rl', 'config'), { recursive: true });
    writeFileSync(join(root, 'rl', 'config', 'edge.yaml'), 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n');
    const port = await freePort();
    const grpcPort = await freePort();
    const m = runMode({
      RUNTIME_ROOT: root, RUNTIME_SUBDIRECTORY: 'rl', RUNTIME_WATCH_ROOT: 'false', USE_STATSD: 'false', LOG_LEVEL: 'info',
      REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: `127.0.0.1:${tlsPort}`, REDIS_TLS: 'true',
      REDIS_TLS_CLIENT_CERT: join(certs, 'client-a.crt'), REDIS_TLS_CLIENT_KEY: join(certs, 'client-a.key'), REDIS_TLS_CACERT: join(certs, 'server-ca.crt'),
      PORT: String(port), GRPC_PORT: String(grpcPort),
    });
    try {
      await eventually(async () => (await httpGet(port, '/healthcheck'))?.status === 200, '/healthcheck 200', m);
      const codes: string[] = [];
      for (let i = 0; i < 3; i++) {
        const client = new RateLimitServiceClient(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure());
        codes.push(await new Promise<string>((resolve, reject) => {
          // eslint-disable-next-line @typescript-eslint/no-explicit-any
          (client as any).ShouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'tls' }] }] }, { deadline: Date.now() + 20_000 }, (e: Error | null, r: { overall_code: string }) => {
            client.close();
            if (e) reject(e);
            else resolve(r.overall_code);
          });
        }));
      }
      expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
      expect(((await node.call('KEYS', 'cellgate:edge_user_tls_*')) as string[])).toHaveLength(1);
    } finally {
      await m.destroy();
    }
  }, 120_000);
});

describe('rediss-cluster://: a Redis Cluster over TLS (bus included) with client certificates', () => {
  const nodes: RedisNode[] = [];
  const tlsPorts: number[] = [];
  afterAll(async () => {
    await Promise.all(nodes.map((n) => n.destroy()));
  });

  it('three masters that announce their TLS ports: the sidecar presents its pair to each, decisions exact, none by the policy', async () => {
    // One CA for everything here: the nodes' certificates serve the cluster bus too (as clients).
    const both = join(certs, 'both-cas.crt');
    writeFileSync(both, Buffer.concat([pem('server-ca.crt'), pem('clients-a.crt')]));
    for (let i = 0; i < 3; i++) {
      const tlsPort = await randomFreePort({ bus: true });
      tlsPorts.push(tlsPort);
      nodes.push(await RedisNode.start({
        cluster: true,
        args: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000',
          '--tls-port', String(tlsPort), '--tls-cluster', 'yes', '--tls-cert-file', join(certs, 'server.crt'), '--tls-key-file', join(certs, 'server.key'),
          '--tls-ca-cert-file', both, '--tls-auth-clients', 'yes'],
      }));
    }
    const create = spawnSync(REDIS_CLI, ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'], { encoding: 'utf8', timeout: 60_000 });
    expect(create.status, create.stdout + create.stderr).toBe(0);
    await pollUntil(async () => {
      for (const n of nodes) if (!String(await n.call('CLUSTER', 'INFO')).includes('cluster_state:ok')) return false;
      return true;
    }, 'the TLS cluster ok');
    const c = await startSidecar(`rediss-cluster://127.0.0.1:${tlsPorts[0]}`, {
      conns: 3,
      args: ['--backend-tls-cert-file', join(certs, 'client-a.crt'), '--backend-tls-key-file', join(certs, 'client-a.key'), '--backend-tls-ca-cert-file', join(certs, 'server-ca.crt'),
        '--backend-timeout', '5000', '--backend-unavailable', 'deny'],
    });
    try {
      const keys = ['tc:a', 'tc:b', 'tc:c', 'tc:d', 'tc:e', 'tc:f'];
      const replies = await Promise.all(keys.flatMap((k) => Array.from({ length: 5 }, (_, i) => c.conns[i % 3].call('RL.FIXEDWINDOW', k, '3', '10000'))));
      const allowed = replies.map(limited).filter((f) => f === 0).length;
      expect(allowed).toBe(keys.length * 3);
      const info = await backendInfo(c);
      expect([info.backend_mode, info.backend_state, info.backend_policy_decisions, info.backend_errors]).toEqual(['cluster', 'up', '0', '0']);
      // The keys spread over the masters, reached on their TLS ports (the plain ones were never named).
      let found = 0;
      for (const n of nodes) found += ((await n.call('KEYS', 'cellgate:tc:*')) as string[]).length;
      expect(found).toBe(keys.length);
    } finally {
      await stopSidecars([c]);
    }
  }, 180_000);
});
