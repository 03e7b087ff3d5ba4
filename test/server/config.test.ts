/**
 * Configuration sources: precedence (config file < environment < flags), unknown CELLGATE_*
 * variables, the redis.conf directives a real file carries (include, pidfile, tcp-backlog,
 * supervised, daemonize, unixsocket), the Redis directives refused with a reason, and --help.
 */
import { describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { startServer } from '../helpers/server.js';
import { runToExit } from '../helpers/replies.js';

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'cellgate-config-'));
}

async function configGet(c: Redis, ...names: string[]): Promise<Record<string, string>> {
  const pairs = (await c.call('CONFIG', 'GET', ...names)) as string[];
  return Object.fromEntries(pairs.flatMap((v, i) => (i % 2 === 0 ? [[v, pairs[i + 1]]] : [])));
}

describe('configuration precedence', () => {
  it('a flag beats the environment, which beats the config file', async () => {
    const dir = tempDir();
    const file = join(dir, 'cellgate.conf');
    writeFileSync(file, 'hz 20\ntimeout 7\nmaxclients 100\n');
    const s = await startServer({ configFile: file, args: ['--hz', '30'], env: { CELLGATE_HZ: '40', CELLGATE_TIMEOUT: '9' } });
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2, lazyConnect: true });
    try {
      await c.connect();
      expect(await configGet(c, 'hz', 'timeout', 'maxclients')).toEqual({ hz: '30', timeout: '9', maxclients: '100' });
    } finally {
      c.disconnect();
      await s.stop();
    }
  });

  it('--protected-mode no wins over CELLGATE_PROTECTED_MODE=yes (the Docker image sets it), as the -DENIED text says', async () => {
    const s = await startServer({ args: ['--protected-mode', 'no'], env: { CELLGATE_PROTECTED_MODE: 'yes' } });
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2, lazyConnect: true });
    try {
      await c.connect();
      expect(await configGet(c, 'protected-mode')).toEqual({ 'protected-mode': 'no' });
    } finally {
      c.disconnect();
      await s.stop();
    }
  });

  it('warns about a CELLGATE_* variable that names no option', async () => {
    const s = await startServer({ env: { CELLGATE_MAXCLIENT: '5' } });
    try {
      const line = s.logs.map((l) => JSON.parse(l) as { level: string; msg: string; variable?: string }).find((l) => l.variable === 'CELLGATE_MAXCLIENT');
      expect(line?.level).toBe('warning');
      expect(line?.msg).toContain('unknown environment variable CELLGATE_MAXCLIENT');
    } finally {
      await s.stop();
    }
  });
});

describe('redis.conf directives', () => {
  it('loads a redis.conf-style file with comments, quoting, include, pidfile, tcp-backlog, supervised, daemonize and unixsocket', async () => {
    const dir = tempDir();
    const sock = join(dir, 'cg.sock');
    const pidfile = join(dir, 'cellgate.pid');
    writeFileSync(join(dir, 'extra.conf'), '# included, relative to the including file\nmaxmemory-policy allkeys-lru\n');
    const file = join(dir, 'redis.conf');
    writeFileSync(file, [
      '# Redis configuration file example.',
      '#',
      '   # an indented comment',
      'include extra.conf',
      'daemonize no',
      `pidfile "${pidfile}"`,
      'tcp-backlog 128',
      'supervised auto',
      `unixsocket ${sock}`,
      'unixsocketperm 700',
      'requirepass "with space \\x41"',
      "save ''",
      '',
    ].join('\r\n'));
    const s = await startServer({ configFile: file });
    const c = new Redis({ path: sock, protocol: 2, lazyConnect: true, password: 'with space A' });
    try {
      await c.connect();
      expect(await configGet(c, 'maxmemory-policy', 'pidfile', 'tcp-backlog', 'supervised', 'daemonize', 'unixsocket', 'unixsocketperm', 'save')).toEqual({
        'maxmemory-policy': 'allkeys-lru', pidfile, 'tcp-backlog': '128', supervised: 'auto', daemonize: 'no', unixsocket: sock, unixsocketperm: '700', save: '',
      });
      expect(readFileSync(pidfile, 'utf8')).toBe(`${s.proc.pid}\n`);
    } finally {
      c.disconnect();
      expect(await s.stop()).toBe(0);
    }
    expect(existsSync(pidfile)).toBe(false);
    expect(existsSync(sock)).toBe(false);
  });

  it('adds up save lines, as redis.conf has them (and save "" clears)', async () => {
    const dir = tempDir();
    const file = join(dir, 'redis.conf');
    writeFileSync(file, 'save 900 1\nsave 300 10\nsave 60 10000\n');
    const s = await startServer({ configFile: file });
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2 });
    try {
      expect(await configGet(c, 'save')).toEqual({ save: '900 1 300 10 60 10000' });
    } finally {
      c.disconnect();
      await s.stop();
    }
    writeFileSync(file, 'save 900 1\nsave ""\n');
    const s2 = await startServer({ configFile: file });
    const c2 = new Redis({ port: s2.port, host: '127.0.0.1', protocol: 2 });
    try {
      expect(await configGet(c2, 'save')).toEqual({ save: '' });
    } finally {
      c2.disconnect();
      await s2.stop();
    }
  });

  it('refuses an include that includes itself, naming the depth', () => {
    const dir = tempDir();
    const file = join(dir, 'loop.conf');
    writeFileSync(file, 'include loop.conf\n');
    const r = runToExit([file]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("'include': includes nested more than 10 deep");
  });

  it.each([
    ['daemonize yes', 'run it in the foreground under a supervisor'],
    ['appendonly maybe', "argument must be 'yes' or 'no'"],
    ['replicaof 10.0.0.1 6379', 'cellgate has no replication'],
    ['cluster-enabled yes', 'cellgate has no cluster mode'],
    ['supervised systemd', 'use supervised no with systemd Type=simple'],
  ])('refuses "%s" with the reason', (line, reason) => {
    const dir = tempDir();
    const file = join(dir, 'redis.conf');
    writeFileSync(file, `# refused\n${line}\n`);
    const r = runToExit([file, '--dir', dir]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^cellgate: ${file.replace(/[.]/g, '\\.')}:2: '${line.split(' ')[0]}': .*${reason}`));
  });
});

describe('--help and --version', () => {
  it('--help lists every option with its default and a description', async () => {
    const r = runToExit(['--help']);
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/--port +TCP port \(0 picks a free one\) \(default: 6379; CONFIG SET can change it\)/);
    expect(r.stdout).toMatch(/--maxmemory-policy +what to do at maxmemory \(default: volatile-ttl; CONFIG SET can change it\)/);
    expect(r.stdout).toMatch(/--unixsocket +.*\(default: ""\)/);
    expect(r.stdout).toContain('config file < environment < flags');
    // One line per option CONFIG GET * knows, each with a description and a default.
    const listed = r.stdout.split('\n').filter((l) => l.startsWith('  --')).map((l) => /^ {2}--(\S+) +\S.* \(default: /.exec(l)?.[1]);
    const s = await startServer();
    const c = new Redis({ port: s.port, host: '127.0.0.1', protocol: 2, lazyConnect: true });
    try {
      await c.connect();
      const names = Object.keys(await configGet(c, '*')).sort();
      expect(listed.slice().sort()).toEqual(names);
    } finally {
      c.disconnect();
      await s.stop();
    }
  });

  it('--version prints the version', () => {
    const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(runToExit(['--version']).stdout).toBe(`cellgate ${version}\n`);
  });
});
