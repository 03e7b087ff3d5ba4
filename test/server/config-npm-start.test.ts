/**
 * The README's start command, `npm start`, passes SIGTERM on to the server: the pid it started gets
 * the signal, the server saves its final snapshot and exits 0 (the script execs node, so no shell
 * sits between npm and the server to swallow the signal).
 */
import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('npm start', () => {
  it('SIGTERM to the pid npm start runs as reaches the server: final save, exit 0', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-npm-'));
    const npm = spawn('npm', ['start', '--', '--port', '0', '--bind', '127.0.0.1', '--dir', dir, '--log-format', 'json'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => npm.on('exit', resolve));
    let out = '';
    npm.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    npm.stderr!.on('data', (b: Buffer) => (out += b.toString()));
    const ready = await new Promise<{ port: number; pid: number }>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ready line: ${out}`)), 20_000);
      const look = (): void => {
        for (const l of out.split('\n')) {
          if (!l.includes('ready to accept connections')) continue;
          clearTimeout(timer);
          resolve(JSON.parse(l) as { port: number; pid: number });
          return;
        }
        setTimeout(look, 50);
      };
      look();
    });
    const c = new Redis({ port: ready.port, host: '127.0.0.1', protocol: 2 });
    try {
      await c.call('CL.THROTTLE', 'npm-key', '0', '1', '3600', '1');
    } finally {
      c.disconnect();
    }
    npm.kill('SIGTERM');
    const code = await exited;
    for (let i = 0; i < 100 && alive(ready.pid); i++) await new Promise((r) => setTimeout(r, 50));
    const left = alive(ready.pid);
    if (left) process.kill(ready.pid, 'SIGKILL'); // the server npm left behind (the bug this tests)
    expect(left).toBe(false);
    expect(code).toBe(0);
    expect(out).toContain('DB saved on disk: 1 keys');
    expect(existsSync(join(dir, 'cellgate.snap'))).toBe(true);
  });
});
