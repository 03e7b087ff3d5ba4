/**
 * The xDS client over TLS with a client certificate (rls-xds-tls-*), the files laid out as
 * Kubernetes mounts a Secret (`tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>`), the
 * certificates made by the test with openssl; the rotation is the kubelet's `..data` swap.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { counter, until } from './helpers.js';
import { oneLimit, refusedStart, startXdsCellgate, type XdsCellgate } from './xds-helpers.js';
import { resource, XdsTestServer } from './xds-server.js';

const dir = mkdtempSync(join(tmpdir(), 'cellgate-xds-tls-'));
const secret = join(dir, 'secret');
const k = (value: string): { key: string; value: string }[] => [{ key: 'k', value }];

function openssl(args: string[]): void {
  const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
}
function makeCa(name: string): void {
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`]);
}
function makeCert(name: string, ca: string, san: string): void {
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
  writeFileSync(join(dir, `${name}.ext`), `subjectAltName=${san}\n`);
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`]);
}

/** The kubelet's update: a new timestamped directory, then `..data` renamed onto it in one step. */
let version = 0;
type Content = string | Buffer | { symlink: string } | 'fifo';
function mountSecret(files: { 'tls.crt': Content; 'tls.key': Content; 'ca.crt': Content }): void {
  const stamp = `..2026_12_07_${++version}`;
  mkdirSync(join(secret, stamp), { recursive: true });
  for (const [name, content] of Object.entries(files)) {
    const path = join(secret, stamp, name);
    if (content === 'fifo') spawnSync('mkfifo', [path]);
    else if (typeof content === 'object' && 'symlink' in content) symlinkSync(content.symlink, path);
    else writeFileSync(path, content);
  }
  symlinkSync(stamp, join(secret, '..data_tmp'));
  renameSync(join(secret, '..data_tmp'), join(secret, '..data'));
  if (version === 1) for (const name of Object.keys(files)) symlinkSync(join('..data', name), join(secret, name));
}
const pem = (name: string): Buffer => readFileSync(join(dir, name));

const tlsArgs = (serverName: string): string[] => [
  '--rls-xds-tls', 'yes', '--rls-xds-tls-cert-file', join(secret, 'tls.crt'), '--rls-xds-tls-key-file', join(secret, 'tls.key'),
  '--rls-xds-tls-ca-cert-file', join(secret, 'ca.crt'), '--rls-xds-tls-server-name', serverName,
];

beforeAll(() => {
  makeCa('server-ca');
  makeCa('clients-a');
  makeCa('clients-b');
  makeCert('xds', 'server-ca', 'DNS:xds.test');
  makeCert('client-a', 'clients-a', 'DNS:cellgate.test');
  makeCert('client-b', 'clients-b', 'DNS:cellgate.test');
  mountSecret({ 'tls.crt': pem('client-a.crt'), 'tls.key': pem('client-a.key'), 'ca.crt': pem('server-ca.crt') });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('xDS over TLS with client certificates', () => {
  let xds = new XdsTestServer({ cert: join(dir, 'xds.crt'), key: join(dir, 'xds.key'), ca: join(dir, 'clients-a.crt') });
  let cg: XdsCellgate;
  beforeAll(async () => {
    await xds.start();
    cg = await startXdsCellgate(xds.port, tlsArgs('xds.test'));
  });
  afterAll(async () => {
    await cg?.stop();
    xds.stop();
  });

  it('the client certificate is accepted, the server is checked against the CA and the server name; the push applies', async () => {
    xds.push('v1', [resource(oneLimit('app', 'app', 1))]);
    await until(async () => (await cg.info()).rls_xds_acked_version === 'v1', 'v1 over TLS', 30_000);
    expect((await cg.info()).rls_xds_tls).toBe('1');
    expect((await cg.should('app', k('a'))).overall_code).toBe('OK');
    expect((await cg.should('app', k('a'))).overall_code).toBe('OVER_LIMIT');
  });

  it("rotation by the Secret's ..data swap: the new pair is read and the client reconnects with it", async () => {
    // The server now trusts only clients-b: the certificate in force (client-a) is refused.
    const port = xds.port;
    xds.stop();
    xds = new XdsTestServer({ cert: join(dir, 'xds.crt'), key: join(dir, 'xds.key'), ca: join(dir, 'clients-b.crt') });
    await xds.start(port);
    xds.push('v2', [resource(oneLimit('app2', 'app2', 1))]);
    const failures = Number((await cg.info()).rls_xds_stream_failures);
    await until(async () => Number((await cg.info()).rls_xds_stream_failures) >= failures + 2, 'client-a refused by the new server', 30_000);
    expect((await cg.info()).rls_xds_acked_version).toBe('v1');
    mountSecret({ 'tls.crt': pem('client-b.crt'), 'tls.key': pem('client-b.key'), 'ca.crt': pem('server-ca.crt') });
    await until(async () => (await cg.info()).rls_xds_acked_version === 'v2', 'v2 with client-b', 30_000);
    const info = await cg.info();
    expect(info.rls_xds_tls_reloads).toBe('1');
    expect(info.rls_xds_tls_reload_errors).toBe('0');
    expect(cg.logged('the client certificate, key or CA changed').length).toBe(1);
    expect((await cg.should('app2', k('a'))).overall_code).toBe('OK');
    expect(counter(await cg.metrics(), 'cellgate_rls_xds_tls_reloads_total{result="ok"}')).toBe(1);
  });

  it('a Secret swapped to garbage, a key of another certificate, /dev/zero or a FIFO: refused and logged, the pair in force stays', async () => {
    await until(async () => (await cg.info()).rls_xds_connected === '1', 'connected', 30_000);
    const streams = (await cg.info()).rls_xds_streams;
    mountSecret({ 'tls.crt': 'not a certificate\n', 'tls.key': pem('client-b.key'), 'ca.crt': pem('server-ca.crt') });
    await until(async () => (await cg.info()).rls_xds_tls_reload_errors === '1', 'the garbage refused', 30_000);
    expect((await cg.info()).rls_xds_tls_last_error).toContain('rls-xds-tls-cert-file: no PEM certificate in it');
    mountSecret({ 'tls.crt': pem('client-b.crt'), 'tls.key': pem('client-a.key'), 'ca.crt': pem('server-ca.crt') });
    await until(async () => (await cg.info()).rls_xds_tls_reload_errors === '2', 'the mismatched pair refused', 30_000);
    expect((await cg.info()).rls_xds_tls_last_error).toContain('do not make a pair');
    // Files that would block or never end: a device, a FIFO (never opened for a writer's sake).
    mountSecret({ 'tls.crt': { symlink: '/dev/zero' }, 'tls.key': pem('client-b.key'), 'ca.crt': pem('server-ca.crt') });
    await until(async () => (await cg.info()).rls_xds_tls_reload_errors === '3', '/dev/zero refused', 30_000);
    expect((await cg.info()).rls_xds_tls_last_error).toContain('it is a character device, only regular files are read');
    mountSecret({ 'tls.crt': pem('client-b.crt'), 'tls.key': 'fifo', 'ca.crt': pem('server-ca.crt') });
    await until(async () => (await cg.info()).rls_xds_tls_reload_errors === '4', 'the FIFO refused', 30_000);
    expect((await cg.info()).rls_xds_tls_last_error).toContain('it is a FIFO');
    const info = await cg.info();
    // The stream with the pair in force was never dropped.
    expect(info.rls_xds_streams).toBe(streams);
    expect(info.rls_xds_connected).toBe('1');
    expect(cg.logged('the changed files were not taken').length).toBe(4);
    // The next push still arrives over it.
    xds.push('v3', [resource(oneLimit('app3', 'app3', 1))]);
    await until(async () => (await cg.info()).rls_xds_acked_version === 'v3', 'v3', 30_000);
    // The pair comes back: taken again.
    mountSecret({ 'tls.crt': pem('client-b.crt'), 'tls.key': pem('client-b.key'), 'ca.crt': pem('server-ca.crt') });
    await new Promise((r) => setTimeout(r, 1000));
    expect((await cg.info()).rls_xds_tls_reloads).toBe('1'); // the same bytes as in force: nothing to do
  });
});

describe('xDS TLS refusals', () => {
  it('a server whose certificate does not carry rls-xds-tls-server-name is not trusted', async () => {
    const xds = new XdsTestServer({ cert: join(dir, 'xds.crt'), key: join(dir, 'xds.key') });
    await xds.start();
    xds.push('v1', [resource(oneLimit('app', 'app', 1))]);
    const cg = await startXdsCellgate(xds.port, tlsArgs('other.test'));
    try {
      await until(async () => Number((await cg.info()).rls_xds_stream_failures) >= 2, 'failed handshakes', 30_000);
      const info = await cg.info();
      expect(info.rls_xds_acks).toBe('0');
      expect(info.rls_xds_last_error).toMatch(/UNAVAILABLE/);
      expect((await cg.readyz()).status).toBe(503);
    } finally {
      await cg.stop();
      xds.stop();
    }
  });

  it('a certificate file that cannot be read refuses the start, naming the setting', async () => {
    const base = ['--rls-xds-server', '127.0.0.1:1', '--rls-xds-tls', 'yes'];
    const cases: [string[], RegExp][] = [
      [['--rls-xds-tls-cert-file', join(dir, 'missing.crt'), '--rls-xds-tls-key-file', join(dir, 'client-a.key')], /cannot read rls-xds-tls-cert-file '.*missing\.crt': ENOENT/],
      [['--rls-xds-tls-cert-file', join(dir, 'client-a.crt')], /rls-xds-tls-cert-file is set without rls-xds-tls-key-file/],
      [['--rls-xds-tls-cert-file', join(dir, 'client-a.crt'), '--rls-xds-tls-key-file', join(dir, 'client-b.key')], /do not make a pair/],
    ];
    for (const [args, reason] of cases) {
      const r = await refusedStart([...base, ...args]);
      expect(r.status).toBe(1);
      expect(r.output).toMatch(reason);
    }
  }, 180_000);
});
