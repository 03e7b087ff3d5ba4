/**
 * The gRPC port's certificates rotate without a restart (envoyproxy/ratelimit's
 * TestReloadGRPCServerCerts, with Kubernetes' way of updating a mounted Secret): the files re-read
 * when the Secret's `..data` link is swapped, a broken new set kept out (logged, counted) while the
 * old one serves, CONFIG SET of the rls-tls-* files (and of the tls-* files they default to)
 * applied at once or refused with the reason; client certificates required when a CA is set, and
 * rls-tls-client-san checked. Certificates made by the test with openssl; clients are node:tls
 * (as the Go test's tls.Dial) and grpc-js.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { RateLimitServiceClient, startRls, until, type Rls } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'cellgate-rls-rotation-'));
const LIMITS = { 'app.yaml': 'domain: app\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1000 }\n' };

function openssl(args: string[]): void {
  const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
}
function makeCa(name: string): void {
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`]);
}
function makeLeaf(name: string, ca: string, san: string): void {
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
  writeFileSync(join(dir, `${name}.ext`), `subjectAltName=${san}\n`);
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`]);
}
const pem = (name: string): Buffer => readFileSync(join(dir, name));

/** A mounted Secret: tls.crt -> ..data/tls.crt, ..data -> ..<version>; `swap` replaces ..data atomically. */
const secret = join(dir, 'secret');
let version = 0;
function writeSecret(cert: Buffer, key: Buffer): void {
  const v = `..2026_12_07_${++version}`;
  mkdirSync(join(secret, v), { recursive: true });
  writeFileSync(join(secret, v, 'tls.crt'), cert);
  writeFileSync(join(secret, v, 'tls.key'), key);
  symlinkSync(v, join(secret, '..data_tmp'));
  renameSync(join(secret, '..data_tmp'), join(secret, '..data'));
}

/** Whether a TLS handshake with the gRPC port succeeds verifying its certificate against `ca` (the Go test's tls.Dial). */
function verifies(port: number, ca: Buffer, client?: { cert: Buffer; key: Buffer }): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tls.connect({ port, host: '127.0.0.1', servername: 'localhost', ca, ALPNProtocols: ['h2'], ...client });
    socket.setTimeout(10_000, () => socket.destroy());
    socket.once('secureConnect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
    socket.once('close', () => resolve(false));
  });
}

function call(port: number, creds: grpc.ChannelCredentials): Promise<string> {
  const client = new RateLimitServiceClient(`localhost:${port}`, creds);
  return new Promise((resolve, reject) => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    (client as any).ShouldRateLimit({ domain: 'app', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] }, { deadline: Date.now() + 10_000 }, (e: grpc.ServiceError | null, r: { overall_code: string }) => {
      client.close();
      if (e) reject(e);
      else resolve(r.overall_code);
    });
  });
}

async function infoField(rls: Rls, name: string): Promise<string> {
  return new RegExp(`^${name}:(.*)$`, 'm').exec(String(await rls.redis.info('rls')))?.[1].trim() ?? '';
}

beforeAll(() => {
  for (const ca of ['ca1', 'ca2', 'ca3', 'clientca', 'otherca']) makeCa(ca);
  makeLeaf('server1', 'ca1', 'DNS:localhost,IP:127.0.0.1');
  makeLeaf('server2', 'ca2', 'DNS:localhost,IP:127.0.0.1');
  makeLeaf('server3', 'ca3', 'DNS:localhost,IP:127.0.0.1');
  makeLeaf('client', 'clientca', 'DNS:localhost');
  makeLeaf('stranger', 'clientca', 'DNS:other.example');
  makeLeaf('foreign', 'otherca', 'DNS:localhost');
  mkdirSync(secret);
  writeSecret(pem('server1.crt'), pem('server1.key'));
  symlinkSync('..data/tls.crt', join(secret, 'tls.crt'));
  symlinkSync('..data/tls.key', join(secret, 'tls.key'));
}, 120_000);

const servers: Rls[] = [];
afterAll(async () => {
  for (const s of servers) await s.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('the gRPC certificate rotates without a restart', () => {
  it("a mounted Secret's ..data swap: clients verifying with the new CA succeed, the old CA no longer; a broken set is kept out; CONFIG SET takes a new pair at once or refuses it", async () => {
    const rls = await startRls(LIMITS, ['--rls-tls', 'yes', '--rls-tls-cert-file', join(secret, 'tls.crt'), '--rls-tls-key-file', join(secret, 'tls.key')]);
    servers.push(rls);
    const port = rls.rlsPort;
    expect(await verifies(port, pem('ca1.crt'))).toBe(true);
    expect(await verifies(port, pem('ca2.crt'))).toBe(false);

    writeSecret(pem('server2.crt'), pem('server2.key'));
    await until(() => verifies(port, pem('ca2.crt')), 'the new certificate to be served', 30_000);
    expect(await verifies(port, pem('ca1.crt'))).toBe(false);
    expect(await call(port, grpc.credentials.createSsl(pem('ca2.crt')))).toBe('OK');
    expect(await infoField(rls, 'rls_grpc_tls_reloads')).toBe('1');

    // A broken Secret (a certificate that is not PEM): refused, logged, counted; the one in force stays.
    writeSecret(Buffer.from('garbage\n'), pem('server3.key'));
    await until(async () => (await infoField(rls, 'rls_grpc_tls_reload_errors')) === '1', 'the broken set to be refused', 30_000);
    expect(await infoField(rls, 'rls_grpc_tls_last_error')).toContain('no PEM certificate');
    expect(rls.server.logs.join('\n')).toContain('the changed files were not taken');
    expect(await verifies(port, pem('ca2.crt'))).toBe(true);

    // CONFIG SET: checked before the reply, in force when it comes.
    await rls.redis.call('CONFIG', 'SET', 'rls-tls-cert-file', join(dir, 'server3.crt'), 'rls-tls-key-file', join(dir, 'server3.key'));
    expect(await verifies(port, pem('ca3.crt'))).toBe(true);
    expect(await verifies(port, pem('ca2.crt'))).toBe(false);
    // A key that is not the certificate's, a missing file, a FIFO: refused with the reason, nothing changes.
    await expect(rls.redis.call('CONFIG', 'SET', 'rls-tls-key-file', join(dir, 'server1.key'))).rejects.toThrow(/do not make a pair/);
    await expect(rls.redis.call('CONFIG', 'SET', 'rls-tls-cert-file', join(dir, 'missing.crt'))).rejects.toThrow(/Unable to update the rate limit service's TLS configuration: cannot read rls-tls-cert-file .*ENOENT/);
    spawnSync('mkfifo', [join(dir, 'fifo.crt')]);
    await expect(rls.redis.call('CONFIG', 'SET', 'rls-tls-cert-file', join(dir, 'fifo.crt'))).rejects.toThrow(/only regular files are read/);
    expect(await rls.redis.call('CONFIG', 'GET', 'rls-tls-cert-file')).toEqual(['rls-tls-cert-file', join(dir, 'server3.crt')]);
    expect(await verifies(port, pem('ca3.crt'))).toBe(true);
    expect(rls.server.proc.exitCode).toBeNull();
  }, 120_000);
});

describe('client certificates', () => {
  it('rls-tls-ca-cert-file requires a client certificate it signed; rls-tls-client-san the name in it; CONFIG SET of tls-cert-file reaches the gRPC port', async () => {
    const rls = await startRls(LIMITS, ['--rls-tls', 'yes', '--tls-cert-file', join(dir, 'server1.crt'), '--tls-key-file', join(dir, 'server1.key'),
      '--rls-tls-ca-cert-file', join(dir, 'clientca.crt'), '--rls-tls-client-san', 'localhost']);
    servers.push(rls);
    const port = rls.rlsPort;
    const withCert = (name: string, ca = 'ca1.crt'): grpc.ChannelCredentials => grpc.credentials.createSsl(pem(ca), pem(`${name}.key`), pem(`${name}.crt`));
    expect(await call(port, withCert('client'))).toBe('OK');
    await expect(call(port, grpc.credentials.createSsl(pem('ca1.crt')))).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    await expect(call(port, withCert('foreign'))).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    await expect(call(port, withCert('stranger'))).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(Number(await infoField(rls, 'rls_grpc_tls_client_san_refused'))).toBeGreaterThanOrEqual(1);

    // The RESP server's files are the port's default: CONFIG SET of them reaches it.
    await rls.redis.call('CONFIG', 'SET', 'tls-cert-file', join(dir, 'server2.crt'), 'tls-key-file', join(dir, 'server2.key'));
    expect(await call(port, withCert('client', 'ca2.crt'))).toBe('OK');
    expect(await verifies(port, pem('ca1.crt'), { cert: pem('client.crt'), key: pem('client.key') })).toBe(false);
  }, 120_000);
});
