/**
 * CONFIG SET of what Redis changes at run time: port and bind (the listeners are replaced; a port in
 * use fails with Redis's text and changes nothing; connected clients stay), the TLS certificate and
 * key (new handshakes get the new certificate), and dir, refused with the reason.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, startServer } from '../helpers/server.js';
import { errorOf, runToExit } from '../helpers/replies.js';
import { RawConnection } from '../helpers/raw.js';

function canConnect(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ port, host });
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => resolve(false));
  });
}

describe('CONFIG SET port / bind', () => {
  it('moves the listener to a new port; the old one closes, connected clients stay', async () => {
    const s = await startServer();
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    try {
      const port = await freePort();
      expect(await c.call('CONFIG', 'SET', 'port', String(port))).toBe('OK');
      expect(await c.call('CONFIG', 'GET', 'port')).toEqual(['port', String(port)]);
      expect(await c.ping()).toBe('PONG');
      expect(await canConnect(s.port)).toBe(false);
      const c2 = new Redis({ port, host: '127.0.0.1', protocol: 2 });
      expect(await c2.ping()).toBe('PONG');
      c2.disconnect();
    } finally {
      c.disconnect();
      await s.stop();
    }
  });

  it('a port in use fails with Redis\'s error and the old port keeps listening; pipelined replies stay in order', async () => {
    const blocker = net.createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const busy = (blocker.address() as net.AddressInfo).port;
    const s = await startServer();
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    try {
      expect(await errorOf(c.call('CONFIG', 'SET', 'port', String(busy)))).toBe("ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs.");
      expect(await c.call('CONFIG', 'GET', 'port')).toEqual(['port', String(s.port)]);
      expect(await canConnect(s.port)).toBe(true);
      // CONFIG SET, then PING and GET in the same write: the replies come in order.
      const raw = await RawConnection.open(s.port);
      await raw.write(`CONFIG SET port ${busy}\r\nPING\r\nCONFIG GET port\r\n`);
      const expected = `-ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs.\r\n+PONG\r\n*2\r\n$4\r\nport\r\n$${String(s.port).length}\r\n${s.port}\r\n`;
      await raw.waitForBytes(expected.length);
      expect(raw.text()).toBe(expected);
      raw.destroy();
    } finally {
      c.disconnect();
      blocker.close();
      await s.stop();
    }
  });

  it('bind: new addresses, or Redis\'s error for one that cannot be bound', async () => {
    const s = await startServer();
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    try {
      expect(await c.call('CONFIG', 'SET', 'bind', '127.0.0.2')).toBe('OK');
      expect(await canConnect(s.port, '127.0.0.2')).toBe(true);
      expect(await canConnect(s.port, '127.0.0.1')).toBe(false);
      // 192.0.2.1 (TEST-NET-1) is not an address of this machine: bind fails (nothing is sent).
      expect(await errorOf(c.call('CONFIG', 'SET', 'bind', '192.0.2.1'))).toBe("ERR CONFIG SET failed (possibly related to argument 'bind') - Failed to bind to specified addresses.");
      expect(await c.call('CONFIG', 'GET', 'bind')).toEqual(['bind', '127.0.0.2']);
      expect(await canConnect(s.port, '127.0.0.2')).toBe(true);
    } finally {
      c.disconnect();
      await s.stop();
    }
  });

  it('bind: a lone "-" is no address (the prefix of an optional one), refused by CONFIG SET and at start', async () => {
    const s = await startServer();
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    const why = "'-' alone is not an address: a leading '-' marks an optional address, e.g. '-::1'";
    try {
      for (const value of ['-', '127.0.0.1 -']) {
        expect(await errorOf(c.call('CONFIG', 'SET', 'bind', value))).toBe(`ERR CONFIG SET failed (possibly related to argument 'bind') - ${why}`);
      }
      expect(await c.call('CONFIG', 'GET', 'bind')).toEqual(['bind', '127.0.0.1']);
      // It was taken as the empty host, which listens on every interface: 127.0.0.2 answered.
      expect(await canConnect(s.port, '127.0.0.2')).toBe(false);
      // An optional address keeps working.
      expect(await c.call('CONFIG', 'SET', 'bind', '127.0.0.1 -::1')).toBe('OK');
      expect(await canConnect(s.port, '127.0.0.1')).toBe(true);
      expect(await canConnect(s.port, '127.0.0.2')).toBe(false);
    } finally {
      c.disconnect();
      await s.stop();
    }
    for (const args of [['--bind', '-'], ['--bind', '127.0.0.1', '-']]) {
      const r = runToExit(['--port', '0', '--dir', mkdtempSync(join(tmpdir(), 'cellgate-bind-')), ...args]);
      expect(r.status).toBe(1);
      expect(r.stderr).toBe(`cellgate: --bind: ${why}\n`);
    }
  });

  it('dir is refused with the reason', async () => {
    const s = await startServer();
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    try {
      expect(await errorOf(c.call('CONFIG', 'SET', 'dir', tmpdir()))).toMatch(/^ERR CONFIG SET failed \(possibly related to argument 'dir'\) - can't set immutable config: the snapshot directory holds the server's lock file/);
    } finally {
      c.disconnect();
      await s.stop();
    }
  });
});

const hasOpenssl = spawnSync('sh', ['-c', 'command -v openssl'], { encoding: 'utf8' }).status === 0;

describe.skipIf(!hasOpenssl)('CONFIG SET tls-cert-file / tls-key-file', () => {
  it('new handshakes get the new certificate; the TLS port follows bind', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-tls-reload-'));
    const openssl = (args: string[]): void => {
      const r = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8', timeout: 30_000 });
      if (r.status !== 0) throw new Error(r.stderr);
    };
    for (const name of ['first', 'second']) {
      openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`]);
    }
    const tlsPort = await freePort();
    const s = await startServer({ args: ['--tls-port', String(tlsPort), '--tls-cert-file', join(dir, 'first.crt'), '--tls-key-file', join(dir, 'first.key'), '--tls-auth-clients', 'no'] });
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    const peerCn = (host = '127.0.0.1'): Promise<string> => new Promise((resolve, reject) => {
      const sock = tls.connect({ host, port: tlsPort, rejectUnauthorized: false }, () => {
        resolve(String(sock.getPeerCertificate().subject.CN));
        sock.destroy();
      });
      sock.on('error', reject);
    });
    try {
      expect(await peerCn()).toBe('first');
      // A key that does not match the certificate is refused, and nothing changes.
      expect(await errorOf(c.call('CONFIG', 'SET', 'tls-cert-file', join(dir, 'second.crt')))).toMatch(/^ERR CONFIG SET failed \(possibly related to argument 'tls-cert-file'\) - Unable to update TLS configuration/);
      expect(await peerCn()).toBe('first');
      expect(await c.call('CONFIG', 'SET', 'tls-cert-file', join(dir, 'second.crt'), 'tls-key-file', join(dir, 'second.key'))).toBe('OK');
      expect(await peerCn()).toBe('second');
      // The TLS port follows bind, as in Redis, with the certificate now in use.
      expect(await c.call('CONFIG', 'SET', 'bind', '127.0.0.2')).toBe('OK');
      expect(await peerCn('127.0.0.2')).toBe('second');
      expect(await canConnect(tlsPort, '127.0.0.1')).toBe(false);
    } finally {
      c.disconnect();
      await s.stop();
    }
  });
});
