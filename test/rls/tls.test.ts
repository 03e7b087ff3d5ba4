/**
 * rls-tls: the rate limit service over TLS with the server's TLS files (tls-cert-file,
 * tls-key-file, tls-ca-cert-file, tls-auth-clients), certificates made by the test with openssl.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { RateLimitServiceClient, startRls, type Rls } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'cellgate-rls-tls-'));
function openssl(args: string[]): void {
  const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
}
function makeCert(name: string, ca: string): void {
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
  spawnSync('sh', ['-c', `printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ${name}.ext`], { cwd: dir });
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`]);
}

let rls: Rls;
beforeAll(async () => {
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', '/CN=ca']);
  makeCert('server', 'ca');
  makeCert('client', 'ca');
  rls = await startRls({ 'app.yaml': 'domain: app\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n' }, [
    '--rls-tls', 'yes', '--tls-cert-file', join(dir, 'server.crt'), '--tls-key-file', join(dir, 'server.key'),
    '--tls-ca-cert-file', join(dir, 'ca.crt'), '--tls-auth-clients', 'yes',
  ]);
});
afterAll(async () => {
  await rls?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function call(creds: grpc.ChannelCredentials): Promise<{ overall_code: string }> {
  const client = new RateLimitServiceClient(`127.0.0.1:${rls.rlsPort}`, creds);
  return new Promise((resolve, reject) => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    (client as any).ShouldRateLimit({ domain: 'app', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] }, { deadline: Date.now() + 5000 }, (e: Error | null, r: { overall_code: string }) => {
      client.close();
      if (e) reject(e);
      else resolve(r);
    });
  });
}

describe('rls-tls', () => {
  it('a client with a certificate of the CA is served over TLS', async () => {
    const creds = grpc.credentials.createSsl(readFileSync(join(dir, 'ca.crt')), readFileSync(join(dir, 'client.key')), readFileSync(join(dir, 'client.crt')));
    expect((await call(creds)).overall_code).toBe('OK');
    expect((await call(creds)).overall_code).toBe('OVER_LIMIT');
  });
  it('tls-auth-clients yes: a client without a certificate is refused; a plaintext client too', async () => {
    await expect(call(grpc.credentials.createSsl(readFileSync(join(dir, 'ca.crt'))))).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    await expect(call(grpc.credentials.createInsecure())).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(rls.server.proc.exitCode).toBeNull();
  });
});
