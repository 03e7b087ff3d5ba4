/**
 * Reading the `rls-config` directory (docs/envoy.md, "Reloads"): its `*.yaml` files, one domain
 * each, into the configuration the service uses. Someone else controls that directory, so only
 * what is bounded is read: at most RLS_CONFIG_MAX_FILES files of at most RLS_CONFIG_MAX_FILE_BYTES
 * each (RLS_CONFIG_MAX_TOTAL_BYTES together), each a regular file (a FIFO, a device such as
 * /dev/zero behind a symlink, a directory named `x.yaml` or a symlink loop is refused with its
 * reason: src/files/regular-file.ts). Any refusal refuses the whole set (a set read in part would
 * drop limits silently).
 *
 * The listing and the reads run off the event loop (fs/promises, in libuv's threads). YAML parses
 * at a few hundred KB a second, so a set of more than RLS_CONFIG_PARSE_IN_PLACE_BYTES is parsed in a
 * worker thread (config-worker.ts) with a heap of its own; a smaller one (a few ms of parsing, the
 * common case) in place, without the worker's start. The whole load has a deadline. Decisions, RESP
 * and the metrics port are served while a reload reads, with the configuration in force until the
 * new one is complete.
 */
import { opendir } from 'node:fs/promises';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { FileReadError, readRegularFile } from '../files/regular-file.js';
import { parseRlsDomain, rlsConfigOf, RlsConfigError, type RlsConfig, type RlsDomain } from './config.js';

/** The largest configuration file read (envoyproxy/ratelimit's files are a few KB; 1 MiB is ~20,000 descriptors). */
export const RLS_CONFIG_MAX_FILE_BYTES = 1024 * 1024;
/** The most `*.yaml` files read from the directory. */
export const RLS_CONFIG_MAX_FILES = 1000;
/** The most bytes read in one load, all files together. */
export const RLS_CONFIG_MAX_TOTAL_BYTES = 16 * 1024 * 1024;
/** The most directory entries looked at (of any name): a directory holding more is refused. */
export const RLS_CONFIG_MAX_ENTRIES = 10 * RLS_CONFIG_MAX_FILES;
/** A load that has not finished in this time is given up (a disk that does not answer). */
export const RLS_CONFIG_LOAD_TIMEOUT_MS = 60_000;
/** The largest set parsed on the event loop (about 1,200 descriptors; milliseconds): a larger one goes to a worker thread. */
export const RLS_CONFIG_PARSE_IN_PLACE_BYTES = 64 * 1024;
/** The load's heap: parsing the largest set allowed needs far less; a crafted document that needs more is refused. */
const LOAD_HEAP_MB = 512;

/** Why a load was refused, as the `reason` label of cellgate_rls_config_refused_total. */
export type RefusalReason = 'not_regular' | 'too_big' | 'too_many_files' | 'unreadable' | 'invalid' | 'timeout';

export class RlsConfigLoadError extends RlsConfigError {
  constructor(
    readonly reason: RefusalReason,
    message: string,
  ) {
    super(message);
  }
}

export interface RlsConfigDirRules {
  /** Skip names that start with a dot (envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES). */
  ignoreDotfiles: boolean;
}

export interface LoadedDir {
  config: RlsConfig;
  /** Entries that are not read (another extension, a subdirectory), for the log; Kubernetes' `..` entries left out. */
  ignored: string[];
}

/** The files of a set, read. */
export interface ConfigFile {
  name: string;
  text: string;
}

/** What the worker hands back: the validated domains, or why the set was refused. */
export type ParseResult =
  | { ok: true; domains: RlsDomain[] }
  | { ok: false; reason: RefusalReason; message: string };

/** The names to read (sorted) and the names passed over; refuses a directory with too many entries or files. */
async function listDir(dir: string, rules: RlsConfigDirRules): Promise<{ names: string[]; ignored: string[] }> {
  const names: string[] = [];
  const ignored: string[] = [];
  let entries = 0;
  let handle;
  try {
    handle = await opendir(dir, { bufferSize: 64 });
  } catch (e) {
    throw new RlsConfigLoadError('unreadable', `${dir}: cannot read the configuration directory: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  try {
    for await (const entry of handle) {
      if (++entries > RLS_CONFIG_MAX_ENTRIES) {
        throw new RlsConfigLoadError('too_many_files', `${dir}: more than ${RLS_CONFIG_MAX_ENTRIES} entries in the configuration directory`);
      }
      const name = entry.name;
      if (rules.ignoreDotfiles && name.startsWith('.')) continue;
      if (!name.endsWith('.yaml')) {
        // `..data` and `..2024_...`: how Kubernetes mounts a ConfigMap, not the operator's files.
        if (!name.startsWith('..')) ignored.push(name);
        continue;
      }
      names.push(name);
      if (names.length > RLS_CONFIG_MAX_FILES) {
        throw new RlsConfigLoadError('too_many_files', `${dir}: more than ${RLS_CONFIG_MAX_FILES} *.yaml files in the configuration directory`);
      }
    }
  } catch (e) {
    if (e instanceof RlsConfigLoadError) throw e;
    throw new RlsConfigLoadError('unreadable', `${dir}: cannot list the configuration directory: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  } finally {
    // A loop left early (a throw) has closed it already; a second close rejects, harmlessly.
    await handle.close().catch(() => undefined);
  }
  return { names: names.sort(), ignored: ignored.sort() };
}

function readRefusal(e: unknown, name: string): RlsConfigLoadError {
  if (e instanceof FileReadError) {
    const reason: RefusalReason = e.code === 'NOT_REGULAR' ? 'not_regular' : e.code === 'TOO_BIG' ? 'too_big' : 'unreadable';
    return new RlsConfigLoadError(reason, `${name}: ${e.message}`);
  }
  return new RlsConfigLoadError('unreadable', `${name}: cannot read: ${(e as Error).message}`);
}

/** Lists and reads the directory's `*.yaml` files (off the event loop); rejects with an RlsConfigLoadError. */
async function readDirFiles(dir: string, rules: RlsConfigDirRules): Promise<{ files: ConfigFile[]; ignored: string[]; bytes: number }> {
  const { names, ignored } = await listDir(dir, rules);
  const files: ConfigFile[] = [];
  let bytes = 0;
  for (const name of names) {
    let data: Buffer;
    try {
      data = await readRegularFile(join(dir, name), { maxBytes: RLS_CONFIG_MAX_FILE_BYTES, what: 'rls-config file' });
    } catch (e) {
      throw readRefusal(e, name);
    }
    bytes += data.length;
    if (bytes > RLS_CONFIG_MAX_TOTAL_BYTES) {
      throw new RlsConfigLoadError('too_big', `${dir}: the *.yaml files hold more than ${RLS_CONFIG_MAX_TOTAL_BYTES} bytes together`);
    }
    files.push({ name, text: data.toString('utf8') });
  }
  return { files, ignored, bytes };
}

/** Validates the files, one domain each, on the calling thread; throws RlsConfigLoadError ('invalid'). */
export function parseConfigFiles(files: readonly ConfigFile[]): RlsDomain[] {
  return files.map((f) => {
    try {
      return parseRlsDomain(f.name, f.text);
    } catch (e) {
      if (e instanceof RlsConfigError) throw new RlsConfigLoadError('invalid', e.message);
      throw e;
    }
  });
}

/** Lists, reads and validates the directory's files, parsing on the calling thread (tests). */
export async function readRlsConfigDir(dir: string, rules: RlsConfigDirRules): Promise<{ domains: RlsDomain[]; ignored: string[] }> {
  const { files, ignored } = await readDirFiles(dir, rules);
  return { domains: parseConfigFiles(files), ignored };
}

/** Rejects with `error` if `p` has not settled by `deadline` (Date.now() ms). */
function byDeadline<T>(p: Promise<T>, deadline: number, error: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(error()), Math.max(0, deadline - Date.now()));
    timer.unref();
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** Parses the files in a worker thread (config-worker.ts), with a heap of its own, by `deadline`. */
function parseInWorker(files: ConfigFile[], deadline: number, timeout: () => Error): Promise<RlsDomain[]> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL('./config-worker.js', import.meta.url), {
      workerData: files,
      resourceLimits: { maxOldGenerationSizeMb: LOAD_HEAP_MB },
      stdout: false,
      stderr: false,
    });
    let settled = false;
    const settle = (f: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      void worker.terminate();
      f();
    };
    const timer = setTimeout(() => settle(() => reject(timeout())), Math.max(0, deadline - Date.now()));
    timer.unref();
    worker.once('message', (r: ParseResult) => settle(() => (r.ok ? resolve(r.domains) : reject(new RlsConfigLoadError(r.reason, r.message)))));
    worker.once('error', (e: NodeJS.ErrnoException) => settle(() => {
      const tooBig = e.code === 'ERR_WORKER_OUT_OF_MEMORY';
      reject(new RlsConfigLoadError(tooBig ? 'too_big' : 'unreadable', tooBig
        ? `parsing the configuration needed more than ${LOAD_HEAP_MB} MB`
        : `parsing the configuration failed: ${e.message}`));
    }));
    worker.once('exit', (code) => settle(() => reject(new RlsConfigLoadError('unreadable', `the configuration parser stopped (exit code ${code})`))));
  });
}

/**
 * The directory's configuration: read off the event loop, parsed in place when small or in a
 * worker thread, all within RLS_CONFIG_LOAD_TIMEOUT_MS; rejects with an RlsConfigLoadError.
 */
export async function loadRlsConfigDir(dir: string, rules: RlsConfigDirRules): Promise<LoadedDir> {
  const deadline = Date.now() + RLS_CONFIG_LOAD_TIMEOUT_MS;
  const timeout = (): Error => new RlsConfigLoadError('timeout', `${dir}: reading the configuration took longer than ${RLS_CONFIG_LOAD_TIMEOUT_MS / 1000} s`);
  const { files, ignored, bytes } = await byDeadline(readDirFiles(dir, rules), deadline, timeout);
  const domains = bytes <= RLS_CONFIG_PARSE_IN_PLACE_BYTES ? parseConfigFiles(files) : await parseInWorker(files, deadline, timeout);
  try {
    return { config: rlsConfigOf(domains), ignored };
  } catch (e) {
    if (e instanceof RlsConfigError) throw new RlsConfigLoadError('invalid', e.message);
    throw e;
  }
}
