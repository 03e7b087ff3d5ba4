/**
 * `ShouldRateLimit`, as envoyproxy/ratelimit answers it (docs/envoy.md): each descriptor of the
 * request is matched against the configuration, the limits it finds are decided (RlsDecider), and
 * the answer is OVER_LIMIT when any non-shadow limit is over. The statuses, limit_remaining,
 * duration_until_reset, the response headers and the stats follow envoyproxy/ratelimit's service
 * (src/service/ratelimit.go) and base limiter (src/limiter/base_limiter.go).
 *
 * The request and response are plain objects shaped as Envoy's v3 messages with proto field names
 * (proto-loader's keepCase), so the gRPC door (grpc.ts) and the JSON door (`POST /json`) share this.
 */
import type { Config } from '../config.js';
import { DURATION_BOUNDS_US } from '../server/stats.js';
import { type MatchedLimit, type RlsConfig, type RlsLimit, type RequestEntry } from './config.js';
import { newOutcome, type RlsCall, type RlsDecider, type RlsOutcome } from './decider.js';

export interface RateLimitRequest {
  domain: string;
  descriptors: {
    entries: RequestEntry[];
    limit?: { requests_per_unit: number; unit: string } | null;
    hits_addend?: { value: number } | null;
  }[];
  hits_addend: number;
}

export interface DescriptorStatus {
  code: 'OK' | 'OVER_LIMIT';
  current_limit: { requests_per_unit: number; unit: string; name: string } | null;
  limit_remaining: number;
  duration_until_reset: { seconds: number; nanos: number } | null;
}

export interface RateLimitResponse {
  overall_code: 'OK' | 'OVER_LIMIT';
  statuses: DescriptorStatus[];
  response_headers_to_add: { key: string; value: string }[];
}

/** A refusal of the request itself: gRPC status `code` (UNKNOWN: envoyproxy/ratelimit's service errors). */
export class RlsRequestError extends Error {
  constructor(
    readonly code: 'UNKNOWN' | 'INVALID_ARGUMENT' | 'UNAVAILABLE',
    message: string,
  ) {
    super(message);
  }
}

const MAX_UINT32 = 4294967295;
/** Request bounds (hostile input): descriptors and entries per request, bytes of one cache key. */
export const MAX_DESCRIPTORS = 256;
export const MAX_ENTRIES = 64;
export const MAX_KEY_BYTES = 8192;
/**
 * The stats keys become metric labels, so they are bounded in count and in bytes: at most
 * MAX_STATS_KEYS distinct keys, none longer than MAX_STATS_KEY_BYTES, and all of them (with the
 * unknown domains' names) at most MAX_STATS_TEXT_BYTES together. A key beyond any bound is not
 * truncated (two values would then share one series under a name that looks real) but counted under
 * the one OVERFLOW_STATS_KEY series (`domain="_overflow_"`), as OpenTelemetry's overflow attribute:
 * every hit stays counted, and the overflow series says that labels were refused. An exposition then
 * holds at most ~5 × (1 MiB + 10,000 × ~100 bytes) of these series, whatever the requests carry.
 */
export const MAX_STATS_KEYS = 10_000;
export const MAX_STATS_KEY_BYTES = 1024;
export const MAX_STATS_TEXT_BYTES = 1024 * 1024;
export const OVERFLOW_STATS_KEY = '_overflow_';
/** envoyproxy/ratelimit's NEAR_LIMIT_RATIO default. */
const NEAR_LIMIT_RATIO = 0.8;

export interface LimitStats {
  totalHits: number;
  overLimit: number;
  nearLimit: number;
  withinLimit: number;
  shadowMode: number;
}

/** The service's counters, named as envoyproxy/ratelimit's stats (metrics port: metrics.ts). */
export class RlsStats {
  readonly perKey = new Map<string, LimitStats>();
  configLoadSuccess = 0;
  configLoadError = 0;
  globalShadowMode = 0;
  serviceError = 0;
  /** Requests whose domain is not in the configuration, per domain name (bounded like perKey). */
  readonly domainNotFound = new Map<string, number>();
  /** ShouldRateLimit calls answered, and their durations (µs buckets as the command histogram). */
  calls = 0;
  readonly durationBuckets = new Float64Array(DURATION_BOUNDS_US.length + 1);
  durationSumUs = 0;

  /** Bytes of the label text kept (stats keys and unknown domains), bounded by MAX_STATS_TEXT_BYTES. */
  labelBytes = 0;
  /** Descriptors and unknown-domain requests counted under the overflow series instead of their own. */
  overflowedLabels = 0;

  /** The stats of `key` (or of the overflow series); `hit`: this is the descriptor's first look-up, count an overflow. */
  of(key: string, hit = false): LimitStats {
    let s = this.perKey.get(key);
    if (s === undefined) {
      if (!this.admit(key, this.perKey.size)) {
        key = OVERFLOW_STATS_KEY;
        if (hit) this.overflowedLabels++;
      }
      s = this.perKey.get(key);
      if (s === undefined) {
        s = { totalHits: 0, overLimit: 0, nearLimit: 0, withinLimit: 0, shadowMode: 0 };
        this.perKey.set(key, s);
      }
    }
    return s;
  }

  notFound(domain: string): void {
    if (!this.domainNotFound.has(domain) && !this.admit(domain, this.domainNotFound.size)) {
      domain = OVERFLOW_STATS_KEY;
      this.overflowedLabels++;
    }
    this.domainNotFound.set(domain, (this.domainNotFound.get(domain) ?? 0) + 1);
  }

  /** Whether a new label `text` gets a series of its own (then its bytes are counted), by the bounds above. */
  private admit(text: string, series: number): boolean {
    if (text === OVERFLOW_STATS_KEY) return true;
    // UTF-16 length first: a key of more than MAX_STATS_KEY_BYTES code units is too long in any encoding.
    const bytes = text.length > MAX_STATS_KEY_BYTES ? MAX_STATS_KEY_BYTES + 1 : Buffer.byteLength(text);
    if (series >= MAX_STATS_KEYS || bytes > MAX_STATS_KEY_BYTES || this.labelBytes + bytes > MAX_STATS_TEXT_BYTES) return false;
    this.labelBytes += bytes;
    return true;
  }

  observe(us: number): void {
    this.calls++;
    this.durationSumUs += us;
    let i = 0;
    while (i < DURATION_BOUNDS_US.length && us > DURATION_BOUNDS_US[i]) i++;
    this.durationBuckets[i]++;
  }
}

/** The settings the service reads, derived once per configuration change (Config.generation). */
interface Settings {
  globalShadowMode: boolean;
  headers: boolean;
  headerNames: [string, string, string];
  keyPrefix: string;
}

export class RlsService {
  /** The configuration in force; null until one loaded. Replaced whole by a reload. */
  config: RlsConfig | null = null;
  readonly stats = new RlsStats();
  private settingsGeneration = -1;
  private settings: Settings = { globalShadowMode: false, headers: false, headerNames: ['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset'], keyPrefix: '' };

  constructor(
    private readonly serverConfig: Config,
    private readonly decider: RlsDecider,
    private readonly nowUs: () => number,
    /** Why requests cannot be answered now (the snapshot loads, maxmemory is reached...), or null: UNAVAILABLE. */
    private readonly unavailable: () => string | null,
    /** Called after a decision, before its answer leaves: the journal's group commit (appendfsync always syncs here). */
    private readonly beforeAnswer: () => void = () => undefined,
  ) {}

  private currentSettings(): Settings {
    const c = this.serverConfig;
    if (c.generation !== this.settingsGeneration) {
      const names = c.get('rls-header-names').trim().split(/\s+/);
      this.settings = {
        globalShadowMode: c.bool('rls-shadow-mode'),
        headers: c.bool('rls-response-headers'),
        headerNames: [names[0] || 'RateLimit-Limit', names[1] || 'RateLimit-Remaining', names[2] || 'RateLimit-Reset'],
        keyPrefix: c.get('rls-key-prefix'),
      };
      this.settingsGeneration = c.generation;
    }
    return this.settings;
  }

  /**
   * Answers one request through `done` (an RlsRequestError for a refused request). Synchronous
   * with a synchronous decider; the configuration is read once at the start, so a reload during a
   * request never mixes two configurations.
   */
  shouldRateLimit(request: RateLimitRequest, done: (error: RlsRequestError | null, response: RateLimitResponse | null) => void): void {
    const startedUs = this.nowUs();
    const finish = (error: RlsRequestError | null, response: RateLimitResponse | null): void => {
      if (error !== null && error.code === 'UNKNOWN') this.stats.serviceError++;
      this.stats.observe(Math.max(0, this.nowUs() - startedUs));
      done(error, response);
    };
    const why = this.unavailable();
    if (why !== null) return finish(new RlsRequestError('UNAVAILABLE', why), null);
    const domain = request.domain ?? '';
    const descriptors = request.descriptors ?? [];
    if (domain === '') return finish(new RlsRequestError('UNKNOWN', 'rate limit domain must not be empty'), null);
    if (descriptors.length === 0) return finish(new RlsRequestError('UNKNOWN', 'rate limit descriptor list must not be empty'), null);
    if (descriptors.length > MAX_DESCRIPTORS) return finish(new RlsRequestError('INVALID_ARGUMENT', `at most ${MAX_DESCRIPTORS} descriptors per request`), null);
    const config = this.config;
    if (config === null) return finish(new RlsRequestError('UNKNOWN', 'no rate limit configuration loaded'), null);
    const settings = this.currentSettings();
    const n = descriptors.length;
    const matched: (MatchedLimit | null)[] = new Array(n);
    const unlimited: boolean[] = new Array(n).fill(false);
    const hits: number[] = new Array(n);
    // Made only when a matched limit replaces others (most configurations have none).
    let replacing: Set<string> | null = null;
    const domainKnown = config.domains.has(domain);
    if (!domainKnown) this.stats.notFound(domain);
    for (let i = 0; i < n; i++) {
      const d = descriptors[i];
      const entries = d.entries ?? [];
      if (entries.length > MAX_ENTRIES) return finish(new RlsRequestError('INVALID_ARGUMENT', `at most ${MAX_ENTRIES} entries per descriptor`), null);
      const override = d.limit !== null && d.limit !== undefined ? { requestsPerUnit: d.limit.requests_per_unit >>> 0, unit: String(d.limit.unit) } : null;
      let m = domainKnown ? config.getLimit(domain, entries, override) : null;
      if (m !== null) {
        for (const r of m.limit.replaces) (replacing ??= new Set()).add(r);
        if (m.limit.unlimited) {
          unlimited[i] = true;
          m = null;
        }
      }
      matched[i] = m;
      // The descriptor's own hits_addend (0 allowed: look without counting), else the request's, at least 1.
      const own = d.hits_addend;
      // At or above 2^63 (the codec's −1): beyond what envoyproxy/ratelimit can count (Redis's INCRBY
      // takes a signed 64-bit integer), so the call fails there, and here. Below, a count beyond 2^53
      // is not an exact double: limits saturate (src/limiters/), which refuses as the exact count would.
      if (own !== null && own !== undefined && Number(own.value) < 0) {
        return finish(new RlsRequestError('UNKNOWN', `descriptor ${i}: hits_addend is above 2^63-1 (9223372036854775807)`), null);
      }
      hits[i] = Math.min(Number.MAX_SAFE_INTEGER, own !== null && own !== undefined ? Number(own.value) || 0 : Math.max(1, Number(request.hits_addend) || 0));
    }
    for (let i = 0; i < n; i++) {
      const m = matched[i];
      if (m !== null && m.limit.name !== '' && replacing !== null && replacing.has(m.limit.name)) matched[i] = null;
    }
    const nowUs = this.nowUs();
    const nowSec = Math.floor(nowUs / 1e6);
    const calls: RlsCall[] = [];
    const callOf: number[] = new Array(n).fill(-1);
    for (let i = 0; i < n; i++) {
      const m = matched[i];
      if (m === null) continue;
      const key = cacheKey(settings.keyPrefix, domain, descriptors[i].entries, m, nowSec);
      if (key.length > MAX_KEY_BYTES) return finish(new RlsRequestError('INVALID_ARGUMENT', `a descriptor's cache key is longer than ${MAX_KEY_BYTES} bytes`), null);
      callOf[i] = calls.length;
      calls.push({ key, algorithm: m.limit.algorithm, limit: m.limit.requestsPerUnit, periodMs: m.limit.unitSeconds * 1000, burst: m.limit.burst, hits: hits[i], force: m.limit.allowDebt });
      this.stats.of(m.statsKey, true).totalHits += hits[i];
    }
    const outcomes: RlsOutcome[] = calls.map(newOutcome);
    this.decider.decide(calls, outcomes, nowUs, (error) => {
      if (error !== null) return finish(new RlsRequestError('UNAVAILABLE', error.message), null);
      this.beforeAnswer();
      finish(null, this.respond(settings, matched, unlimited, hits, callOf, outcomes, nowUs));
    });
  }

  private respond(
    settings: Settings, matched: (MatchedLimit | null)[], unlimited: boolean[], hits: number[], callOf: number[], outcomes: RlsOutcome[], nowUs: number,
  ): RateLimitResponse {
    const statuses: DescriptorStatus[] = [];
    let minRemaining = MAX_UINT32;
    let minimum: DescriptorStatus | null = null;
    let minimumLimit: RlsLimit | null = null;
    let failedRateLimit = 0;
    let failedQuota = 0;
    let totalQuota = 0;
    for (let i = 0; i < matched.length; i++) {
      const m = matched[i];
      if (unlimited[i]) {
        statuses.push({ code: 'OK', current_limit: null, limit_remaining: MAX_UINT32, duration_until_reset: null });
        continue;
      }
      if (m === null) {
        statuses.push({ code: 'OK', current_limit: null, limit_remaining: 0, duration_until_reset: null });
        continue;
      }
      const o = outcomes[callOf[i]];
      const status = this.status(m, o, hits[i], nowUs);
      statuses.push(status);
      if (settings.headers && status.limit_remaining < minRemaining) {
        minimum = status;
        minimumLimit = m.limit;
        minRemaining = status.limit_remaining;
      }
      const quota = m.limit.quotaMode;
      if (o.over && !m.limit.shadowMode) {
        if (quota) failedQuota++;
        else {
          failedRateLimit++;
          minimum = status;
          minimumLimit = m.limit;
          minRemaining = 0;
        }
      }
      if (quota) totalQuota++;
    }
    let overall: 'OK' | 'OVER_LIMIT' = failedRateLimit > 0 || (totalQuota > 0 && totalQuota === failedQuota) ? 'OVER_LIMIT' : 'OK';
    const headers: { key: string; value: string }[] = [];
    if (settings.headers && minimum !== null && minimumLimit !== null) {
      const unitSec = minimumLimit.unitSeconds;
      const nowSec = Math.floor(nowUs / 1e6);
      headers.push(
        { key: settings.headerNames[0], value: String(minimumLimit.requestsPerUnit) },
        { key: settings.headerNames[1], value: String(minimum.limit_remaining) },
        { key: settings.headerNames[2], value: String(unitSec - (nowSec % unitSec)) },
      );
    }
    if (overall === 'OVER_LIMIT' && settings.globalShadowMode) {
      overall = 'OK';
      this.stats.globalShadowMode++;
    }
    return { overall_code: overall, statuses, response_headers_to_add: headers };
  }

  /** One descriptor's status and stats (envoyproxy/ratelimit's GetResponseDescriptorStatus). */
  private status(m: MatchedLimit, o: RlsOutcome, hits: number, nowUs: number): DescriptorStatus {
    const l = m.limit;
    const s = this.stats.of(m.statsKey);
    const limit = l.requestsPerUnit;
    const nearThreshold = Math.floor(limit * NEAR_LIMIT_RATIO);
    let before: number;
    let after: number;
    if (l.algorithm === 'fixed_window') {
      before = o.before;
      after = o.after;
    } else {
      // The other algorithms have no count: the units in use are what is not remaining.
      after = o.over ? limit + hits : limit - o.remaining;
      before = o.over ? limit : Math.max(0, after - hits);
    }
    if (o.over) {
      if (before >= limit) s.overLimit += hits;
      else {
        s.overLimit += after - limit;
        s.nearLimit += limit - Math.max(nearThreshold, before);
      }
      if (l.shadowMode) s.shadowMode += before >= limit ? hits : after - limit;
    } else {
      if (after > nearThreshold) s.nearLimit += before >= nearThreshold ? hits : after - nearThreshold;
      s.withinLimit += hits;
    }
    let reset: { seconds: number; nanos: number };
    if (l.algorithm === 'fixed_window') {
      // envoyproxy/ratelimit's CalculateReset: to the end of the unit, in whole seconds.
      const unitSec = l.unitSeconds;
      reset = { seconds: unitSec - (Math.floor(nowUs / 1e6) % unitSec), nanos: 0 };
    } else {
      const ms = Math.max(0, o.resetAfterMs);
      reset = { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 };
    }
    return {
      code: o.over && !l.shadowMode ? 'OVER_LIMIT' : 'OK',
      current_limit: { requests_per_unit: limit, unit: l.unit, name: l.name },
      limit_remaining: o.over ? 0 : Math.min(MAX_UINT32, o.remaining),
      duration_until_reset: reset,
    };
  }
}

/**
 * envoyproxy/ratelimit's cache key: prefix + domain + `_` + each entry's `key_value_` (the
 * share_threshold pattern instead of the value where one applies) + the window's start in Unix
 * seconds. The other algorithms keep state across windows: their key ends at the last `_`. A
 * binary string of the UTF-8 bytes, as the keyspace keys it.
 */
function cacheKey(prefix: string, domain: string, entries: RequestEntry[], m: MatchedLimit, nowSec: number): string {
  let key = prefix + domain + '_';
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    const share = m.sharePatterns !== null ? m.sharePatterns[i] : '';
    key += e.key + '_' + (share !== '' ? share : e.value) + '_';
  }
  if (m.limit.algorithm === 'fixed_window') {
    const div = m.limit.unitSeconds;
    key += String(Math.floor(nowSec / div) * div);
  }
  // ASCII (the usual key) is its own binary string: the round trip through a Buffer only for the rest.
  return NOT_ASCII.test(key) ? Buffer.from(key, 'utf8').toString('latin1') : key;
}

const NOT_ASCII = /[^\x00-\x7f]/;
