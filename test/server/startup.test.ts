/**
 * Starting and stopping: configuration sources and their precedence, the startup line, and the
 * one-line errors for a bad flag, an unreadable file and a port in use.
 */
import { describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';
import { Redis } from 'ioredis';
import { startServer } from '../helpers/server.js';
import { runToExit } from '../helpers/replies.js';


describe('startup', () => {
  it('prints one startup line with version, port and pid', async () => {
    const s = await startServer();
    try {
      const ready = s.logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => String(l.msg).includes('ready'))!;
      expect(ready).toMatchObject({ level: 'notice', version: '0.2.0', port: s.port, pid: s.proc.pid });
    } finally {
      await s.stop();
    }
  });

  it('refuses an unknown flag with one clear line and exit code 1', () => {
    const r = runToExit(['--nope', '1']);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe("cellgate: unknown option '--nope'\n");
  });

  it('refuses a bad value naming the flag', () => {
    const r = runToExit(['--port', 'eighty']);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe("cellgate: --port: argument couldn't be parsed into an integer\n");
  });

  it('refuses an unreadable config file naming it', () => {
    const r = runToExit(['/nonexistent/cellgate.conf']);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe("cellgate: cannot read config file '/nonexistent/cellgate.conf': ENOENT\n");
  });

  it('refuses a port in use with one clear line', async () => {
    const blocker = net.createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as net.AddressInfo).port;
    try {
      const r = runToExit(['--port', String(port), '--bind', '127.0.0.1']);
      expect(r.status).toBe(1);
      expect(r.stderr).toBe(`cellgate: cannot listen on 127.0.0.1:${port}: address already in use\n`);
    } finally {
      blocker.close();
    }
  });

  it('reads a config file, then CELLGATE_* variables, then flags, in rising precedence', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-conf-'));
    const file = join(dir, 'cellgate.conf');
    writeFileSync(file, [
      '# a redis.conf-style file',
      'maxclients 100',
      'timeout 7',
      'hz 20',
      'requirepass "from file"',
      'save ""',
    ].join('\n'));
    const s = await startServer({ configFile: file, args: ['--timeout', '8', '--hz', '30'], env: { CELLGATE_HZ: '40', CELLGATE_REQUIREPASS: 'from env' } });
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2, password: 'from env' });
    try {
      const pairs = (await c.call('CONFIG', 'GET', 'maxclients', 'timeout', 'hz', 'save')) as string[];
      const values = Object.fromEntries(pairs.flatMap((v, i) => (i % 2 === 0 ? [[v, pairs[i + 1]]] : [])));
      expect(values).toEqual({ maxclients: '100', timeout: '8', hz: '30', save: '' });
      const info = (await c.info('server')) as string;
      expect(info).toContain(`config_file:${file}`);
    } finally {
      c.disconnect();
      await s.stop();
    }
  });

  it('exits 0 on SIGTERM and on SIGINT', async () => {
    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      const s = await startServer();
      expect(await s.stop(signal)).toBe(0);
      expect(s.logs.join('\n')).toContain(`received ${signal}`);
    }
  });

  it('--version prints the version', () => {
    const r = runToExit(['--version']);
    expect(r.status).toBe(0);
    expect(r.stdout).toBe('cellgate 0.2.0\n');
  });
});
