/**
 * What Docker sends and copies when it builds one of the repository's Dockerfiles, read from the files
 * themselves, for test/build/dockerfiles.test.ts:
 *
 * - `.dockerignore` as BuildKit reads it (moby/patternmatcher's `ignorefile.ReadAll`, then
 *   `MatchesOrParentMatches`): `#` comment lines, whitespace trimmed, each pattern path-cleaned with a
 *   leading `/` dropped; `*` and `?` never cross a `/`, `**` crosses any number of directories,
 *   `[...]` classes and `\` escapes; a pattern that matches a parent directory matches every file
 *   below it; `!pattern` re-includes, and the last pattern that matches a path decides.
 * - The ignore file of a Dockerfile: `<Dockerfile>.dockerignore` beside it when there is one (BuildKit,
 *   Docker's default builder), else `.dockerignore` at the context's root.
 * - The Dockerfile's instructions (line continuations, comment lines, the `escape` parser directive),
 *   its stages and the sources of each COPY/ADD, in both the shell and the JSON form.
 *
 * No published npm package implements Docker's ignore rules: `ignore` and `minimatch` implement
 * .gitignore and shell globs, which differ (a .gitignore pattern without a slash matches at any depth;
 * Docker's matches at the root only), so the rules are written out here, as small as they are.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, posix } from 'node:path';

/** Go's filepath.Clean for a slash path: no `.`, no `x/..`, no doubled or trailing slash ("" is "."). */
export function cleanPath(p: string): string {
  if (p === '') return '.';
  const normalized = posix.normalize(p);
  return normalized.length > 1 && normalized.endsWith('/') ? normalized.slice(0, -1) : normalized;
}

/** The patterns of an ignore file, as BuildKit reads them. */
export function readIgnoreFile(text: string): string[] {
  const patterns: string[] = [];
  for (const [i, raw] of text.split('\n').entries()) {
    const line = i === 0 ? raw.replace(/^\uFEFF/, '') : raw;
    if (line.startsWith('#')) continue;
    let p = line.trim();
    if (p === '') continue;
    const exception = p.startsWith('!');
    if (exception) p = p.slice(1).trim();
    if (p.length > 0) {
      p = cleanPath(p);
      if (p.length > 1 && p.startsWith('/')) p = p.slice(1);
    }
    patterns.push(exception ? `!${p}` : p);
  }
  return patterns;
}

interface Pattern {
  exception: boolean;
  matches: (path: string) => boolean;
}

/** One pattern, compiled as patternmatcher compiles it: an exact path, a prefix, a suffix or a regular expression. */
function compilePattern(raw: string): Pattern {
  let text = cleanPath(raw.trim());
  const exception = text.startsWith('!');
  if (exception) {
    if (text === '!') throw new Error('illegal exclusion pattern: "!"');
    text = text.slice(1);
  }
  let re = '^';
  let kind: 'exact' | 'prefix' | 'suffix' | 'regexp' = 'exact';
  const chars = [...text];
  for (let i = 0, token = 0; i < chars.length; i++, token++) {
    const c = chars[i];
    if (c === '*' && chars[i + 1] === '*') {
      i++;
      if (chars[i + 1] === '/') i++; // `**/` is `**`
      if (i + 1 === chars.length) {
        if (kind === 'exact') kind = 'prefix';
        else { re += '.*'; kind = 'regexp'; }
      } else {
        re += '(.*/)?';
        kind = 'regexp';
      }
      if (token === 0) kind = 'suffix';
    } else if (c === '*') {
      re += '[^/]*';
      kind = 'regexp';
    } else if (c === '?') {
      re += '[^/]';
      kind = 'regexp';
    } else if ('.+()|{}$'.includes(c)) {
      re += `\\${c}`;
    } else if (c === '\\') {
      if (i + 1 < chars.length) {
        re += `\\${chars[++i]}`;
        kind = 'regexp';
      } else {
        re += '\\\\';
      }
    } else if (c === '[' || c === ']') {
      re += c;
      kind = 'regexp';
    } else {
      re += c;
    }
  }
  if (kind === 'exact') return { exception, matches: (path) => path === text };
  if (kind === 'prefix') return { exception, matches: (path) => path.startsWith(text.slice(0, -2)) };
  if (kind === 'suffix') {
    const suffix = text.slice(2);
    return { exception, matches: (path) => path.endsWith(suffix) || (suffix.startsWith('/') && path === suffix.slice(1)) };
  }
  const compiled = new RegExp(`${re}$`, 'u');
  return { exception, matches: (path) => compiled.test(path) };
}

/** `excluded(path)`: whether a context path (slash-separated, relative) is left out of the build context. */
export function ignoreMatcher(patterns: string[]): (path: string) => boolean {
  const compiled = patterns.map(compilePattern);
  return (file) => {
    const path = cleanPath(file);
    if (path === '.') return false;
    const parents = path.split('/').slice(0, -1);
    let excluded = false;
    for (const p of compiled) {
      // An inclusion cannot change an excluded path, nor an exception an included one.
      if (p.exception !== excluded) continue;
      let match = p.matches(path);
      for (let i = 1; !match && i <= parents.length; i++) match = p.matches(parents.slice(0, i).join('/'));
      if (match) excluded = !p.exception;
    }
    return excluded;
  };
}

/** The ignore file BuildKit uses for `dockerfile` (a path relative to the context root), or null for none. */
export function ignoreFileFor(contextRoot: string, dockerfile: string): string | null {
  const beside = join(contextRoot, `${dockerfile}.dockerignore`);
  if (existsSync(beside)) return beside;
  const root = join(contextRoot, '.dockerignore');
  return existsSync(root) ? root : null;
}

/**
 * The files a clone of the repository has under `contextRoot` (tracked, and new ones not ignored by
 * git): the context a user's `docker build` starts from, before the ignore file.
 */
export function repositoryFiles(contextRoot: string): string[] {
  const out = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: contextRoot, encoding: 'utf8' });
  return [...new Set(out.split('\0').filter((f) => f !== '' && existsSync(join(contextRoot, f))))].sort();
}

/** The files of the build context: the repository's files the ignore rules keep. */
export function contextFiles(files: string[], ignorePatterns: string[]): string[] {
  const excluded = ignoreMatcher(ignorePatterns);
  return files.filter((f) => !excluded(f));
}

export interface Instruction {
  /** Upper-case keyword: FROM, COPY, RUN, ... */
  keyword: string;
  /** The rest of the instruction, continuation lines joined. */
  rest: string;
  line: number;
}

/** The instructions of a Dockerfile, in order. */
export function parseDockerfile(text: string): Instruction[] {
  const lines = text.split('\n');
  let escape = '\\';
  // Parser directives come first, before any comment, blank line or instruction.
  for (const line of lines) {
    const directive = /^#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$/.exec(line);
    if (directive === null) break;
    if (directive[1].toLowerCase() === 'escape') escape = directive[2];
  }
  const out: Instruction[] = [];
  let current: { text: string; line: number } | null = null;
  for (const [i, raw] of lines.entries()) {
    if (/^\s*#/.test(raw)) continue; // comment lines, also inside a continued instruction
    if (current === null && raw.trim() === '') continue;
    const trimmed = raw.replace(/\s+$/, '');
    const continued = trimmed.endsWith(escape);
    const part = continued ? trimmed.slice(0, -escape.length) : trimmed;
    current = current === null ? { text: part, line: i + 1 } : { text: `${current.text} ${part.trim()}`, line: current.line };
    if (continued) continue;
    const m = /^\s*(\S+)\s*(.*)$/.exec(current.text)!;
    out.push({ keyword: m[1].toUpperCase(), rest: m[2], line: current.line });
    current = null;
  }
  return out;
}

export interface Copy {
  /** COPY or ADD. */
  keyword: string;
  /** The stage copied from (`--from`), or null for the build context. */
  from: string | null;
  sources: string[];
  destination: string;
  line: number;
}

export interface Stage {
  /** `FROM image [AS name]`: the image and the name (or the stage's index as a string). */
  image: string;
  name: string;
  instructions: Instruction[];
}

/** The Dockerfile's stages, each with its instructions. */
export function stagesOf(instructions: Instruction[]): Stage[] {
  const stages: Stage[] = [];
  for (const ins of instructions) {
    if (ins.keyword === 'FROM') {
      const words = ins.rest.split(/\s+/).filter((w) => !w.startsWith('--'));
      const as = words.findIndex((w) => w.toUpperCase() === 'AS');
      stages.push({ image: words[0], name: as >= 0 ? words[as + 1] : String(stages.length), instructions: [] });
    } else if (stages.length === 0) {
      if (ins.keyword !== 'ARG') throw new Error(`line ${ins.line}: ${ins.keyword} before the first FROM`);
    } else {
      stages[stages.length - 1].instructions.push(ins);
    }
  }
  return stages;
}

/** The variables of an ENV instruction (`K=V K2="a b"` form). */
export function parseEnv(rest: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const m of rest.matchAll(/(\w+)=("(?:[^"\\]|\\.)*"|\S+)/g)) env[m[1]] = m[2].startsWith('"') ? (JSON.parse(m[2]) as string) : m[2];
  return env;
}

/** A COPY or ADD instruction's flags, sources and destination (shell or JSON form). */
export function parseCopy(ins: Instruction): Copy {
  let rest = ins.rest.trim();
  let from: string | null = null;
  for (let flag = /^--([a-z-]+)(?:=(\S*))?\s+/.exec(rest); flag !== null; flag = /^--([a-z-]+)(?:=(\S*))?\s+/.exec(rest)) {
    if (flag[1] === 'from') from = flag[2];
    else if (!['chown', 'chmod', 'link'].includes(flag[1])) throw new Error(`line ${ins.line}: ${ins.keyword} --${flag[1]} is not understood by this check`);
    rest = rest.slice(flag[0].length);
  }
  const args: string[] = rest.startsWith('[') ? (JSON.parse(rest) as string[]) : rest.split(/\s+/);
  if (args.length < 2) throw new Error(`line ${ins.line}: ${ins.keyword} needs a source and a destination`);
  const sources = args.slice(0, -1);
  for (const s of sources) {
    if (s.includes('$')) throw new Error(`line ${ins.line}: ${ins.keyword} source ${s}: variables are not expanded by this check`);
    if (from === null && /^[a-z]+:\/\//.test(s)) throw new Error(`line ${ins.line}: ${ins.keyword} from a URL is not checked`);
  }
  return { keyword: ins.keyword, from, sources, destination: args[args.length - 1], line: ins.line };
}

/** Go's filepath.Match for one slash path against a COPY source (`*`, `?` and `[...]` within one segment). */
export function sourceMatcher(source: string): (path: string) => boolean {
  const cleaned = cleanPath(source.replace(/^\/+/, ''));
  if (!/[*?[\\]/.test(cleaned)) return (path) => path === cleaned;
  let re = '^';
  for (let i = 0; i < cleaned.length; i++) {
    const c = cleaned[i];
    if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '[') {
      const end = cleaned.indexOf(']', i + 1);
      if (end < 0) throw new Error(`bad pattern ${source}`);
      re += `[${cleaned.slice(i + 1, end)}]`;
      i = end;
    } else if (c === '\\' && i + 1 < cleaned.length) re += `\\${cleaned[++i]}`;
    else re += c.replace(/[.+()|{}$^]/, '\\$&');
  }
  const compiled = new RegExp(`${re}$`, 'u');
  return (path) => compiled.test(path);
}

/**
 * The context files one COPY/ADD source brings: the files it names, or every file below a directory
 * it names, among `files` (the context after the ignore rules).
 */
export function filesOfSource(source: string, files: string[]): string[] {
  const matches = sourceMatcher(source);
  const cleaned = cleanPath(source.replace(/^\/+/, ''));
  if (cleaned === '.') return files;
  const named = new Set<string>();
  for (const f of files) {
    const parts = f.split('/');
    // The file itself, or a directory above it, matches the source.
    for (let i = 1; i <= parts.length; i++) {
      if (matches(parts.slice(0, i).join('/'))) {
        named.add(f);
        break;
      }
    }
  }
  return [...named].sort();
}

/** Every Dockerfile of the repository (Dockerfile, Containerfile, *.Dockerfile, Dockerfile.*), relative paths. */
export function dockerfilesIn(files: string[]): string[] {
  return files.filter((f) => {
    const base = posix.basename(f);
    if (/\.(dockerignore|containerignore)$/.test(base)) return false;
    return /^(Dockerfile|Containerfile)(\.[\w-]+)?$/.test(base) || /\.(Dockerfile|Containerfile)$/.test(base);
  });
}

/** Reads a Dockerfile from the context root: its stages. */
export function readDockerfile(contextRoot: string, dockerfile: string): Stage[] {
  return stagesOf(parseDockerfile(readFileSync(join(contextRoot, dockerfile), 'utf8')));
}
