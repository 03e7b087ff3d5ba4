#!/usr/bin/env -S MALLOC_MMAP_THRESHOLD_=131072 node --max-semi-space-size=8 --single-threaded-gc
// How cellgate runs (`npm start` and the Docker image do the same: bench/node-flags.mjs):
// MALLOC_MMAP_THRESHOLD_=131072: glibc serves blocks of 128 KiB and more with mmap, and gives them
//   back when freed. The keyspace lives in a few big typed arrays that double as it grows; with
//   glibc's default (a threshold that rises to 32 MB as big blocks are freed) the old halves stayed
//   in the heap: RSS +96–109 B/key at 1M keys instead of +81 (bench/memory.mjs), same throughput.
// --max-semi-space-size=8 (MB; V8's default on 64-bit is 16): smaller, more frequent minor GCs; with a
//   million keys held as strings in a Map it took minor-GC pauses from p99 4–6.5 ms to 0.7–2.1 ms.
// --single-threaded-gc: the keyspace lives in typed arrays, so the JS heap stays a few MB and a
//   scavenge has little to do; V8's parallel helpers only add waiting, worst when the machine's cores
//   are busy (a sidecar next to its application): at 1M keys under updates, pauses went from p99
//   3–3.9 / max 3.7–7.4 ms to p99 0.3–0.4 / max 0.4–1.2 ms (bench/memory.mjs), throughput unchanged.
/**
 * cellgate-server [/path/to/cellgate.conf] [--name value ...]
 * cellgate-server check FILE
 * cellgate-server ratelimit
 *
 * Reads the configuration (file, then CELLGATE_* variables, then flags: a flag wins), prepares `dir` (created if
 * missing, proved writable, locked against a second server), binds the ports, then loads the
 * snapshot while already answering INFO (loading:1) and PING, and runs in the foreground until
 * SIGTERM/SIGINT (final snapshot, then exit); SIGHUP is logged and ignored. Startup problems (a bad
 * flag, an unusable dir, a port in use, a corrupt snapshot with snapshot-corrupt-policy refuse) end
 * the process with one clear line on stderr and exit code 1; the ports are bound before the load,
 * so a port in use fails at once, not after a long load.
 *
 * `check FILE` validates a snapshot with the loader's own rules and prints its key count per type
 * (exit 0 valid, 1 invalid); given a journal (its folder, its manifest or one incremental file) it
 * validates that with the journal loader's rules (src/persistence/journal-check.ts).
 *
 * `ratelimit` starts from envoyproxy/ratelimit's environment variables instead (src/rls/ratelimit-mode.ts,
 * docs/envoy.md), as Envoy Gateway runs `/bin/ratelimit`: no file is written (no snapshot, journal,
 * lock or pidfile), the state lives on the backend.
 */
import { renameSync, rmSync } from 'node:fs';
import { Config, ConfigError, optionsHelp } from './config.js';
import { Keyspace } from './keyspace/keyspace.js';
import { typeName } from './limiters/registry.js';
import { Logger } from './log.js';
import { readWholeRegularFileSync } from './files/regular-file.js';
import { checkWritable, DirError, DirLock, makeDirs } from './persistence/dir.js';
import { replaceFileSync } from './persistence/exclusive-file.js';
import { SnapshotError, SnapshotLoad } from './persistence/reader.js';
import { checkJournal } from './persistence/journal-check.js';
import { JournalError } from './persistence/journal-format.js';
import { SNAPSHOT_FILE } from './persistence/persisted-file.js';
import { APPENDONLY_WITH_BACKEND, Server } from './server/server.js';
import { VERSION } from './version.js';
import { warmUp, WARMUP_ROUNDS } from './server/warmup.js';
import { metricsExtensions, notReadyReason, startMetrics } from './server/metrics.js';
import { infoExtensions } from './commands/info.js';
import { OOM_MESSAGE } from './server/memory.js';
import { RlsRuntime } from './rls/index.js';
import { StoreDecider } from './rls/store-decider.js';
import { logRatelimitStart, ratelimitConfig, RatelimitEnvError, ratelimitFileRefusal, type RatelimitStart } from './rls/ratelimit-mode.js';
import { performance } from 'node:perf_hooks';

const USAGE = `Usage: cellgate-server [/path/to/cellgate.conf] [--option value ...]
       cellgate-server check FILE     (a snapshot, a journal folder, manifest or incremental file)
       cellgate-server ratelimit      (from envoyproxy/ratelimit's environment variables: docs/envoy.md)
       cellgate-server --version
       cellgate-server --help

Options are the configuration names (e.g. --port 6380 --dir /data --requirepass s3cret), also
accepted in the config file (\`port 6380\`) and as CELLGATE_<NAME> environment variables
(CELLGATE_PORT=6380). Precedence: config file < environment < flags (a flag always wins).

Options:
`;

/** Start-up failures are written through this logger: human until the configuration says json. */
const startLog = new Logger();

function fail(message: string): never {
  startLog.fatal(message);
  process.exit(1);
}

/**
 * The log format asked for, for a start that fails before the configuration is complete: a flag,
 * else the environment, else what the config file said so far.
 */
function formatAsked(argv: string[], env: NodeJS.ProcessEnv, config: Config): 'human' | 'json' {
  let asked: string | undefined;
  for (let i = 0; i + 1 < argv.length; i++) if (argv[i].toLowerCase() === '--log-format') asked = argv[i + 1];
  asked ??= env.CELLGATE_LOG_FORMAT ?? config.get('log-format');
  return asked.toLowerCase() === 'json' ? 'json' : 'human';
}

async function main(argv: string[]): Promise<void> {
  if (argv[0] === '--version' || argv[0] === '-v') {
    process.stdout.write(`cellgate ${VERSION}\n`);
    return;
  }
  if (argv[0] === '--help' || argv[0] === '-h') {
    process.stdout.write(USAGE + optionsHelp() + '\n');
    return;
  }
  if (argv[0] === 'check') {
    if (argv.length !== 2) fail('usage: cellgate-server check FILE');
    process.exitCode = checkJournal(argv[1]) ?? checkSnapshot(argv[1]);
    return;
  }
  let ratelimit: RatelimitStart | null = null;
  if (argv[0] === 'ratelimit') {
    try {
      ratelimit = ratelimitConfig(process.env, argv.slice(1));
    } catch (e) {
      if (e instanceof RatelimitEnvError) fail(`ratelimit: ${e.message}`);
      throw e;
    }
  }
  const config = ratelimit?.config ?? new Config();
  let unknownEnv: string[] = [];
  try {
    let flags = argv;
    if (ratelimit !== null) flags = [];
    else if (argv.length > 0 && !argv[0].startsWith('--')) {
      config.loadFile(argv[0]);
      flags = argv.slice(1);
    }
    // In the ratelimit mode too: a CELLGATE_<NAME> variable is the more specific word.
    unknownEnv = config.applyEnv(process.env);
    config.applyFlags(flags);
  } catch (e) {
    if (e instanceof ConfigError) {
      startLog.format = formatAsked(argv, process.env, config);
      fail(e.message);
    }
    throw e;
  }

  const log = new Logger();
  log.level = config.get('loglevel');
  log.format = config.get('log-format') as 'human' | 'json';
  log.file = config.get('logfile');
  startLog.format = log.format;
  startLog.file = log.file;
  // supervised auto under systemd (NOTIFY_SOCKET set): Redis would send READY=1; cellgate cannot
  // (Node has no unix datagram sockets), so a Type=notify unit would wait for it until its timeout.
  if (config.get('supervised') === 'auto' && process.env.NOTIFY_SOCKET) {
    log.warning('supervised auto: NOTIFY_SOCKET is set but cellgate sends no sd_notify READY=1; run it as a systemd Type=simple service', { supervised: 'auto' });
  }
  for (const name of unknownEnv) {
    log.warning(`unknown environment variable ${name}: no option is called that (options are CELLGATE_<NAME>, e.g. CELLGATE_PORT; see --help); ignored`, { variable: name });
  }

  if (config.bool('appendonly') && config.get('backend') !== '') fail(`${APPENDONLY_WITH_BACKEND}; set appendonly no`);
  if (ratelimit !== null) {
    logRatelimitStart(log, ratelimit);
    const writes = ratelimitFileRefusal(config);
    if (writes !== null) fail(`ratelimit: ${writes}`);
  }

  const rlsRefusal = RlsRuntime.refusal(config);
  if (rlsRefusal !== null) fail(rlsRefusal);

  const server = new Server(config, log);
  infoExtensions.push({ name: 'degraded', title: 'Degraded', rows: () => [['degraded', server.degraded.list()]] });
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => server.shutdown(`received ${signal}`));
  }
  // The rate limit service's first configuration load begins now, off the event loop, beside the
  // rest of the start (warm-up, snapshot); the service starts once the ports are open.
  const rls = RlsRuntime.wanted(config) ? rlsRuntime(server) : null;
  if (rls !== null) {
    metricsExtensions.push(rls);
    server.degraded.addSource(() => (rls.service.config === null ? ['rls_no_config', rls.notReadyReason() ?? 'no rate limit configuration loaded (rls-force-start serves without one)'] : null));
    infoExtensions.push({ name: 'rls', title: 'Rls', rows: () => rls.infoRows() });
    void rls.prepare();
  }
  // Node's default for SIGHUP is to exit silently (a closed terminal, a supervisor's reload signal);
  // cellgate reloads the rate limit service's files (rls-config) and otherwise says it has nothing to reload.
  process.on('SIGHUP', () => {
    if (rls !== null) void rls.reload('SIGHUP');
    else log.warning('received SIGHUP: ignored (cellgate reads its configuration only at start; use CONFIG SET)');
  });
  // The last net under the guarded scheduler (src/server/tasks.ts) and the per-command catch: an
  // exception or a rejected promise that escapes them anyway is logged and counted, and the limits
  // go on being served, rather than ending the process without its final snapshot.
  process.on('uncaughtException', (e) => server.tasks.failed('uncaught exception', e));
  process.on('unhandledRejection', (e) => server.tasks.failed('unhandled rejection', e));
  // The ratelimit mode writes nothing: no dir to prepare or lock.
  if (ratelimit === null) prepareDir(server);
  // The baseline maxmemory counts from: the empty server after a full GC (src/server/memory.ts).
  // Measured before the warm-up, not after: full collections right after it cost every later
  // CL.THROTTLE ~4-5% more CPU (npm run bench's A/B: V8 collects as old what the warm-up just
  // compiled), and the figure is the smaller one, without the warm-up's scratch state.
  const startupBytes = await server.memory.measureStartup();
  const tooSmall = server.memory.refusal(config.int('maxmemory'));
  if (tooSmall !== null) fail(tooSmall);
  log.verbose(`used_memory_startup ${startupBytes} bytes (after a full GC)`);
  // Before the port opens: the first clients then meet optimized code (src/server/warmup.ts).
  if (config.bool('warmup')) {
    const started = performance.now();
    try {
      const warm = await warmUp(server, WARMUP_ROUNDS);
      const journal = warm.journalRecords > 0 ? ` (${warm.journalRecords} journal records encoded, none written)` : '';
      log.verbose(`warm-up done in ${(performance.now() - started).toFixed(0)} ms${journal}`);
    } catch (e) {
      // Only an optimization: a failure is logged and the start goes on.
      log.warning(`warm-up failed, starting without it: ${(e as Error).message}`);
    }
  }
  try {
    await server.start();
  } catch (e) {
    fail((e as Error).message);
  }
  if (rls !== null) {
    try {
      await rls.start();
      await listenPrometheusAddr(server);
    } catch (e) {
      fail((e as Error).message);
    }
  }
  writePidfile(server);
  if (ratelimit !== null) {
    // No snapshot is read either: the state lives on the backend (or in this process, from empty).
    server.snapshots.endLoading();
  } else if (config.bool('appendonly')) {
    log.notice(`listening on port ${server.port}; loading the journal (INFO says loading:1 until it is loaded)`, { port: server.port, dir: server.journal.dirPath });
    await loadJournal(server);
  } else {
    log.notice(`listening on port ${server.port}; loading the snapshot (INFO says loading:1 until it is loaded)`, { port: server.port, file: server.snapshots.file });
    await loadSnapshot(server);
  }
  log.notice(`cellgate ${VERSION} ready to accept connections on port ${server.port}`, {
    version: VERSION,
    port: server.port,
    pid: process.pid,
    bind: config.get('bind'),
  });
}

main(process.argv.slice(2)).catch((e) => {
  startLog.fatal(`fatal: ${(e as Error).stack ?? e}`);
  process.exit(1);
});

/**
 * The rate limit service in this server: what it needs of the server (src/rls/index.ts, RlsHost).
 */
function rlsRuntime(server: Server): RlsRuntime {
  const config = server.config;
  // maxmemory, read again only when the configuration changed (CONFIG SET).
  let maxmemory = 0;
  let maxmemoryGeneration = -1;
  return new RlsRuntime({
    config, clock: server.clock, log: server.log, tasks: server.tasks,
    unavailable: () => {
      if (server.snapshots.loading) return 'LOADING Redis is loading the dataset in memory';
      if (config.generation !== maxmemoryGeneration) {
        maxmemory = config.int('maxmemory');
        maxmemoryGeneration = config.generation;
      }
      // maxmemory as for a RESP limiter call (a denyoom command): evict first, refuse if still over.
      if (maxmemory > 0 && !server.memory.beforeCommand(maxmemory)) return OOM_MESSAGE;
      return null;
    },
    commit: () => server.journal.commit(),
    accounts: {
      join: (holder) => {
        server.otherAccounts.add(holder);
        server.clientsMemory.join(holder);
      },
      set: (holder, bytes) => server.clientsMemory.set(holder, 'query', bytes),
      release: (holder) => {
        server.clientsMemory.release(holder);
        server.otherAccounts.delete(holder);
      },
    },
    onConfigSet: (hook) => server.configHooks.push(hook),
    healthReason: () => {
      const b = server.backend;
      if (b !== null) {
        // rls-health-backend first-contact: only until the backend was first reached (RedisBackend.reached).
        if (!b.usable && (!b.reached || config.get('rls-health-backend') === 'always')) return `backend unreachable (${b.state})`;
      }
      return notReadyReason(server);
    },
  }, new StoreDecider(() => server.limiterStore));
}

/**
 * `rls-prometheus-addr` ([host]:port): the metrics port's answers on one more address, where
 * envoyproxy/ratelimit's deployers point Prometheus (PROMETHEUS_ADDR, Envoy Gateway's :19001).
 */
async function listenPrometheusAddr(server: Server): Promise<void> {
  const addr = server.config.get('rls-prometheus-addr');
  if (addr === '') return;
  const colon = addr.lastIndexOf(':');
  const host = addr.slice(0, colon).replace(/^\[(.*)\]$/, '$1') || '0.0.0.0';
  const port = Number(addr.slice(colon + 1));
  try {
    await startMetrics(server, [host], port);
  } catch (e) {
    throw new Error(`rls-prometheus-addr: cannot listen on ${addr}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  server.log.notice(`Prometheus metrics also on ${addr} (rls-prometheus-addr)`, { rls_prometheus_addr: addr });
}

/**
 * `pidfile`: the process id, written once the ports are bound (as Redis), removed at exit. A pidfile
 * that cannot be written is a warning, as in Redis: the server itself is fine. Written to a new temp
 * file renamed over the path (exclusive-file.ts): a symlink planted at the pidfile's path (a shared
 * /run or /tmp) is replaced, never written through.
 */
function writePidfile(server: Server): void {
  const file = server.config.get('pidfile');
  if (file === '') return;
  try {
    replaceFileSync(file, Buffer.from(`${process.pid}\n`), 0o644, 'tmp');
  } catch (e) {
    server.log.warning(`Failed to write PID file ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, { file });
    return;
  }
  process.on('exit', () => rmSync(file, { force: true }));
}

/**
 * Creates `dir` if missing, checks that it is writable and takes its lock (held until exit), then
 * removes the temp files of saves that never finished. A directory that cannot be written (EACCES,
 * EROFS...) ends the start with its cause; a full disk (ENOSPC, EDQUOT) does not, since the snapshot
 * still loads: it is logged as a warning and reported as a failing save until one succeeds.
 */
function prepareDir(server: Server): void {
  const dir = server.config.get('dir');
  const lock = new DirLock(dir);
  let fullDisk: string | null;
  try {
    makeDirs(dir);
    fullDisk = checkWritable(dir);
    const stalePid = lock.acquire();
    if (stalePid !== null) server.log.warning(`took over the lock file ${lock.file} left by pid ${stalePid || '?'}, which is not running`, { file: lock.file });
  } catch (e) {
    if (e instanceof DirError) fail(e.message);
    throw e;
  }
  fullDisk ??= lock.withoutPid;
  if (fullDisk !== null) {
    server.log.warning(`DISK FULL: the snapshot directory '${dir}' cannot be written (${fullDisk}); starting anyway, but saves will fail until space is freed ` +
      `(INFO persistence rdb_last_bgsave_status:err, /readyz not ready)${lock.withoutPid !== null ? `; the lock file ${lock.file} holds no pid, so it does not stop a second server on this dir` : ''}`, { dir, code: fullDisk });
    server.snapshots.startedOnFullDisk(fullDisk);
  }
  process.on('exit', () => lock.release());
  try {
    const stale = server.snapshots.removeStaleTempFiles();
    if (server.config.bool('appendonly')) stale.push(...server.journal.removeStaleTempFiles());
    for (const file of stale) server.log.notice(`removed ${file}, left by a save that never finished`, { file });
  } catch (e) {
    server.log.warning(`could not look for stale temp files in '${dir}': ${(e as Error).message}`);
  }
}

/**
 * `appendonly yes` at start: the journal set named by the manifest in `dir/appenddirname` (base, then
 * every incremental file), the port already open. Without a manifest, the snapshot is loaded as
 * usual and a journal is built from it at once (unlike Redis, which would start empty and ignore the
 * snapshot: a limiter that turns the journal on must not forget its spends). A set that fails
 * validation stops the start naming the file, the offset and the problem, the files untouched
 * (snapshot-corrupt-policy refuse), or the whole folder is renamed to
 * `<appenddirname>.corrupt-<timestamp>` and the server starts empty with a new journal (move-aside).
 */
/**
 * Why a persisted file could not be read: a file refused by the regular-file reader (a FIFO, a
 * device, too large) says so itself, naming the file; an errno is named after `what`.
 */
function unreadable(e: unknown, what: string): string {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'NOT_REGULAR' || code === 'TOO_BIG') return (e as Error).message;
  return `${what}: ${code ?? (e as Error).message}`;
}

async function loadJournal(server: Server): Promise<void> {
  const dirPath = server.journal.dirPath;
  let fresh = false;
  try {
    const loaded = await server.journal.load();
    if (loaded === null) {
      fresh = true;
      server.log.notice(`no journal manifest in ${dirPath}: loading the snapshot, then creating the journal from it`, { dir: dirPath });
      await loadSnapshot(server, false);
    } else {
      server.log.notice(`journal loaded from ${loaded.manifest}: base ${loaded.baseKeys} keys, ${loaded.records} records from ${loaded.files} incremental files in ${loaded.ms.toFixed(1)} ms`, {
        manifest: loaded.manifest, base_keys: loaded.baseKeys, records: loaded.records, ms: Math.round(loaded.ms), truncated: loaded.truncated,
      });
    }
  } catch (e) {
    if (!(e instanceof JournalError || e instanceof SnapshotError)) {
      fail(`${unreadable(e, `cannot read the journal in ${dirPath}`)}; refusing to start`);
    }
    if (server.config.get('snapshot-corrupt-policy') !== 'move-aside') fail(`${e.message}; refusing to start (the files are left untouched)`);
    const aside = `${dirPath}.corrupt-${new Date().toISOString().replace(/[-:.]/g, '')}`;
    try {
      renameSync(dirPath, aside);
    } catch (e2) {
      fail(`${e.message}; and ${dirPath} cannot be moved aside to ${aside}: ${(e2 as NodeJS.ErrnoException).code ?? (e2 as Error).message}; refusing to start`);
    }
    server.snapshots.discardPartialLoad();
    server.log.warning(`CORRUPT JOURNAL: ${e.message}. The folder was moved aside to ${aside} (snapshot-corrupt-policy move-aside); starting with an EMPTY keyspace and a new journal`, {
      dir: dirPath, moved_to: aside, problem: e.problem, offset: e.offset,
    });
    fresh = true;
  }
  try {
    server.journal.begin(fresh, true);
  } catch (e) {
    fail(`cannot create the journal in ${dirPath}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}; refusing to start`);
  }
  server.snapshots.endLoading();
}

/**
 * Loads the snapshot, the port already open (INFO says loading:1 meanwhile). A snapshot that fails
 * validation stops the start, naming the file, the offset and the problem, the file untouched
 * (snapshot-corrupt-policy refuse, the default), or is renamed to `<file>.corrupt-<timestamp>` and
 * the server starts empty (move-aside): never deleted either way. A file that cannot be read at all
 * (permissions, a directory) always stops the start.
 */
async function loadSnapshot(server: Server, finish = true): Promise<void> {
  const file = server.snapshots.file;
  try {
    const loaded = await server.snapshots.load(file, finish);
    if (loaded === null) {
      server.log.notice(`no snapshot at ${file}: starting with an empty keyspace`, { file });
    } else {
      server.log.notice(`snapshot loaded from ${file}: ${loaded.loaded} keys in ${loaded.ms.toFixed(1)} ms (${loaded.expired} expired keys dropped)`, {
        file, keys: loaded.loaded, expired: loaded.expired, ms: Math.round(loaded.ms), created: new Date(loaded.summary.createdAtMs).toISOString(),
      });
    }
  } catch (e) {
    if (!(e instanceof SnapshotError)) {
      fail(`${unreadable(e, `cannot read snapshot ${file}`)}; refusing to start`);
    }
    if (server.config.get('snapshot-corrupt-policy') !== 'move-aside') fail(`${e.message}; refusing to start (the file is left untouched)`);
    const aside = `${file}.corrupt-${new Date().toISOString().replace(/[-:.]/g, '')}`;
    try {
      renameSync(file, aside);
    } catch (e2) {
      fail(`${e.message}; and it cannot be moved aside to ${aside}: ${(e2 as NodeJS.ErrnoException).code ?? (e2 as Error).message}; refusing to start`);
    }
    server.snapshots.discardPartialLoad();
    server.log.warning(`CORRUPT SNAPSHOT: ${e.message}. It was moved aside to ${aside} (snapshot-corrupt-policy move-aside); starting with an EMPTY keyspace`, {
      file, moved_to: aside, problem: e.problem, offset: e.offset,
    });
  }
}

/**
 * `check FILE`: validates a snapshot by loading it into a scratch keyspace with the server's own
 * loader (same rules, duplicate keys included), and prints what it holds. Returns the exit code.
 */
function checkSnapshot(file: string): number {
  try {
    const { summary } = new SnapshotLoad(readWholeRegularFileSync(file, SNAPSHOT_FILE), file, new Keyspace(), Date.now()).run();
    const lines = [
      `${file}: valid cellgate snapshot, format version ${summary.formatVersion}`,
      `created: ${new Date(summary.createdAtMs).toISOString()}`,
      `bytes: ${summary.bytes}`,
      `keys: ${summary.keyCount}`,
    ];
    for (const [type, n] of [...summary.perType].sort((x, y) => x[0] - y[0])) lines.push(`keys_${typeName(type)}: ${n}`);
    process.stdout.write(lines.join('\n') + '\n');
    return 0;
  } catch (e) {
    const message = e instanceof SnapshotError ? e.message : unreadable(e, `cannot read snapshot ${file}`);
    process.stderr.write(`cellgate: ${message}\n`);
    return 1;
  }
}
