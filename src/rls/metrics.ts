/**
 * The rate limit service's families in the Prometheus text format, named as envoyproxy/ratelimit's
 * statsd-exporter mapping names them, plus cellgate's own (connections, configuration loads, xDS).
 *
 * Produced in parts (a generator), so that the metrics port sends a large exposition in slices and
 * serves other work between them (src/server/metrics-stream.ts): the per-limit families are cut
 * every SERIES_PER_PART series. Their labels are bounded in count and bytes where they are made
 * (RlsStats in service.ts).
 */
import { DURATION_BOUNDS_US } from '../server/stats.js';
import type { RefusalReason } from './config-dir.js';
import type { RlsGrpcServer } from './grpc.js';
import { grpcMetricsText } from './grpc-report.js';
import { MAX_STATS_TEXT_BYTES, OVERFLOW_STATS_KEY, type LimitStats, type RlsService } from './service.js';
import type { XdsSource } from './xds/source.js';

/** Series per part of a per-limit family: a part is some tens of KB of text. */
const SERIES_PER_PART = 500;

/** What the families are read from (RlsRuntime). */
export interface RlsMetricsSource {
  readonly service: RlsService;
  readonly grpc: RlsGrpcServer | null;
  readonly xds: XdsSource | null;
  readonly isLoading: boolean;
  readonly lastLoadOk: boolean;
  readonly refusals: Map<RefusalReason, number>;
}

export function* rlsMetricsParts(src: RlsMetricsSource): Generator<string> {
  const s = src.service.stats;
  // The keys as they are at the start of the scrape: series made while it is sent join the next one.
  const perKey = [...s.perKey];
  function* fam(name: string, help: string, pick: (v: LimitStats) => number): Generator<string> {
    let out = `# HELP ${name} ${help}\n# TYPE ${name} counter\n`;
    for (let i = 0; i < perKey.length; i++) {
      const [key, v] = perKey[i];
      out += `${name}${keyLabels(key)} ${pick(v)}\n`;
      if ((i + 1) % SERIES_PER_PART === 0) {
        yield out;
        out = '';
      }
    }
    if (out !== '') yield out;
  }
  yield* fam('ratelimit_service_rate_limit_total_hits', 'Hits counted against each limit (hits_addend summed).', (v) => v.totalHits);
  yield* fam('ratelimit_service_rate_limit_over_limit', 'Hits over each limit.', (v) => v.overLimit);
  yield* fam('ratelimit_service_rate_limit_near_limit', 'Hits above 80% of each limit.', (v) => v.nearLimit);
  yield* fam('ratelimit_service_rate_limit_within_limit', 'Hits within each limit.', (v) => v.withinLimit);
  yield* fam('ratelimit_service_rate_limit_shadow_mode', 'Hits over a shadow_mode limit, answered OK.', (v) => v.shadowMode);
  let out = '';
  const one = (name: string, help: string, value: number, type = 'counter'): void => {
    out += `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name} ${value}\n`;
  };
  one('ratelimit_service_config_load_success', 'Configurations loaded from rls-config.', s.configLoadSuccess);
  one('ratelimit_service_config_load_error', 'Configuration loads refused (the previous one stayed).', s.configLoadError);
  one('ratelimit_service_global_shadow_mode', 'Requests over a limit answered OK because of rls-shadow-mode.', s.globalShadowMode);
  out += '# HELP ratelimit_service_should_rate_limit_error ShouldRateLimit calls refused.\n# TYPE ratelimit_service_should_rate_limit_error counter\n';
  out += `ratelimit_service_should_rate_limit_error{err_type="service_error"} ${s.serviceError}\n`;
  out += '# HELP ratelimit_service_rate_limit_domain_not_found Requests for a domain no file configures.\n# TYPE ratelimit_service_rate_limit_domain_not_found counter\n';
  for (const [domain, n] of s.domainNotFound) out += `ratelimit_service_rate_limit_domain_not_found{domain="${escapeLabel(domain)}"} ${n}\n`;
  one('cellgate_rls_stats_labels_overflowed_total', `Descriptors and unknown-domain requests counted under the ${OVERFLOW_STATS_KEY} series instead of their own: past 10,000 series, a label over 1,024 bytes, or ${MAX_STATS_TEXT_BYTES} bytes of label text in all.`, s.overflowedLabels);
  one('cellgate_rls_stats_label_bytes', 'Bytes of label text the per-limit and unknown-domain series hold.', s.labelBytes, 'gauge');
  yield out;
  out = '';
  // ShouldRateLimit latency, in the command histogram's buckets.
  const h = 'cellgate_rls_request_duration_seconds';
  out += `# HELP ${h} Time to answer a ShouldRateLimit call (gRPC or /json), decoding excluded.\n# TYPE ${h} histogram\n`;
  let cumulative = 0;
  for (let i = 0; i <= DURATION_BOUNDS_US.length; i++) {
    cumulative += s.durationBuckets[i];
    const le = i < DURATION_BOUNDS_US.length ? String(DURATION_BOUNDS_US[i] / 1e6) : '+Inf';
    out += `${h}_bucket{le="${le}"} ${cumulative}\n`;
  }
  out += `${h}_sum ${s.durationSumUs / 1e6}\n${h}_count ${s.calls}\n`;
  if (src.grpc !== null) out += grpcMetricsText(src.grpc);
  if (src.xds !== null) out += src.xds.metricsText();
  out += `# HELP cellgate_rls_config_loaded Whether a rate limit configuration is in force.\n# TYPE cellgate_rls_config_loaded gauge\ncellgate_rls_config_loaded ${src.service.config === null ? 0 : 1}\n`;
  out += configLoadFamilies(src.isLoading, src.lastLoadOk, src.refusals);
  yield out;
}

/** Whether a load runs, whether the last one succeeded, and the refused loads by reason (the old configuration stayed in force). */
function configLoadFamilies(loading: boolean, lastLoadOk: boolean, refusals: Map<RefusalReason, number>): string {
  let out = '# HELP cellgate_rls_config_loading Whether rls-config is being read now (the configuration in force answers meanwhile).\n# TYPE cellgate_rls_config_loading gauge\n';
  out += `cellgate_rls_config_loading ${loading ? 1 : 0}\n`;
  out += '# HELP cellgate_rls_config_last_load_ok Whether the last read of rls-config was loaded (0: refused, the configuration before it is in force).\n# TYPE cellgate_rls_config_last_load_ok gauge\n';
  out += `cellgate_rls_config_last_load_ok ${lastLoadOk ? 1 : 0}\n`;
  out += '# HELP cellgate_rls_config_refused_total Reads of rls-config refused, by reason (not_regular, too_big, too_many_files, unreadable, invalid).\n# TYPE cellgate_rls_config_refused_total counter\n';
  for (const [reason, n] of refusals) out += `cellgate_rls_config_refused_total{reason="${reason}"} ${n}\n`;
  return out;
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/** `domain.key1_v.key2...` as the labels domain, key1, key2 (the rest of the key), as the exporter's mapping. */
function keyLabels(key: string): string {
  const parts = key.split('.');
  let labels = `domain="${escapeLabel(parts[0])}"`;
  if (parts.length > 1) labels += `,key1="${escapeLabel(parts[1])}"`;
  if (parts.length > 2) labels += `,key2="${escapeLabel(parts.slice(2).join('.'))}"`;
  return `{${labels}}`;
}
