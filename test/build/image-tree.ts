/**
 * A Dockerfile's stages laid out as directories, without a container engine (none runs in CI), so the
 * suite sees what an image would hold: each stage starts empty; COPY and ADD put in exactly the
 * context files the ignore rules keep (or a previous stage's files, for `--from`); WORKDIR and ENV are
 * followed; a RUN is run for real when it is one of the build steps below, so a file the build reads
 * but the Dockerfile never copies (or the context leaves out) fails the build here as in Docker.
 *
 * RUN steps this knows (split on `&&`):
 * - `npm ci` / `npm install`: the dependencies. Not reinstalled from the registry: each entry of the
 *   stage's node_modules links to the repository's (the dependencies are the lockfile's either way;
 *   what is checked is the stage's own files), except the workspace packages (packages/*), which npm
 *   links to the stage's own copy when the stage has it and leaves out when it has not. Requires
 *   package.json and package-lock.json in the stage.
 * - `npm run <script>`: run as written, in the stage's working directory.
 * - `npm prune`, `mkdir`, `chown`, `chmod`: skipped (they read nothing from the context; prune would
 *   prune the shared node_modules).
 * Any other RUN fails the check, naming it: teach this file what it reads before using it.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { join, posix } from 'node:path';
import { filesOfSource, parseCopy, parseEnv, type Stage } from './dockerfile.js';

export interface BuiltStage {
  name: string;
  /** The stage's filesystem: image path `/x` is `join(root, 'x')`. */
  root: string;
  workdir: string;
  env: Record<string, string>;
  entrypoint: string[];
  cmd: string[];
  user: string | null;
  /** HEALTHCHECK's command (exec form), or null. */
  healthcheck: string[] | null;
}

export interface BuildInput {
  contextRoot: string;
  /** The context's files after the ignore rules. */
  contextFiles: string[];
  /** The repository's node_modules, linked where a stage installs its dependencies. */
  nodeModules: string;
  /** An empty scratch directory for the stages. */
  scratch: string;
  /** Results of earlier `npm run` steps by input digest, shared between Dockerfiles that build the same tree. */
  runCache: Map<string, string>;
}

/** The image path of `p` seen from `workdir`. */
const resolveIn = (workdir: string, p: string): string => posix.resolve(workdir, p);

/** Every file under `dir` (relative paths), symbolic links listed, not followed. */
function walk(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(dir, prefix), { withFileTypes: true })) {
    const rel = prefix === '' ? entry.name : `${prefix}/${entry.name}`;
    if (entry.isDirectory()) out.push(...walk(dir, rel));
    else out.push(rel);
  }
  return out;
}

function copyFile(from: string, to: string): void {
  mkdirSync(posix.dirname(to), { recursive: true });
  cpSync(from, to, { verbatimSymlinks: true, recursive: true });
}

/** COPY/ADD from the build context into the stage. */
function copyFromContext(stage: BuiltStage, input: BuildInput, sources: string[], destination: string, line: number): void {
  const dest = resolveIn(stage.workdir, destination);
  const intoDir = destination.endsWith('/') || sources.length > 1 || sources.some((s) => /[*?[]/.test(s));
  for (const source of sources) {
    const files = filesOfSource(source, input.contextFiles);
    if (files.length === 0) throw new Error(`Dockerfile line ${line}: COPY ${source}: not in the build context (missing, or left out by the ignore file)`);
    const base = posix.normalize(source.replace(/^\/+/, '')).replace(/\/$/, '');
    const isFile = files.length === 1 && files[0] === base;
    for (const f of files) {
      // A named file goes to dest (or into it); a directory's files keep their path below the directory.
      const rel = isFile ? posix.basename(f) : base === '.' ? f : posix.relative(base, f);
      const target = isFile && !intoDir ? dest : posix.join(dest, rel);
      copyFile(join(input.contextRoot, f), join(stage.root, target));
    }
  }
}

/** COPY --from=<stage>: a path of an earlier stage's filesystem. */
function copyFromStage(stage: BuiltStage, from: BuiltStage, sources: string[], destination: string, line: number): void {
  const dest = resolveIn(stage.workdir, destination);
  for (const source of sources) {
    const path = join(from.root, resolveIn(from.workdir, source));
    const st = lstatSync(path, { throwIfNoEntry: false });
    if (st === undefined) throw new Error(`Dockerfile line ${line}: COPY --from=${from.name} ${source}: not in that stage`);
    // A directory's contents go to the destination; a file (or a link) to it, or into it with a trailing '/'.
    const target = !st.isDirectory() && destination.endsWith('/') ? posix.join(dest, posix.basename(source)) : dest;
    copyFile(path, join(stage.root, target));
  }
}

/** A digest of the files under the stage's working directory (not its linked node_modules), the step and its environment. */
function digest(cwd: string, step: string, env: Record<string, string>): string {
  const h = createHash('sha256').update(`${step}\0${JSON.stringify(env)}\0`);
  for (const f of walk(cwd).sort()) {
    h.update(`${f}\0`);
    const st = lstatSync(join(cwd, f));
    if (st.isFile()) h.update(readFileSync(join(cwd, f)));
    else if (st.isSymbolicLink()) h.update(readlinkSync(join(cwd, f)));
  }
  return h.digest('hex');
}

function run(command: string, args: string[], cwd: string, env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => { output += c.toString('utf8'); });
    child.stderr.on('data', (c: Buffer) => { output += c.toString('utf8'); });
    child.on('exit', (code) => resolve({ code, output }));
  });
}

async function runStep(stage: BuiltStage, input: BuildInput, step: string, line: number): Promise<void> {
  const cwd = join(stage.root, stage.workdir);
  mkdirSync(cwd, { recursive: true });
  if (/^npm (ci|install|i)(\s|$)/.test(step)) {
    for (const f of ['package.json', 'package-lock.json']) {
      if (!existsSync(join(cwd, f))) throw new Error(`Dockerfile line ${line}: ${step}: no ${f} in ${stage.workdir}`);
    }
    if (!existsSync(join(cwd, 'node_modules'))) linkDependencies(input.nodeModules, cwd);
    return;
  }
  const script = /^npm run (\S+)$/.exec(step);
  if (script !== null) {
    // The step reads its working directory: the same files there (two Dockerfiles building the same
    // package) give the same result, built once.
    const key = digest(cwd, step, stage.env);
    const done = input.runCache.get(key);
    if (done !== undefined) {
      rmSync(cwd, { recursive: true, force: true });
      cpSync(done, cwd, { recursive: true, verbatimSymlinks: true });
      return;
    }
    const { code, output } = await run('npm', ['run', script[1]], cwd, stage.env);
    if (code !== 0) throw new Error(`Dockerfile line ${line}: ${step} failed in the stage's files (exit ${code}):\n${output.slice(-4000)}`);
    const saved = join(input.scratch, `run-${input.runCache.size}`);
    cpSync(cwd, saved, { recursive: true, verbatimSymlinks: true });
    input.runCache.set(key, saved);
    return;
  }
  if (/^(npm prune|mkdir|chown|chmod)(\s|$)/.test(step)) return;
  throw new Error(`Dockerfile line ${line}: RUN ${step}: test/build/image-tree.ts does not know what this reads; teach it`);
}

/**
 * The stage's node_modules as npm ci would make it from the same lockfile: the repository's installed
 * packages, and its workspace links (node_modules/<name> -> ../packages/<dir>) pointed at the stage's
 * own packages/<dir>, so that an app in the image resolves the package the image built, never the
 * repository's.
 */
function linkDependencies(repoModules: string, cwd: string): void {
  const target = join(cwd, 'node_modules');
  mkdirSync(target);
  for (const name of readdirSync(repoModules)) {
    const from = join(repoModules, name);
    const link = lstatSync(from).isSymbolicLink() ? readlinkSync(from) : null;
    const workspace = link === null ? null : /^\.\.\/packages\/([^/]+)$/.exec(link);
    if (workspace === null) symlinkSync(from, join(target, name));
    else if (existsSync(join(cwd, 'packages', workspace[1], 'package.json'))) symlinkSync(join('..', 'packages', workspace[1]), join(target, name));
  }
}

/** The JSON or shell form of ENTRYPOINT/CMD as an argument list. */
function execForm(rest: string): string[] {
  return rest.trim().startsWith('[') ? (JSON.parse(rest) as string[]) : ['/bin/sh', '-c', rest];
}

/** Builds every stage of a Dockerfile into `input.scratch`; the last one is the image. */
export async function buildStages(stages: Stage[], input: BuildInput): Promise<BuiltStage[]> {
  const built: BuiltStage[] = [];
  for (const [index, stage] of stages.entries()) {
    const base = built.find((b) => b.name === stage.image);
    const root = join(input.scratch, `stage-${index}`);
    mkdirSync(root, { recursive: true });
    if (base !== undefined) cpSync(base.root, root, { recursive: true, verbatimSymlinks: true });
    const s: BuiltStage = base !== undefined
      ? { ...base, env: { ...base.env }, entrypoint: [...base.entrypoint], cmd: [...base.cmd], root, name: stage.name }
      : { name: stage.name, root, workdir: '/', env: {}, entrypoint: [], cmd: [], user: null, healthcheck: null };
    for (const ins of stage.instructions) {
      if (ins.keyword === 'WORKDIR') {
        s.workdir = resolveIn(s.workdir, ins.rest.trim());
        mkdirSync(join(root, s.workdir), { recursive: true });
      } else if (ins.keyword === 'ENV') {
        Object.assign(s.env, parseEnv(ins.rest));
      } else if (ins.keyword === 'COPY' || ins.keyword === 'ADD') {
        const copy = parseCopy(ins);
        if (copy.from === null) copyFromContext(s, input, copy.sources, copy.destination, ins.line);
        else {
          const from = built.find((b) => b.name === copy.from);
          if (from === undefined) throw new Error(`Dockerfile line ${ins.line}: COPY --from=${copy.from}: no such stage (images are not fetched)`);
          copyFromStage(s, from, copy.sources, copy.destination, ins.line);
        }
      } else if (ins.keyword === 'RUN') {
        for (const step of ins.rest.split('&&').map((x) => x.trim()).filter(Boolean)) await runStep(s, input, step, ins.line);
      } else if (ins.keyword === 'ENTRYPOINT') {
        s.entrypoint = execForm(ins.rest);
        s.cmd = [];
      } else if (ins.keyword === 'CMD') {
        s.cmd = execForm(ins.rest);
      } else if (ins.keyword === 'HEALTHCHECK') {
        const cmd = /(?:^|\s)CMD\s+(.*)$/.exec(ins.rest);
        s.healthcheck = cmd === null ? null : execForm(cmd[1]);
      } else if (ins.keyword === 'USER') {
        s.user = ins.rest.trim();
      }
    }
    built.push(s);
  }
  return built;
}

/** The host path of an image path in a built stage (e.g. `/app/dist/main.js`). */
export function hostPath(stage: BuiltStage, imagePath: string): string {
  return join(stage.root, resolveIn(stage.workdir, imagePath));
}

/** True when the stage holds `imagePath` as a regular file or a directory. */
export function holds(stage: BuiltStage, imagePath: string): boolean {
  return statSync(hostPath(stage, imagePath), { throwIfNoEntry: false }) !== undefined;
}
