/**
 * Logging: client connections and disconnections at verbose (Redis's "Accepted <addr>" and "Client
 * closed connection"), nothing of them at notice, JSON for fatal start errors once log-format json is
 * chosen, and human lines that do not repeat in key=value form what their message already says.
 */
import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, MAIN, startServer } from '../helpers/server.js';
import { runToExit } from '../helpers/replies.js';
import { waitFor } from '../helpers/wait.js';

type Line = { level: string; msg: string; [k: string]: unknown };

const until = (check: () => boolean, what: string): Promise<void> => waitFor(check, what);

describe('logging', () => {
  it('logs client connections and disconnections at verbose', async () => {
    const s = await startServer({ args: ['--loglevel', 'verbose'] });
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2, lazyConnect: true });
    try {
      await c.connect();
      await c.ping();
      const local = `127.0.0.1:${(c as unknown as { stream: net.Socket }).stream.localPort}`;
      const parsed = (): Line[] => s.logs.map((l) => JSON.parse(l) as Line);
      await until(() => parsed().some((l) => l.msg === `Accepted ${local}`), 'the Accepted line');
      c.disconnect();
      await until(() => parsed().some((l) => typeof l.msg === 'string' && l.msg.startsWith('Client closed connection') && l.addr === local), 'the closed line');
      expect(parsed().find((l) => l.msg === `Accepted ${local}`)!.level).toBe('verbose');
    } finally {
      c.disconnect();
      await s.stop();
    }
  });

  it('logs no connection lines at notice', async () => {
    const s = await startServer();
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2, lazyConnect: true });
    try {
      await c.connect();
      await c.ping();
      c.disconnect();
      // A command on a second connection, after the first one's close was handled.
      const c2 = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
      await c2.ping();
      c2.disconnect();
      expect(s.logs.join('\n')).not.toContain('Accepted');
    } finally {
      await s.stop();
    }
  });

  it('logs command errors at debug, with the client, and not at notice', async () => {
    const s = await startServer();
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2, lazyConnect: true });
    try {
      await c.connect();
      await c.call('NOSUCHCMD', 'a').catch(() => {});
      await c.call('CONFIG', 'SET', 'loglevel', 'debug');
      await c.call('CL.THROTTLE', 'k', 'x', '1', '1').catch(() => {});
      await c.ping();
      const errors = s.logs.map((l) => JSON.parse(l) as Line).filter((l) => l.msg.startsWith('error reply'));
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatchObject({ level: 'debug', error: expect.stringMatching(/^ERR /) as unknown });
      expect(errors[0].msg).toContain(`addr=127.0.0.1:${(c as unknown as { stream: net.Socket }).stream.localPort}`);
    } finally {
      c.disconnect();
      await s.stop();
    }
  });

  it('writes a fatal start error as a JSON object on stderr with log-format json', () => {
    const r = runToExit(['--log-format', 'json', '--port', 'eighty']);
    expect(r.status).toBe(1);
    const line = JSON.parse(r.stderr.trim()) as Line;
    expect(line).toMatchObject({ level: 'fatal', msg: "--port: argument couldn't be parsed into an integer" });
    const viaEnv = runToExit(['--nope', '1'], { CELLGATE_LOG_FORMAT: 'json' });
    expect(JSON.parse(viaEnv.stderr.trim())).toMatchObject({ level: 'fatal', msg: "unknown option '--nope'" });
  });

  it('human lines do not repeat fields their message already shows', async () => {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-log-'));
    const proc = spawn(process.execPath, [MAIN, '--port', String(port), '--bind', '127.0.0.1', '--dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    const exited = new Promise<number | null>((resolve) => proc.on('exit', resolve));
    try {
      await until(() => out.includes('ready to accept connections'), 'the ready line');
      const ready = out.split('\n').find((l) => l.includes('ready to accept connections'))!;
      expect(ready).toContain(`on port ${port}`);
      expect(ready).not.toContain(`port=${port}`);
      expect(ready).not.toContain('version=');
      expect(ready).toContain('bind=127.0.0.1');
    } finally {
      proc.kill('SIGTERM');
      expect(await exited).toBe(0);
    }
  });
});
