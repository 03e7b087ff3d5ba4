/**
 * Every Dockerfile of the repository builds from what its build context holds, and its image runs:
 * checked without a container engine (CI has none), from the files themselves.
 *
 * - The build context is what Docker sends: the repository's files less those its ignore file leaves
 *   out, by BuildKit's rules (test/build/dockerfile.ts). Every COPY/ADD source must be in it.
 * - Each stage is laid out as a directory from exactly the files its COPY lines bring, and its build
 *   steps run there for real (test/build/image-tree.ts): `npm run build` fails when it reads a file the
 *   Dockerfile never copied, as it would inside `docker build`.
 * - The image's own ENTRYPOINT / CMD then runs from the last stage's files: cellgate with its gRPC
 *   service on (which reads proto/ at start) and its HEALTHCHECK; the example app answering through
 *   a real cellgate.
 *
 * The images are also built and run for real with podman, which CI cannot run (scripts/app-image-check.sh
 * for the app image; docs/deploy.md, "How the build is checked").
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { contextFiles, dockerfilesIn, filesOfSource, ignoreFileFor, ignoreMatcher, parseCopy, readDockerfile, readIgnoreFile, repositoryFiles, type Stage } from './dockerfile.js';
import { buildStages, holds, hostPath, type BuiltStage } from './image-tree.js';
import { freePort, startServer, type RunningServer } from '../helpers/server.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const REPO_FILES = repositoryFiles(ROOT);
const DOCKERFILES = dockerfilesIn(REPO_FILES);

/** The root .dockerignore as it was when the image stopped building: scripts/ and proto/ left out. */
const BROKEN_IGNORE = '# Only package.json, package-lock.json, tsconfig.json, src/ and docker/ are needed to build the image.\n*\n!package.json\n!package-lock.json\n!tsconfig.json\n!src/\n!docker/\n';

function ignorePatterns(dockerfile: string): string[] {
  const file = ignoreFileFor(ROOT, dockerfile);
  return file === null ? [] : readIgnoreFile(readFileSync(file, 'utf8'));
}

/** The COPY/ADD sources of a Dockerfile's stages that bring no file of the context, as `line N: COPY src`. */
function missingSources(stages: Stage[], context: string[]): string[] {
  const missing: string[] = [];
  for (const stage of stages) {
    for (const ins of stage.instructions.filter((i) => i.keyword === 'COPY' || i.keyword === 'ADD')) {
      const copy = parseCopy(ins);
      if (copy.from !== null) continue;
      for (const source of copy.sources) if (filesOfSource(source, context).length === 0) missing.push(`line ${ins.line}: ${copy.keyword} ${source}`);
    }
  }
  return missing;
}

describe("Docker's ignore rules, as BuildKit applies .dockerignore", () => {
  const excluded = (patterns: string[], path: string): boolean => ignoreMatcher(patterns)(path);

  it('single patterns: * and ? within a directory, ** across any, a matching parent directory covers its files (moby/patternmatcher\'s cases)', () => {
    const cases: [string, string, boolean][] = [
      ['*', 'fileutils.go', true], ['*.go', 'fileutils.go', true], ['*', 'dir/file', true],
      ['**', 'dir/file', true], ['dir/**', 'dir/dir2/file', true], ['**/dir', 'dir/file', true],
      ['**/dir2/*', 'dir/dir2/file', true], ['**file', 'dir/dir/file', true], ['**/file*.txt', 'dir/dir/file.txt', true],
      ['**/**/*.txt2', 'dir/dir/file.txt', false], ['**/*.txt', 'file.txt', true], ['a**/*.txt', 'a/dir/dir/file.txt', true],
      ['a/*.txt', 'a/dir/file.txt', false], ['a/*.txt', 'a/file.txt', true], ['a[b-d]e', 'ace', true], ['a[b-d]e', 'aae', false],
      ['a[^b-d]e', 'aze', true], ['.*', '.foo', true], ['.*', 'foo', false], ['abc.def', 'abcZdef', false],
      ['abc?def', 'abcZdef', true], ['abc?def', 'abcdef', false], ['**/foo/bar', 'foo/bar', true], ['abc/**', 'abc', false],
      ['abc/**', 'abc/def/ghi', true], ['**/.foo', 'bar.foo', false], ['a(b)c/def', 'a(b)c/def', true], ['a.|)$(}+{bc', 'a.|)$(}+{bc', true],
      ['dist/*.whl', 'dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl', true], ['a\\*b', 'a*b', true],
      // Anchored at the context's root, unlike .gitignore: `*.md` is not `docs/x.md`.
      ['*.md', 'docs/deploy.md', false], ['src', 'src/main.ts', true], ['src', 'lib/src/main.ts', false],
    ];
    for (const [pattern, path, want] of cases) expect(excluded([pattern], path), `${pattern} ${path}`).toBe(want);
  });

  it('exceptions: the last pattern that matches decides', () => {
    expect(excluded(['**', '!util/docker/web'], 'util/docker/web/foo')).toBe(false);
    expect(excluded(['**', '!util/docker/web', 'util/docker/web/foo'], 'util/docker/web/foo')).toBe(true);
    expect(excluded(['docs', '!docs/README.md'], 'docs/README.md')).toBe(false);
    expect(excluded(['docs', '!docs/README.md'], 'docs/other.md')).toBe(true);
    expect(excluded(['!fileutils.go', '*.go'], 'fileutils.go')).toBe(true);
    expect(excluded(['*', '!src/', 'src/**/*.test.ts'], 'src/a.test.ts')).toBe(true);
    expect(excluded(['*', '!src/', 'src/**/*.test.ts'], 'src/a.ts')).toBe(false);
    expect(() => ignoreMatcher(['!'])).toThrow(/illegal/);
  });

  it('the file: comment lines, blank lines, surrounding spaces, a leading slash and ./ are dropped', () => {
    expect(readIgnoreFile('\uFEFF# comment\n\n  /node_modules/  \n!./src//x/../y\n ! docs\n#!keep\n')).toEqual(['node_modules', '!src/y', '!docs']);
  });
});

describe('every Dockerfile of the repository', () => {
  it('the server image and the example app image are found, both built from the repository root (as the compose files build them), each with its own ignore file', () => {
    expect(DOCKERFILES).toEqual(expect.arrayContaining(['Dockerfile', 'examples/replicas/app.Dockerfile']));
    expect(ignoreFileFor(ROOT, 'Dockerfile')).toBe(join(ROOT, '.dockerignore'));
    expect(ignoreFileFor(ROOT, 'examples/replicas/app.Dockerfile')).toBe(join(ROOT, 'examples/replicas/app.Dockerfile.dockerignore'));
    const builds = REPO_FILES.filter((f) => /(^|\/)(docker-)?compose\.ya?ml$/.test(f)).flatMap((f) => {
      const compose = parseYaml(readFileSync(join(ROOT, f), 'utf8')) as { services: Record<string, { build?: { context: string; dockerfile?: string } }> };
      return Object.values(compose.services).filter((s) => s.build !== undefined).map((s) => ({ f, ...s.build! }));
    });
    expect(builds.length).toBeGreaterThanOrEqual(3);
    for (const b of builds) {
      expect(resolve(ROOT, b.f, '..', b.context), b.f).toBe(resolve(ROOT));
      expect(DOCKERFILES, b.f).toContain(b.dockerfile ?? 'Dockerfile');
    }
  });

  for (const dockerfile of DOCKERFILES) {
    it(`${dockerfile}: every COPY/ADD source is in its build context`, () => {
      const stages = readDockerfile(ROOT, dockerfile);
      expect(stages.length).toBeGreaterThan(0);
      expect(missingSources(stages, contextFiles(REPO_FILES, ignorePatterns(dockerfile)))).toEqual([]);
    });
  }

  it('the check fails on the ignore file that broke the image: its COPY of scripts/embed-lua.mjs and of proto/ bring nothing', () => {
    const stages = readDockerfile(ROOT, 'Dockerfile');
    const missing = missingSources(stages, contextFiles(REPO_FILES, readIgnoreFile(BROKEN_IGNORE)));
    expect(missing).toEqual([expect.stringMatching(/: COPY scripts\/embed-lua\.mjs$/), expect.stringMatching(/: COPY proto$/)]);
  });
});

describe('every image, its stages laid out from the files its Dockerfile copies', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'cellgate-image-'));
  const runCache = new Map<string, string>();
  const images = new Map<string, BuiltStage>();
  const build = (dockerfile: string, context: string[], dir: string): Promise<BuiltStage[]> =>
    buildStages(readDockerfile(ROOT, dockerfile), { contextRoot: ROOT, contextFiles: context, nodeModules: join(ROOT, 'node_modules'), scratch: join(scratch, dir), runCache });

  beforeAll(async () => {
    // One after the other: the second reuses the first's `npm run build` when its files are the same.
    for (const [i, dockerfile] of DOCKERFILES.entries()) {
      const stages = await build(dockerfile, contextFiles(REPO_FILES, ignorePatterns(dockerfile)), `image-${i}`);
      images.set(dockerfile, stages[stages.length - 1]);
    }
  }, 600_000);
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('each builds: `npm run build` ran in the files its stage copied', () => {
    expect([...images.keys()].sort()).toEqual([...DOCKERFILES].sort());
    expect(holds(images.get('Dockerfile')!, '/app/dist/main.js')).toBe(true);
    // The application package, built in the image: the app resolves `cellgate/express` to it.
    expect(holds(images.get('examples/replicas/app.Dockerfile')!, '/app/packages/cellgate/dist/http/express.js')).toBe(true);
  });

  it("a build that reads a file its stage did not copy fails at that step: the ignore file that broke the image", async () => {
    await expect(build('Dockerfile', contextFiles(REPO_FILES, readIgnoreFile(BROKEN_IGNORE)), 'broken')).rejects.toThrow(/COPY scripts\/embed-lua\.mjs: not in the build context/);
    // The same sources in the context, but the stage without the script: npm run build fails.
    const noScript = contextFiles(REPO_FILES, ignorePatterns('Dockerfile')).filter((f) => f !== 'scripts/embed-lua.mjs');
    const stages = readDockerfile(ROOT, 'Dockerfile').map((s) => ({ ...s, instructions: s.instructions.filter((i) => !i.rest.includes('scripts/embed-lua.mjs')) }));
    await expect(buildStages(stages, { contextRoot: ROOT, contextFiles: noScript, nodeModules: join(ROOT, 'node_modules'), scratch: join(scratch, 'no-script'), runCache }))
      .rejects.toThrow(/npm run build failed in the stage's files[\s\S]*embed-lua\.mjs/);
  }, 120_000);

  it("Dockerfile: the image's ENTRYPOINT starts cellgate from the image's files with the gRPC service on (proto/ read at start), and its HEALTHCHECK passes", async () => {
    const image = images.get('Dockerfile')!;
    expect(image.user).toBe('node');
    expect(image.entrypoint[0]).toBe('node');
    // The image's own paths, found in its files; the server's flags (which win over the image's
    // CELLGATE_* variables) keep it on loopback and in a scratch directory.
    const entry = image.entrypoint.slice(1).map((a) => (a.startsWith('/') ? hostPath(image, a) : a));
    const rlsPort = await freePort();
    const args = ['--rls-port', String(rlsPort), '--rls-bind', '127.0.0.1', '--rls-config', join(ROOT, 'examples/envoy/rls-config')];
    const server = await startServer({ nodeArgs: entry.slice(0, -1), main: entry[entry.length - 1], args, env: image.env });
    try {
      expect(await new Promise((done) => net.connect(rlsPort, '127.0.0.1').on('connect', function (this: net.Socket) { this.destroy(); done('open'); }).on('error', done))).toBe('open');
      const health = await runNode(image.healthcheck!.slice(1).map((a) => (a.startsWith('/') ? hostPath(image, a) : a)), { ...image.env, CELLGATE_PORT: String(server.port) });
      expect(image.healthcheck![0]).toBe('node');
      expect(health).toEqual({ code: 0, output: 'healthy: PONG\n' });
    } finally {
      await server.stop();
    }
  });

  it("Dockerfile: /bin/ratelimit, envoyproxy/ratelimit's entry point, execs node on the image's dist/main.js in the ratelimit mode", async () => {
    const image = images.get('Dockerfile')!;
    const launcher = hostPath(image, '/bin/ratelimit');
    expect(statSync(launcher).mode & 0o111).not.toBe(0);
    // Run as the image runs it, its /app/ found in the image's files, with the image's environment and
    // envoyproxy/ratelimit's (the runtime layout holding the Envoy example's limits).
    const local = join(scratch, 'ratelimit.sh');
    writeFileSync(local, readFileSync(launcher, 'utf8').replaceAll('/app/', `${hostPath(image, '/app')}/`));
    const runtime = mkdtempSync(join(scratch, 'runtime-'));
    mkdirSync(join(runtime, 'ratelimit'));
    symlinkSync(join(ROOT, 'examples/envoy/rls-config'), join(runtime, 'ratelimit', 'config'));
    const port = await freePort();
    const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', ...image.env, RUNTIME_ROOT: runtime, RUNTIME_SUBDIRECTORY: 'ratelimit', USE_STATSD: 'false', LOG_LEVEL: 'info', PORT: String(port), GRPC_PORT: String(await freePort()), HOST: '127.0.0.1', GRPC_HOST: '127.0.0.1' };
    const child = spawn('sh', [local], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => { output += c.toString(); });
    child.stderr.on('data', (c: Buffer) => { output += c.toString(); });
    try {
      const deadline = Date.now() + 90_000;
      for (;;) {
        const r = await fetch(`http://127.0.0.1:${port}/healthcheck`, { signal: AbortSignal.timeout(5000) }).catch(() => null);
        if (r?.status === 200) break;
        if (child.exitCode !== null || Date.now() > deadline) throw new Error(`/bin/ratelimit did not become healthy:\n${output}`);
        await new Promise((done) => setTimeout(done, 200));
      }
      expect(await (await fetch(`http://127.0.0.1:${port}/rlconfig`)).text()).toContain('edge.remote_address: unit=MINUTE requests_per_unit=100');
      // exec: the server is the launched process itself; the image's CELLGATE_BIND left RESP on loopback.
      expect(output).toMatch(new RegExp(`ready to accept connections on port \\d+ pid=${child.pid} bind=127\\.0\\.0\\.1`));
    } finally {
      child.kill('SIGKILL');
    }
  }, 120_000);

  it("examples/replicas/app.Dockerfile: the image's CMD serves the Express example from the image's files, limited by a real cellgate", async () => {
    const image = images.get('examples/replicas/app.Dockerfile')!;
    expect(image.user).toBe('node');
    expect(image.cmd.slice(0, 1)).toEqual(['node']);
    const cellgate: RunningServer = await startServer();
    const app = spawn(process.execPath, image.cmd.slice(1), {
      cwd: hostPath(image, image.workdir),
      env: { ...process.env, ...image.env, HOST: '127.0.0.1', PORT: '0', CELLGATE_URL: `redis://127.0.0.1:${cellgate.port}`, CELLGATE_TIMEOUT_MS: '5000', API_KEYS: 'demo' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const base = await new Promise<string>((done, fail) => {
        let out = '';
        app.stdout.on('data', (c: Buffer) => { out += c.toString(); const m = /"port":(\d+)/.exec(out); if (m) done(`http://127.0.0.1:${m[1]}`); });
        app.stderr.on('data', (c: Buffer) => { out += c.toString(); });
        app.on('exit', (code) => fail(new Error(`the app exited with ${code}: ${out}`)));
      });
      const res = await fetch(`${base}/api/hello`, { headers: { 'x-api-key': 'demo' }, signal: AbortSignal.timeout(10_000) });
      expect(res.status).toBe(200);
      expect(res.headers.get('ratelimit')).toMatch(/^"default";r=9;t=\d+$/);
      // The decision was cellgate's: the key is in its keyspace.
      const r = new Redis({ port: cellgate.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
      await r.connect();
      try {
        expect(Number(await r.dbsize())).toBe(1);
      } finally {
        r.disconnect();
      }
    } finally {
      app.kill('SIGKILL');
      await cellgate.stop();
    }
  });
});

function runNode(args: string[], env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => { output += c.toString(); });
    child.stderr.on('data', (c: Buffer) => { output += c.toString(); });
    child.on('exit', (code) => done({ code, output }));
  });
}
