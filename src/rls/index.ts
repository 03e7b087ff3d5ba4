/**
 * The rate limit service in the running server (docs/envoy.md): its configuration (loaded at
 * start, again when `rls-config` changes and on SIGHUP; or pushed by the xDS server of
 * `rls-xds-server`, src/rls/xds/, never both), the gRPC listeners of `rls-port`, and what
 * it adds to the metrics port (its counters, its readiness, `POST /json`, and envoyproxy/ratelimit's
 * `/healthcheck` and `/rlconfig`: health-http.ts).
 *
 * The directory is watched through its path, not its inode (src/files/path-watcher.ts): a symlink
 * swapped to another directory (`mv -Tf`, the layout envoyproxy/ratelimit's runtime watches with
 * RUNTIME_WATCH_ROOT), a directory deleted and created again and a ConfigMap's `..data` swap all
 * reload. A reload reads off the event loop (config-dir.ts); the configuration in force answers
 * until the new one is complete, and reloads asked for meanwhile run once after it.
 *
 * It sees the server through RlsHost only, so the server's wiring is a few lines (src/main.ts).
 */
import { lstat } from 'node:fs/promises';
import type http from 'node:http';
import { dirname, resolve } from 'node:path';
import type { Config } from '../config.js';
import { PathWatcher } from '../files/path-watcher.js';
import type { Logger } from '../log.js';
import { loadRlsConfigDir, RlsConfigLoadError, type RefusalReason } from './config-dir.js';
import type { RlsDecider } from './decider.js';
import { answerHealthHttp } from './health-http.js';
import { RlsGrpcServer, type RlsAccounts } from './grpc.js';
import { grpcInfoRows } from './grpc-report.js';
import { RLS_TLS_SETTINGS } from './grpc-tls.js';
import { JsonRequestError, parseJsonRequest, responseJson } from './json.js';
import { rlsMetricsParts } from './metrics.js';
import { RlsService } from './service.js';
import { xdsRefusal, xdsWanted } from './xds/settings.js';
import type { XdsSource } from './xds/source.js';

/** What the service needs of the server. */
export interface RlsHost {
  readonly config: Config;
  readonly clock: { nowUs(): number };
  readonly log: Logger;
  readonly tasks: { failed(name: string, e: unknown): void; guard(name: string, task: () => void): () => void };
  /** Why limiter calls cannot be answered now (the snapshot loads, maxmemory is reached), or null. */
  unavailable(): string | null;
  /** Writes the journal's records of the decisions made so far (before their answers leave). */
  commit(): void;
  /** Why the server cannot decide now (not ready, the backend unreachable), or null: envoyproxy/ratelimit's /healthcheck. */
  healthReason(): string | null;
  /** The server's memory accounts: each gRPC connection has one, as each RESP client. */
  readonly accounts: RlsAccounts;
  /** Adds a word on CONFIG SET: a check before anything changes (a refusal, or null), then the change. */
  onConfigSet(hook: { check(names: readonly string[], get: (name: string) => string): string | null; applied(names: readonly string[]): void }): void;
}

/** Quiet time after a change in the directory before it is read (an editor or a ConfigMap update writes in steps). */
export const RELOAD_DEBOUNCE_MS = 200;
/** A look at the directory every this many ms besides the change events (a watch that could not be made, a swap above it). */
export const RELOAD_POLL_MS = 2000;
/** Largest `POST /json` body read; a larger one is answered 413 and the connection closed. */
const MAX_JSON_BODY_BYTES = 1024 * 1024;

export class RlsRuntime {
  readonly service: RlsService;
  grpc: RlsGrpcServer | null = null;
  private watcher: PathWatcher | null = null;
  readonly dir: string;
  /** The configuration's source when it is an xDS server instead of rls-config (src/rls/xds/). */
  xds: XdsSource | null = null;
  /** The load running now, and the reason of one asked for while it runs (run once after it). */
  private loading: Promise<void> | null = null;
  private loadAgain: string | null = null;
  private prepared: Promise<void> | null = null;
  /** Loads refused, per reason (cellgate_rls_config_refused_total). */
  readonly refusals = new Map<RefusalReason, number>();
  /** Whether the last load succeeded (a refused one leaves the configuration before it in force). */
  lastLoadOk = true;

  constructor(
    private readonly host: RlsHost,
    decider: RlsDecider,
  ) {
    this.dir = host.config.get('rls-config');
    this.service = new RlsService(host.config, decider, () => host.clock.nowUs(), () => host.unavailable(), () => host.commit());
  }

  /** Whether the configuration asks for the service at all. */
  static wanted(config: Config): boolean {
    return config.int('rls-port') > 0 || config.get('rls-config') !== '' || xdsWanted(config);
  }

  /** Start-up: a problem that should stop the start, or null. */
  static refusal(config: Config): string | null {
    const xds = xdsRefusal(config);
    if (xds !== null) return xds;
    // A message of the largest size allowed must be able to arrive in pieces.
    const perConnection = config.int('rls-max-unfinished-bytes-per-connection');
    if (perConnection < config.int('rls-max-message-bytes') || config.int('rls-max-unfinished-bytes') < perConnection) {
      return 'rls-max-unfinished-bytes-per-connection must be at least rls-max-message-bytes, and rls-max-unfinished-bytes at least rls-max-unfinished-bytes-per-connection';
    }
    if (config.int('rls-port') > 0 && config.get('rls-config') === '' && !xdsWanted(config)) {
      return 'rls-port is set but rls-config is not (nor rls-xds-server): name the directory of the rate limit configuration files, or the xDS server that pushes it';
    }
    return null;
  }

  /**
   * Watches the directory and begins the first load (off the event loop), so that it runs beside
   * the rest of the server's start; start() waits for it. Never rejects.
   */
  prepare(): Promise<void> {
    // An xDS source starts with the service (start()): there is no directory to read.
    if (xdsWanted(this.host.config)) return Promise.resolve();
    this.prepared ??= (async () => {
      // Watching first: a change made while the first load reads is seen, and read again after it.
      this.watcher = new PathWatcher(await watchedPaths(this.dir), () => void this.reload('file change'), {
        debounceMs: RELOAD_DEBOUNCE_MS,
        pollMs: RELOAD_POLL_MS,
        onWarning: (message) => this.host.log.warning(`rls-config: ${message}`, { dir: this.dir }),
      });
      await this.watcher.start();
      await this.reload('start');
    })();
    return this.prepared;
  }

  /** The first configuration (prepare()), then the gRPC listeners when rls-port is set. Throws when the port cannot be opened. */
  async start(): Promise<void> {
    if (xdsWanted(this.host.config)) await this.startXds();
    else await this.prepare();
    const port = this.host.config.int('rls-port');
    if (port === 0) return;
    const grpc = new RlsGrpcServer(this.host.config, this.service, {
      serving: () => this.notReadyReason() === null && this.host.unavailable() === null,
      notice: (message) => this.host.log.notice(message),
      warning: (message) => this.host.log.warning(message),
    }, this.host.accounts);
    const tlsMaterial = grpc.tlsMaterial;
    if (tlsMaterial !== null) {
      // CONFIG SET of the TLS files reaches the gRPC port: checked before the reply, in force after it.
      const touches = (names: readonly string[]): boolean => names.some((n) => RLS_TLS_SETTINGS.includes(n));
      this.host.onConfigSet({
        check: (names, get) => (touches(names) ? tlsMaterial.checkConfigSet(get) : null),
        applied: (names) => {
          if (touches(names)) tlsMaterial.applyConfigSet();
        },
      });
    }
    const bind = this.host.config.get('rls-bind').trim() || this.host.config.get('bind').trim();
    await grpc.listen(bind.split(/\s+/), port);
    this.grpc = grpc;
    this.host.log.notice(`rate limit service (gRPC) listening on port ${grpc.port}`, { rls_port: grpc.port, bind });
  }

  /** The configuration pushed by an xDS server: installed as a loaded set of files is. */
  private async startXds(): Promise<void> {
    const stats = this.service.stats;
    // Loaded only here: a server without xDS never loads the client nor its message definitions.
    const { XdsSource } = await import('./xds/source.js');
    this.xds = new XdsSource(this.host.config, {
      log: this.host.log,
      tasks: this.host.tasks,
      install: (config, from) => {
        this.service.config = config;
        stats.configLoadSuccess++;
        this.host.log.notice(`rls configuration applied: ${from}, ${config.domains.size} domain(s)`, { domains: [...config.domains.keys()], source: from });
      },
      refused: () => stats.configLoadError++,
    });
    await this.xds.start();
  }

  /**
   * Reads the directory again (off the event loop). A good set replaces the configuration at once
   * (requests in flight keep the one they started with); a refused one is logged and counted, with
   * its reason, and the configuration in force stays. A reload asked for while one runs runs once
   * after it (the files may have changed during the read). Never rejects.
   */
  reload(why: string): Promise<void> {
    if (this.xds !== null) {
      this.host.log.notice(`${why}: the rate limit configuration comes from the xDS server ${this.xds.settings.server}; nothing to reload`);
      return Promise.resolve();
    }
    if (this.loading !== null) {
      this.loadAgain = why;
      return this.loading;
    }
    this.loading = this.loadUntilSettled(why).finally(() => {
      this.loading = null;
    });
    return this.loading;
  }

  private async loadUntilSettled(why: string): Promise<void> {
    let next: string | null = why;
    while (next !== null) {
      await this.loadOnce(next);
      next = this.loadAgain;
      this.loadAgain = null;
    }
  }

  private async loadOnce(why: string): Promise<void> {
    const stats = this.service.stats;
    try {
      const { config, ignored } = await loadRlsConfigDir(this.dir, { ignoreDotfiles: this.host.config.bool('rls-config-ignore-dotfiles') });
      this.service.config = config;
      stats.configLoadSuccess++;
      this.lastLoadOk = true;
      const passedOver = ignored.length === 0 ? '' : `; not read (only *.yaml files are): ${ignored.slice(0, 10).join(', ')}${ignored.length > 10 ? ` and ${ignored.length - 10} more` : ''}`;
      this.host.log.notice(`rls-config loaded (${why}): ${config.domains.size} domain(s) from ${config.files.length} file(s) in ${this.dir}${passedOver}`, {
        dir: this.dir, domains: [...config.domains.keys()], files: config.files, reason: why, ...(ignored.length > 0 ? { ignored: ignored.slice(0, 100) } : {}),
      });
    } catch (e) {
      stats.configLoadError++;
      this.lastLoadOk = false;
      if (!(e instanceof RlsConfigLoadError)) {
        this.refusals.set('unreadable', (this.refusals.get('unreadable') ?? 0) + 1);
        this.host.tasks.failed('rls-config reload', e);
        return;
      }
      this.refusals.set(e.reason, (this.refusals.get(e.reason) ?? 0) + 1);
      const kept = this.service.config === null ? 'no configuration is loaded yet' : 'the previous configuration stays in force';
      this.host.log.warning(`rls-config not loaded (${why}): ${e.message}; ${kept}`, { dir: this.dir, error: e.message, refusal: e.reason, reason: why });
    }
  }

  /**
   * Readiness (/readyz): not until a configuration loaded, unless rls-force-start says to serve
   * without one; with rls-ready-needs-limits, not while the configuration has no domain (an empty
   * directory or xDS snapshot), whatever rls-force-start says, as envoyproxy/ratelimit's health.
   */
  notReadyReason(): string | null {
    const config = this.service.config;
    const source = this.xds !== null ? `the xDS server ${this.xds.settings.server}` : `rls-config '${this.dir}'`;
    if (this.host.config.bool('rls-ready-needs-limits') && (config === null || config.domains.size === 0)) {
      return config === null ? (this.xds?.waitingReason() ?? `no rate limit configuration loaded from ${source}`) : `the rate limit configuration from ${source} has no domain (rls-ready-needs-limits)`;
    }
    if (config !== null || this.host.config.bool('rls-force-start')) return null;
    if (this.xds !== null) return this.xds.waitingReason();
    return `no rate limit configuration loaded from ${source}`;
  }

  /** INFO's rls section: where the configuration comes from, and the xDS client's state. */
  infoRows(): [string, string | number][] {
    return [
      ['rls_config_source', this.xds !== null ? 'xds' : 'files'],
      ['rls_config_loaded', this.service.config === null ? 0 : 1],
      ['rls_config_last_load_ok', this.lastLoadOk ? 1 : 0],
      ...(this.xds?.infoRows() ?? []),
      ...(this.grpc === null ? [] : grpcInfoRows(this.grpc)),
    ];
  }

  /** Answers `POST /json`, `/healthcheck` and `/rlconfig` (true), or leaves the request to the metrics port (false). */
  handleHttp(req: http.IncomingMessage, res: http.ServerResponse): boolean {
    const path = (req.url ?? '').split('?', 1)[0];
    if (answerHealthHttp(path, res, () => this.host.healthReason(), () => this.service.config)) return true;
    if (path !== '/json') return false;
    if (req.method !== 'POST') {
      res.writeHead(405, { 'content-type': 'text/plain', allow: 'POST' }).end('Method Not Allowed\n');
      return true;
    }
    const chunks: Buffer[] = [];
    let bytes = 0;
    let done = false;
    req.on('data', (chunk: Buffer) => {
      if (done) return;
      bytes += chunk.length;
      if (bytes > MAX_JSON_BODY_BYTES) {
        done = true;
        res.writeHead(413, { 'content-type': 'text/plain', connection: 'close' }).end('Request Entity Too Large\n');
        req.socket.destroySoon();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', this.host.tasks.guard('rls /json', () => {
      if (done) return;
      done = true;
      let request;
      try {
        request = parseJsonRequest(Buffer.concat(chunks).toString('utf8'));
      } catch (e) {
        if (!(e instanceof JsonRequestError)) throw e;
        res.writeHead(400, { 'content-type': 'text/plain; charset=utf-8' }).end('Bad Request\n');
        return;
      }
      this.service.shouldRateLimit(request, (error, response) => {
        if (error !== null || response === null) {
          res.writeHead(400, { 'content-type': 'text/plain; charset=utf-8' }).end('Bad Request\n');
          return;
        }
        res.writeHead(response.overall_code === 'OVER_LIMIT' ? 429 : 200, { 'content-type': 'application/json' }).end(responseJson(response));
      });
    }));
    return true;
  }

  /** The service's families in the Prometheus text format, in parts (metrics.ts). */
  metricsParts(): Iterable<string> {
    return rlsMetricsParts(this);
  }

  /** Whether a configuration load runs now. */
  get isLoading(): boolean {
    return this.loading !== null;
  }

  close(): void {
    this.watcher?.close();
    this.xds?.close();
    this.grpc?.close();
  }
}

/**
 * The paths to watch for `dir`: itself, and each symlink on the way to it (RUNTIME_ROOT's
 * `current -> v1` above `current/ratelimit/config`), so that swapping one of them is an event,
 * not something only the periodic look finds.
 */
async function watchedPaths(dir: string): Promise<string[]> {
  const paths = [dir];
  for (let p = dirname(resolve(dir)); p !== dirname(p); p = dirname(p)) {
    try {
      if ((await lstat(p)).isSymbolicLink()) paths.push(p);
    } catch {
      // Not there (yet): the periodic look sees it appear.
    }
  }
  return paths;
}
