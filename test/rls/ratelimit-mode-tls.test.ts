/**
 * `cellgate-server ratelimit` with envoyproxy/ratelimit's gRPC TLS variables (GRPC_SERVER_USE_TLS,
 * GRPC_SERVER_TLS_CERT/KEY from a mounted Secret, GRPC_CLIENT_TLS_CACERT, GRPC_CLIENT_TLS_SAN): they
 * land on the rls-tls-* settings, client certificates are required and their name checked, and the
 * Secret's `..data` swap rotates the server's certificate without a restart (TestReloadGRPCServerCerts
 * as Kubernetes does it). Certificates made by the test with openssl.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { freePort } from '../helpers/server.js';
import { RateLimitServiceClient } from './helpers.js';
import { eventually, httpGet, runMode, type ModeProcess } from './ratelimit-helpers.js';

const root = mkdtempSync(join(tmpdir(), 'cellgate-ratelimit-tls-'));
const certs = join(root, 'certs');
const secret = join(root, 'secret');
const running: ModeProcess[] = [];

function openssl(args: string[]): void {
  const r = spawnSync('openssl', args, { cwd: certs, encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
}
function makeCa(name: string): void {
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`]);
}
function makeLeaf(name: string, ca: string, san: string): void {
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
  writeFileSync(join(certs, `${name}.ext`), `subjectAltName=${san}\n`);
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`]);
}
const pem = (name: string): Buffer => readFileSync(join(certs, name));

let version = 0;
/** The Secret's new version, then `..data` swapped onto it in one rename, as the kubelet does. */
function writeSecret(server: string): void {
  const v = `..2026_12_07_${++version}`;
  mkdirSync(join(secret, v), { recursive: true });
  writeFileSync(join(secret, v, 'tls.crt'), pem(`${server}.crt`));
  writeFileSync(join(secret, v, 'tls.key'), pem(`${server}.key`));
  symlinkSync(v, join(secret, '..data_tmp'));
  renameSync(join(secret, '..data_tmp'), join(secret, '..data'));
}

beforeAll(() => {
  mkdirSync(certs, { recursive: true });
  for (const ca of ['ca1', 'ca2', 'clientca']) makeCa(ca);
  makeLeaf('server1', 'ca1', 'DNS:localhost,IP:127.0.0.1');
  makeLeaf('server2', 'ca2', 'DNS:localhost,IP:127.0.0.1');
  makeLeaf('envoy', 'clientca', 'DNS:envoy.envoy-gateway-system');
  makeLeaf('other', 'clientca', 'DNS:other.example');
  mkdirSync(secret);
  writeSecret('server1');
  symlinkSync('..data/tls.crt', join(secret, 'tls.crt'));
  symlinkSync('..data/tls.key', join(secret, 'tls.key'));
}, 120_000);
afterAll(async () => {
  for (const m of running) await m.destroy();
  rmSync(root, { recursive: true, force: true });
});

function call(port: number, ca: string, client: string | null): Promise<string> {
  const creds = client === null ? grpc.credentials.createSsl(pem(ca)) : grpc.credentials.createSsl(pem(ca), pem(`${client}.key`), pem(`${client}.crt`));
  const c = new RateLimitServiceClient(`localhost:${port}`, creds);
  return new Promise((resolve, reject) => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    (c as any).ShouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value: '10.0.0.1' }] }] }, { deadline: Date.now() + 20_000 }, (e: grpc.ServiceError | null, r: { overall_code: string }) => {
      c.close();
      if (e) reject(e);
      else resolve(r.overall_code);
    });
  });
}

describe('the ratelimit mode over TLS', () => {
  it('GRPC_SERVER_TLS_* from a Secret, GRPC_CLIENT_TLS_CACERT and _SAN: client certificates required and named; the ..data swap rotates the certificate without a restart', async () => {
    const data = mkdtempSync(join(root, 'data-'));
    mkdirSync(join(data, 'ratelimit', 'config'), { recursive: true });
    writeFileSync(join(data, 'ratelimit', 'config', 'edge.yaml'), 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 100 }\n');
    const port = await freePort();
    const grpcPort = await freePort();
    const m = runMode({
      RUNTIME_ROOT: data, RUNTIME_SUBDIRECTORY: 'ratelimit', USE_STATSD: 'false', PORT: String(port), GRPC_PORT: String(grpcPort),
      GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: join(secret, 'tls.crt'), GRPC_SERVER_TLS_KEY: join(secret, 'tls.key'),
      GRPC_CLIENT_TLS_CACERT: join(certs, 'clientca.crt'), GRPC_CLIENT_TLS_SAN: 'envoy.envoy-gateway-system',
    });
    running.push(m);
    await eventually(async () => (await httpGet(port, '/healthcheck'))?.status === 200, '/healthcheck 200', m);

    expect(await call(grpcPort, 'ca1.crt', 'envoy')).toBe('OK');
    await expect(call(grpcPort, 'ca1.crt', null)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    await expect(call(grpcPort, 'ca1.crt', 'other')).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });

    writeSecret('server2');
    await eventually(async () => {
      try {
        return (await call(grpcPort, 'ca2.crt', 'envoy')) === 'OK';
      } catch {
        return false;
      }
    }, 'a client verifying with the new CA to be served', m, 30_000);
    await expect(call(grpcPort, 'ca1.crt', 'envoy')).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(m.proc.exitCode).toBeNull();
  }, 120_000);
});

// The settings the variables land on, read back over RESP when the mode is given a RESP port.
describe('the variables on the settings', () => {
  it('CONFIG GET shows rls-tls-cert-file, -key-file, -ca-cert-file and -client-san as the variables gave them', async () => {
    const data = mkdtempSync(join(root, 'data-'));
    mkdirSync(join(data, 'ratelimit', 'config'), { recursive: true });
    const port = await freePort();
    const grpcPort = await freePort();
    const resp = await freePort();
    const m = runMode({
      RUNTIME_ROOT: data, RUNTIME_SUBDIRECTORY: 'ratelimit', USE_STATSD: 'false', PORT: String(port), GRPC_PORT: String(grpcPort), CELLGATE_PORT: String(resp),
      GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: join(secret, 'tls.crt'), GRPC_SERVER_TLS_KEY: join(secret, 'tls.key'),
      GRPC_CLIENT_TLS_CACERT: join(certs, 'clientca.crt'), GRPC_CLIENT_TLS_SAN: 'envoy.envoy-gateway-system',
    });
    running.push(m);
    await eventually(async () => (await httpGet(port, '/healthcheck')) !== null, 'the HTTP port', m);
    const redis = new Redis({ port: resp, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
    await redis.connect();
    const got = (await redis.call('CONFIG', 'GET', 'rls-tls*')) as string[];
    redis.disconnect();
    const map = Object.fromEntries(got.reduce<[string, string][]>((acc, v, i) => (i % 2 === 0 ? [...acc, [v, got[i + 1]]] : acc), []));
    expect(map).toMatchObject({
      'rls-tls': 'yes', 'rls-tls-cert-file': join(secret, 'tls.crt'), 'rls-tls-key-file': join(secret, 'tls.key'),
      'rls-tls-ca-cert-file': join(certs, 'clientca.crt'), 'rls-tls-client-san': 'envoy.envoy-gateway-system',
    });
  }, 120_000);
});
