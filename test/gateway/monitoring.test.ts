/**
 * examples/prometheus/alerts.yml and examples/grafana/cellgate.json against what cellgate really
 * exports: the three topologies of examples/kubernetes started from their manifests (a local sidecar,
 * a sidecar on a Redis backend, the central service with the journal and Envoy's rate limit service),
 * given traffic of each kind the panels break down by, and scraped. Every expression is parsed with
 * Prometheus's own grammar and every metric and label it names must be in those scrapes
 * (test/gateway/promql.ts). No dashboard JSON schema is published on npm (@grafana/schema has
 * TypeScript types only), so the dashboard's structure is checked here; promtool is not packaged
 * without the whole Prometheus server.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { PrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule';
import { RedisNode } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { dataOf, ROOT, workloads, type Doc } from './kube.js';
import { parseExposition, type Exposition } from './prometheus.js';
import { fromGrafana, parsePromQL, problemsOf } from './promql.js';
import { startCellgate, type RunningCellgate } from './topology.js';

const running: RunningCellgate[] = [];
let redis: RedisNode;
const scrapes: Exposition[] = [];

async function call(c: RunningCellgate, password: string, ...commands: string[][]): Promise<void> {
  const r = new Redis({ port: c.port, host: '127.0.0.1', protocol: 2, password, lazyConnect: true, maxRetriesPerRequest: 0 });
  await r.connect();
  try {
    for (const cmd of commands) await r.call(cmd[0], ...cmd.slice(1));
  } finally {
    r.disconnect();
  }
}

async function scrape(c: RunningCellgate): Promise<Exposition> {
  return parseExposition(await (await fetch(`http://127.0.0.1:${c.metricsPort}/metrics`, { signal: AbortSignal.timeout(10_000) })).text());
}

const json = (c: RunningCellgate, domain: string, value: string): Promise<Response> => fetch(`http://127.0.0.1:${c.metricsPort}/json`, {
  method: 'POST', body: JSON.stringify({ domain, descriptors: [{ entries: [{ key: 'remote_address', value }] }] }), signal: AbortSignal.timeout(10_000),
});

beforeAll(async () => {
  // A sidecar deciding locally: limiter decisions of each result, keys by algorithm.
  const [local] = workloads('sidecar-local.yaml');
  const pw = (file: string): string => dataOf(file, 'Secret', 'cellgate-auth', 'password');
  running.push(await startCellgate(local));
  await call(running[0], pw(local.file), ['CL.THROTTLE', 'k8s', '0', '1', '60'], ['CL.THROTTLE', 'k8s', '0', '1', '60'], ['RL.FIXEDWINDOW', 'k8s:f', '5', '1000']);
  // A sidecar on a Redis backend: the backend families.
  const [shared] = workloads('sidecar-shared-backend.yaml');
  const url = new URL(dataOf(shared.file, 'Secret', 'cellgate-backend', 'url'));
  redis = await RedisNode.start({ args: ['--requirepass', decodeURIComponent(url.password)] });
  running.push(await startCellgate(shared, { backend: (u) => u.replace(`@${url.host}`, `@127.0.0.1:${redis.port}`) }));
  await waitFor(async () => (await scrape(running[1])).samples.find((s) => s.name === 'cellgate_backend_up')?.value === 1, 'backend up');
  await call(running[1], pw(shared.file), ['RL.FIXEDWINDOW', 'k8s:b', '5', '1000']);
  // The central service: the journal, and Envoy's service with hits within and over a limit and an unknown domain.
  const [central] = workloads('central-statefulset.yaml');
  running.push(await startCellgate(central));
  // The clock frozen at a minute's start, so the 101 hits fall in one window of the per-minute limit.
  await call(running[2], pw(central.file), ['DEBUG', 'CLOCK', 'SET', '1800000000000'], ['CL.THROTTLE', 'central', '5', '10', '60']);
  // 100 a minute: the 101st and the 102nd are over the limit.
  for (let i = 0; i < 101; i++) await (await json(running[2], 'edge', '10.9.9.9')).arrayBuffer();
  expect((await json(running[2], 'edge', '10.9.9.9')).status).toBe(429);
  await (await json(running[2], 'not-configured', '10.9.9.9')).arrayBuffer();
  for (const c of running) scrapes.push(await scrape(c));
}, 120_000);

afterAll(async () => {
  for (const c of running) await c.close();
  await redis?.destroy();
});

describe('the scrapes the expressions are checked against', () => {
  it('hold each family the panels and alerts are about: decisions, keys, the backend, the journal, Envoy\'s service', () => {
    const names = new Set(scrapes.flatMap((s) => s.samples.map((x) => x.name)));
    for (const n of ['cellgate_limiter_decisions_total', 'cellgate_keys', 'cellgate_backend_policy_decisions_total', 'cellgate_aof_last_write_ok', 'cellgate_rls_config_loaded',
      'ratelimit_service_rate_limit_over_limit', 'ratelimit_service_rate_limit_domain_not_found', 'cellgate_rls_request_duration_seconds_bucket']) expect(names, n).toContain(n);
    expect(scrapes[2].samples.find((s) => s.name === 'cellgate_aof_enabled')?.value).toBe(1);
    expect(scrapes[2].samples.find((s) => s.name === 'ratelimit_service_rate_limit_over_limit')).toMatchObject({ labels: { domain: 'edge', key1: 'remote_address' }, value: 2 });
  });

  it('the check is not a no-op: a misspelt metric, a label the metric lacks, a syntax error are refused', () => {
    expect(problemsOf('rate(cellgate_aof_write_error_total[5m]) > 0', scrapes)).toEqual(['cellgate_aof_write_error_total is in no scrape']);
    expect(problemsOf('cellgate_aof_last_write_ok{domain="edge"} == 0', scrapes)).toEqual(['cellgate_aof_last_write_ok has no label domain']);
    expect(problemsOf('sum by (policy) (cellgate_aof_buffer_bytes)', scrapes)).toEqual(['no metric of the expression has the label policy it groups by']);
    expect(() => problemsOf('sum(rate(cellgate_aof_records_total[5m])', scrapes)).toThrow(/syntax error/);
    expect(problemsOf('up{job="cellgate", pod=~".+"} == 0', scrapes)).toEqual([]);
  });
});

describe('examples/prometheus/alerts.yml', () => {
  const rules = parseYaml(readFileSync(join(ROOT, 'examples/prometheus/alerts.yml'), 'utf8')) as { groups: { name: string; rules: Doc[] }[] };

  it('rule groups whose every expression names metrics and labels of a real scrape', () => {
    expect(Object.keys(rules)).toEqual(['groups']);
    const names = new Set<string>();
    for (const g of rules.groups) {
      expect(g.name).toMatch(/^[a-z-]+$/);
      for (const r of g.rules) {
        expect(Object.keys(r).sort()).toEqual(['alert', 'annotations', 'expr', 'for', 'labels']);
        expect(r.alert).toMatch(/^[A-Z][A-Za-z]+$/);
        expect(names.has(r.alert)).toBe(false);
        names.add(r.alert);
        expect(r.for).toMatch(/^\d+[smh]$/);
        expect(['critical', 'warning', 'info']).toContain(r.labels.severity);
        expect(r.annotations.summary).toMatch(/\S/);
        expect(problemsOf(r.expr, scrapes), r.alert).toEqual([]);
      }
    }
  });

  it('wrapped in a PrometheusRule as docs/deploy.md shows, it validates against the Prometheus Operator\'s schema', () => {
    const rule = { apiVersion: 'monitoring.coreos.com/v1', kind: 'PrometheusRule', metadata: { name: 'cellgate' }, spec: rules };
    expect(() => new PrometheusRule(rule).validate()).not.toThrow();
    const wrongFor: Doc = { ...rule, spec: { groups: [{ name: 'x', rules: [{ alert: 'X', expr: 'up', for: 5 }] }] } };
    expect(() => new PrometheusRule(wrongFor).validate()).toThrow(/for/);
    expect(readFileSync(join(ROOT, 'docs/deploy.md'), 'utf8')).toContain('kind: "PrometheusRule"');
  });

  it('alerts on the process, the journal, Envoy\'s service and the backend\'s policy answers', () => {
    const byName = new Map(rules.groups.flatMap((g) => g.rules.map((r) => [r.alert as string, r.expr as string])));
    const metricsOf = (alert: string): string[] => parsePromQL(byName.get(alert)!).metrics;
    expect(metricsOf('CellgateDown')).toEqual(['up']);
    expect(metricsOf('CellgateAbsent')).toEqual(['up']);
    const all = [...byName.keys()].flatMap(metricsOf);
    for (const needed of ['cellgate_aof_last_write_ok', 'cellgate_aof_last_bgrewrite_ok', 'cellgate_aof_delayed_fsync_total', 'cellgate_rls_config_loaded', 'ratelimit_service_config_load_error',
      'ratelimit_service_should_rate_limit_error', 'ratelimit_service_rate_limit_domain_not_found', 'cellgate_rls_refused_connections_total', 'cellgate_rls_request_duration_seconds_bucket',
      'cellgate_backend_up', 'cellgate_backend_policy_decisions_total', 'cellgate_backend_timeouts_total', 'cellgate_backend_overflows_total']) expect(all, needed).toContain(needed);
  });
});

describe('examples/grafana/cellgate.json', () => {
  const dash = JSON.parse(readFileSync(join(ROOT, 'examples/grafana/cellgate.json'), 'utf8'));

  it('a dashboard whose panels query metrics and labels of a real scrape, laid out on the 24-column grid', () => {
    expect(dash).toMatchObject({ title: expect.any(String), uid: 'cellgate', schemaVersion: expect.any(Number), panels: expect.any(Array) });
    expect(dash.templating.list.map((v: Doc) => v.name)).toEqual(['datasource', 'job', 'instance']);
    for (const v of dash.templating.list.filter((x: Doc) => x.type === 'query')) {
      const m = /^label_values\((.+), (\w+)\)$/.exec(v.query.query);
      expect(m, v.name).not.toBeNull();
      expect(problemsOf(m![1], scrapes), v.name).toEqual([]);
    }
    const ids = new Set<number>();
    for (const p of dash.panels) {
      expect(ids.has(p.id), `panel id ${p.id} unique`).toBe(false);
      ids.add(p.id);
      expect(['timeseries', 'stat', 'gauge', 'table', 'bargauge', 'row']).toContain(p.type);
      expect(p.title).toMatch(/\S/);
      const { x, y, w, h } = p.gridPos;
      for (const n of [x, y, w, h]) expect(Number.isInteger(n) && n >= 0).toBe(true);
      expect(x + w, p.title).toBeLessThanOrEqual(24);
      if (p.type === 'row') {
        expect({ x, w, h }, p.title).toEqual({ x: 0, w: 24, h: 1 });
        continue;
      }
      expect(p.datasource).toEqual({ type: 'prometheus', uid: '${datasource}' });
      expect(p.targets.length, p.title).toBeGreaterThan(0);
      expect(new Set(p.targets.map((t: Doc) => t.refId)).size).toBe(p.targets.length);
      for (const t of p.targets) expect(problemsOf(fromGrafana(t.expr), scrapes), `${p.title} ${t.refId}`).toEqual([]);
    }
  });

  it('no two panels overlap', () => {
    const cells = new Set<string>();
    for (const p of dash.panels) {
      for (let x = p.gridPos.x; x < p.gridPos.x + p.gridPos.w; x++) {
        for (let y = p.gridPos.y; y < p.gridPos.y + p.gridPos.h; y++) {
          expect(cells.has(`${x},${y}`), `${p.title} at ${x},${y}`).toBe(false);
          cells.add(`${x},${y}`);
        }
      }
    }
  });

  it('has panels for decisions, latency, keys, memory, snapshots, the backend and its policy answers, the journal and Envoy\'s service', () => {
    const all = dash.panels.flatMap((p: Doc) => (p.targets ?? []).map((t: Doc) => t.expr)).join('\n');
    for (const needed of ['cellgate_limiter_decisions_total', 'histogram_quantile(0.99', 'cellgate_command_duration_seconds_bucket', 'cellgate_keys', 'cellgate_memory_used_bytes', 'cellgate_snapshot_last_save_timestamp_seconds', 'cellgate_loading',
      'cellgate_backend_up', 'cellgate_backend_calls_total', 'cellgate_backend_errors_total', 'cellgate_backend_timeouts_total', 'cellgate_backend_policy_decisions_total', 'cellgate_backend_cache_hits_total',
      'cellgate_aof_enabled', 'cellgate_aof_last_write_ok', 'cellgate_aof_last_bgrewrite_ok', 'cellgate_aof_current_size_bytes', 'cellgate_aof_write_errors_total', 'cellgate_aof_delayed_fsync_total',
      'cellgate_rls_config_loaded', 'cellgate_rls_request_duration_seconds_bucket', 'cellgate_rls_request_duration_seconds_count', 'ratelimit_service_rate_limit_over_limit', 'ratelimit_service_should_rate_limit_error',
      'cellgate_rls_refused_connections_total', 'ratelimit_service_rate_limit_domain_not_found']) {
      expect(all, needed).toContain(needed);
    }
  });
});
