/**
 * PromQL expressions (the alert rules', the dashboard's) checked against real scrapes: parsed with
 * the Prometheus project's own grammar (@prometheus-io/lezer-promql, the parser of Prometheus's web
 * UI), so a syntax error fails; every metric a selector names must be in a scrape of a real cellgate,
 * and every label it matches or groups by must be on that metric's samples or be a label the scrape
 * target carries (Prometheus's `job` and `instance`; the Prometheus Operator's `namespace`, `pod`,
 * `container`, `endpoint`, `service`).
 */
import { parser } from '@prometheus-io/lezer-promql';
import type { Exposition } from './prometheus.js';

/** Labels Prometheus (and the Prometheus Operator's discovery) put on every sample of a target. */
export const TARGET_LABELS = new Set(['job', 'instance', 'namespace', 'pod', 'container', 'endpoint', 'service']);
/** Series Prometheus makes itself for every target. */
const PROMETHEUS_SERIES = new Set(['up', 'scrape_duration_seconds', 'scrape_samples_scraped']);

export interface ParsedExpr {
  metrics: string[];
  /** Label names in matchers, with the matched value when the matcher is `=` and literal. */
  matchers: { metric: string; label: string; op: string; value: string }[];
  /** Label names in by/without/on/ignoring/group_left/group_right. */
  grouping: string[];
}

/** Grafana's interval variables replaced by a duration, so the expression is PromQL. */
export function fromGrafana(expr: string): string {
  return expr.replace(/\$__rate_interval|\$__interval|\$__range/g, '5m');
}

/** Parses an expression; throws on a syntax error, naming where. */
export function parsePromQL(expr: string): ParsedExpr {
  const tree = parser.parse(expr);
  const out: ParsedExpr = { metrics: [], matchers: [], grouping: [] };
  let metric = '';
  tree.iterate({
    enter: (node) => {
      if (node.type.isError) throw new Error(`PromQL syntax error at ${node.from}: ${JSON.stringify(expr.slice(Math.max(0, node.from - 20), node.from + 20))} in ${expr}`);
      const text = expr.slice(node.from, node.to);
      if (node.name === 'VectorSelector') metric = '';
      if (node.name === 'Identifier' && node.node.parent?.name === 'VectorSelector') {
        metric = text;
        out.metrics.push(text);
      }
      if (node.name === 'UnquotedLabelMatcher') {
        const m = /^(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"$/.exec(text);
        if (m === null) throw new Error(`unexpected matcher ${text}`);
        out.matchers.push({ metric, label: m[1], op: m[2], value: m[3] });
      }
      if (node.name === 'LabelName' && node.node.parent?.name === 'GroupingLabels') out.grouping.push(text);
    },
  });
  if (out.metrics.length === 0) throw new Error(`no metric in ${expr}`);
  return out;
}

/**
 * Checks an expression against the scrapes: returns what is wrong (empty when nothing is). A metric
 * must be in at least one scrape; its labels are those of its samples in every scrape.
 */
export function problemsOf(expr: string, scrapes: Exposition[]): string[] {
  const parsed = parsePromQL(expr);
  const problems: string[] = [];
  const labelsOf = new Map<string, Set<string>>();
  for (const name of parsed.metrics) {
    if (PROMETHEUS_SERIES.has(name)) {
      labelsOf.set(name, new Set(TARGET_LABELS));
      continue;
    }
    const samples = scrapes.flatMap((s) => s.samples.filter((x) => x.name === name));
    if (samples.length === 0) problems.push(`${name} is in no scrape`);
    labelsOf.set(name, new Set([...TARGET_LABELS, ...samples.flatMap((s) => Object.keys(s.labels))]));
  }
  for (const m of parsed.matchers) {
    if (m.metric !== '' && !labelsOf.get(m.metric)?.has(m.label)) problems.push(`${m.metric} has no label ${m.label}`);
  }
  const anyLabels = new Set([...labelsOf.values()].flatMap((s) => [...s]));
  for (const l of parsed.grouping) if (!anyLabels.has(l)) problems.push(`no metric of the expression has the label ${l} it groups by`);
  return problems;
}
