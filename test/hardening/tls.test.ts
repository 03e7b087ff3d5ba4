/**
 * TLS (docs/security.md): certificates made by the test with openssl (a CA, a server certificate for
 * 127.0.0.1/localhost, a client certificate, and a client certificate from a foreign CA), then
 * redis-cli --tls, ioredis with `tls: {...}` and raw node:tls sockets against `tls-port`, with
 * tls-auth-clients no / yes / optional. The TLS port speaks exactly what the TCP port speaks.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { MAIN, startServer, type RunningServer } from '../helpers/server.js';
import { Checker, infoField, RawConnection } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';

const hasOpenssl = spawnSync('sh', ['-c', 'command -v openssl'], { encoding: 'utf8' }).status === 0;
const hasCli = spawnSync('sh', ['-c', 'command -v redis-cli'], { encoding: 'utf8' }).status === 0;

let dir: string;
const f = (name: string): string => join(dir, name);

function openssl(args: string[]): void {
  const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
}

/** A CA, and certificates it signs (with subjectAltName when given). */
function makeCa(name: string): void {
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`]);
}
function makeCert(name: string, ca: string, san: string | null): void {
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
  const ext = san === null ? [] : ['-extfile', `${name}.ext`];
  if (san !== null) spawnSync('sh', ['-c', `printf 'subjectAltName=${san}\\n' > ${name}.ext`], { cwd: dir });
  openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', ...ext]);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

async function startTls(auth: 'yes' | 'no' | 'optional', extra: string[] = []): Promise<{ s: RunningServer; tlsPort: number }> {
  for (let attempt = 0; ; attempt++) {
    const tlsPort = await freePort();
    try {
      const s = await startServer({ args: ['--tls-port', String(tlsPort), '--tls-cert-file', f('server.crt'), '--tls-key-file', f('server.key'),
        '--tls-ca-cert-file', f('ca.crt'), '--tls-auth-clients', auth, ...extra] });
      return { s, tlsPort };
    } catch (e) {
      if (attempt >= 3 || !String(e).includes('address already in use')) throw e;
    }
  }
}

function cli(port: number, args: string[]): string {
  const r = spawnSync('redis-cli', ['--tls', '--cacert', f('ca.crt'), '-h', '127.0.0.1', '-p', String(port), ...args], { encoding: 'utf8', timeout: 10_000 });
  return (r.stdout + r.stderr).trim();
}

/** Raw TLS socket: sends `payload`, returns everything received until the server closes or `ms` pass. */
function rawTls(port: number, payload: string, opts: tls.ConnectionOptions = {}, expected?: string, ms = 1500): Promise<{ text: string; error: string | null }> {
  return new Promise((resolve) => {
    let text = '';
    let error: string | null = null;
    const socket = tls.connect({ host: '127.0.0.1', port, ca: readFileSync(f('ca.crt')), servername: 'localhost', ...opts }, () => socket.write(payload));
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      if (expected !== undefined && text.length >= expected.length) done();
    });
    socket.on('error', (e) => (error = e.message));
    const done = (): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ text, error });
    };
    const timer = setTimeout(done, ms);
    socket.on('close', done);
  });
}

beforeAll(() => {
  if (!hasOpenssl) return;
  dir = mkdtempSync(join(tmpdir(), 'cellgate-tls-'));
  makeCa('ca');
  makeCert('server', 'ca', 'IP:127.0.0.1,DNS:localhost');
  makeCert('client', 'ca', null);
  makeCa('rogue');
  makeCert('intruder', 'rogue', null);
}, 60_000);
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('TLS', () => {
  it('tls-auth-clients no: redis-cli --tls, ioredis tls and raw TLS speak the same protocol as TCP', async (ctx) => {
    if (!hasOpenssl) ctx.skip('openssl is not installed');
    const { s, tlsPort } = await startTls('no');
    const redis = new Redis({ host: '127.0.0.1', port: tlsPort, tls: { ca: readFileSync(f('ca.crt')), servername: 'localhost' }, lazyConnect: true, maxRetriesPerRequest: 0 });
    try {
      if (hasCli) {
        expect(cli(tlsPort, ['PING'])).toBe('PONG');
        expect(cli(tlsPort, ['CL.THROTTLE', 'tls:k', '5', '10', '60']).split('\n')).toEqual(['0', '6', '5', '-1', '6']);
      }
      await redis.connect();
      expect(((await redis.call('CL.THROTTLE', 'tls:k', '5', '10', '60')) as number[]).slice(0, 4)).toEqual([0, 6, hasCli ? 4 : 5, -1]);
      expect(await redis.call('HELLO', '3')).toBeTruthy();
      const info = String(await redis.call('INFO', 'server'));
      expect(info).toContain(`tls_port:${tlsPort}`);
      // Pipelines, inline commands and protocol errors behave as on TCP.
      expect((await rawTls(tlsPort, 'PING\r\nECHO "a b"\r\n*1\r\n$4\r\nPING\r\n', {}, '+PONG\r\n$3\r\na b\r\n+PONG\r\n')).text).toBe('+PONG\r\n$3\r\na b\r\n+PONG\r\n');
      expect((await rawTls(tlsPort, '*1\r\nfoo\r\nPING\r\n')).text).toBe("-ERR Protocol error: expected '$', got 'f'\r\n");
      // Plain TCP on the TLS port is a failed handshake for that socket only; the TCP port still works.
      const plain = await new Promise<string>((resolve) => {
        let got = '';
        const sock = net.connect(tlsPort, '127.0.0.1', () => sock.write('PING\r\n'));
        sock.on('data', (d) => (got += d.toString('latin1')));
        sock.on('error', () => {});
        sock.on('close', () => resolve(got));
        setTimeout(() => sock.destroy(), 2000);
      });
      expect(plain).not.toContain('PONG');
      expect(await redis.ping()).toBe('PONG');
      if (hasCli) {
        const r = spawnSync('redis-cli', ['-p', String(s.port), 'PING'], { encoding: 'utf8' });
        expect(r.stdout.trim()).toBe('PONG');
      }
    } finally {
      redis.disconnect();
      await s.stop();
    }
  });

  it('tls-auth-clients yes (the default): a client certificate from the CA is required', async (ctx) => {
    if (!hasOpenssl) ctx.skip('openssl is not installed');
    const { s, tlsPort } = await startTls('yes', ['--requirepass', 'pw']);
    const redis = new Redis({
      host: '127.0.0.1', port: tlsPort, password: 'pw', lazyConnect: true, maxRetriesPerRequest: 0,
      tls: { ca: readFileSync(f('ca.crt')), cert: readFileSync(f('client.crt')), key: readFileSync(f('client.key')), servername: 'localhost' },
    });
    try {
      const without = await rawTls(tlsPort, 'PING\r\n');
      expect(without.text).toBe('');
      const rogue = await rawTls(tlsPort, 'PING\r\n', { cert: readFileSync(f('intruder.crt')), key: readFileSync(f('intruder.key')) });
      expect(rogue.text).toBe('');
      const good = await rawTls(tlsPort, 'AUTH pw\r\nPING\r\n', { cert: readFileSync(f('client.crt')), key: readFileSync(f('client.key')) }, '+OK\r\n+PONG\r\n');
      expect(good.text).toBe('+OK\r\n+PONG\r\n');
      if (hasCli) {
        expect(cli(tlsPort, ['--no-auth-warning', '-a', 'pw', 'PING'])).not.toBe('PONG');
        expect(cli(tlsPort, ['--cert', f('client.crt'), '--key', f('client.key'), '--no-auth-warning', '-a', 'pw', 'PING'])).toBe('PONG');
      }
      await redis.connect();
      expect(((await redis.call('CL.THROTTLE', 'tls:g', '9', '10', '1')) as number[]).slice(0, 4)).toEqual([0, 10, 9, -1]);
    } finally {
      redis.disconnect();
      await s.stop();
    }
  });

  it('reads on for a TLS client that pipelines without reading, as on TCP, and closes it at its output limit (others are served)', async (ctx) => {
    if (!hasOpenssl) ctx.skip('openssl is not installed');
    const { s, tlsPort } = await startTls('no');
    const checker = await Checker.open(s.port);
    const flooder = tls.connect({ host: '127.0.0.1', port: tlsPort, ca: readFileSync(f('ca.crt')), servername: 'localhost' });
    try {
      await new Promise<void>((resolve) => flooder.once('secureConnect', () => resolve()));
      flooder.pause();
      flooder.on('error', () => {});
      // ~26 KB a reply: 1,000 of them are past the kernel's buffers and past a 4 MB hard limit.
      expect(await checker.call('CONFIG', 'SET', 'client-output-buffer-limit', 'normal 4mb 0 0')).toBe('OK');
      flooder.write('COMMAND DOCS\r\n'.repeat(1000));
      const deadline = Date.now() + 10_000;
      let closed = '0';
      while (closed !== '1' && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
        closed = /client_output_buffer_limit_disconnections:(\d+)/.exec(String(await checker.call('INFO', 'stats')))![1];
      }
      expect(closed).toBe('1');
      expect(await checker.call('PING')).toBe('PONG');
    } finally {
      flooder.destroy();
      checker.close();
      await s.stop();
    }
  });

  it('tls-auth-clients optional: no certificate is fine, a foreign one is refused', async (ctx) => {
    if (!hasOpenssl) ctx.skip('openssl is not installed');
    const { s, tlsPort } = await startTls('optional');
    try {
      expect((await rawTls(tlsPort, 'PING\r\n', {}, '+PONG\r\n')).text).toBe('+PONG\r\n');
      expect((await rawTls(tlsPort, 'PING\r\n', { cert: readFileSync(f('client.crt')), key: readFileSync(f('client.key')) }, '+PONG\r\n')).text).toBe('+PONG\r\n');
      expect((await rawTls(tlsPort, 'PING\r\n', { cert: readFileSync(f('intruder.crt')), key: readFileSync(f('intruder.key')) })).text).toBe('');
    } finally {
      await s.stop();
    }
  });

  it('TCP connections to the TLS port that never send a byte are closed after tls-handshake-timeout and counted', async (ctx) => {
    if (!hasOpenssl) ctx.skip('openssl is not installed');
    const { s, tlsPort } = await startTls('no', ['--tls-handshake-timeout', '200']);
    const silent: RawConnection[] = [];
    try {
      // allowHalfOpen: this side never closes; only the server can end these connections.
      for (let i = 0; i < 10; i++) silent.push(await RawConnection.open(tlsPort, { allowHalfOpen: true }));
      for (const c of silent) await c.waitForEnd(15_000);
      expect(silent.every((c) => c.length === 0)).toBe(true);
      const checker = await Checker.open(s.port);
      const info = await checker.call('INFO', 'everything');
      expect(Number(infoField(info, 'tls_handshake_timeouts'))).toBe(10);
      expect(infoField(info, 'tls_handshakes_in_progress')).toBe('0');
      checker.close();
    } finally {
      for (const c of silent) c.destroy();
      await s.stop();
    }
  }, 30_000);

  it('TLS connections in handshake count toward maxclients', async (ctx) => {
    if (!hasOpenssl) ctx.skip('openssl is not installed');
    const { s, tlsPort } = await startTls('no', ['--maxclients', '4', '--tls-handshake-timeout', '600000']);
    const silent: RawConnection[] = [];
    try {
      const checker = await Checker.open(s.port); // one client
      for (let i = 0; i < 3; i++) silent.push(await RawConnection.open(tlsPort, { allowHalfOpen: true }));
      const inProgress = async (): Promise<number> => Number(infoField(await checker.call('INFO', 'clients'), 'tls_handshakes_in_progress'));
      await waitFor(async () => (await inProgress()) >= 3, '3 TLS handshakes in progress');
      expect(await inProgress()).toBe(3);
      // 1 client + 3 handshakes = maxclients: the next TCP client and the next TLS connection are refused.
      const tcp = await RawConnection.open(s.port);
      await tcp.waitForEnd(10_000);
      expect(tcp.text()).toBe('-ERR max number of clients reached\r\n');
      const extra = await RawConnection.open(tlsPort, { allowHalfOpen: true });
      await extra.waitForEnd(10_000);
      expect(await inProgress()).toBe(3);
      // Once the handshakes end, their slots are free again.
      for (const c of silent) c.destroy();
      await waitFor(async () => (await inProgress()) === 0, 'no TLS handshake in progress');
      expect(await inProgress()).toBe(0);
      expect((await rawTls(tlsPort, 'PING\r\n', {}, '+PONG\r\n')).text).toBe('+PONG\r\n');
      tcp.destroy();
      checker.close();
    } finally {
      for (const c of silent) c.destroy();
      await s.stop();
    }
  }, 30_000);

  it('refuses to start with tls-port but no certificate, or without a CA when client certificates are required', (ctx) => {
    if (!hasOpenssl) ctx.skip('openssl is not installed');
    const run = (args: string[]) => spawnSync(process.execPath, [MAIN, '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--tls-port', '1', ...args], { encoding: 'utf8', timeout: 10_000 });
    const noCert = run([]);
    expect(noCert.status).toBe(1);
    expect(noCert.stderr).toMatch(/tls-port is set but tls-cert-file is not/);
    const noCa = run(['--tls-cert-file', f('server.crt'), '--tls-key-file', f('server.key')]);
    expect(noCa.status).toBe(1);
    expect(noCa.stderr).toMatch(/tls-auth-clients yes needs tls-ca-cert-file/);
    const missing = run(['--tls-cert-file', f('nope.crt'), '--tls-key-file', f('server.key')]);
    expect(missing.stderr).toMatch(/cannot read tls-cert-file '.*nope\.crt': ENOENT/);
  });
});
