/**
 * The deployment examples, checked against their schemas and against a real cellgate:
 * - examples/kubernetes/*.yaml validate against the Kubernetes API's OpenAPI schemas. The validator is
 *   `kubernetes-models` (tommy351/kubernetes-models-ts, a dev dependency): it ships the schemas of
 *   every built-in kind compiled to ajv validators, offline (no cluster, no download), is generated
 *   from a recent Kubernetes release (it knows the native-sidecar `restartPolicy` of init containers)
 *   and is kept up to date. Version 4 (5 needs Node 22; the project supports Node 20). Its schemas accept unknown fields (as the API server does without
 *   field validation), so the recipe's own checks below name the fields that matter.
 * - The sidecar's arguments and environment start a real cellgate whose /healthz and /readyz answer,
 *   and the manifests' own probe commands (exec, on loopback) pass against it and fail against a port
 *   that answers 503 or nothing.
 * - examples/grafana/cellgate.json: no dashboard JSON schema is published on npm (@grafana/schema has
 *   TypeScript types only), so its structure is checked here, and every metric and label its PromQL
 *   names must be in a real scrape. examples/prometheus/alerts.yml the same way (promtool is not
 *   packaged without the whole Prometheus server).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { Redis } from 'ioredis';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { freePort, startServer, type RunningServer } from '../helpers/server.js';
import { parseExposition, type Exposition } from './prometheus.js';
import { RedisNode } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const K8S_DIR = join(ROOT, 'examples/kubernetes');

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Doc = any;
interface Validatable { validate(): void }
const KINDS: Record<string, new (data: Doc) => Validatable> = {
  'apps/v1 Deployment': Deployment,
  'apps/v1 StatefulSet': StatefulSet,
  'v1 Secret': Secret,
  'v1 Service': Service,
};

function manifests(): { file: string; doc: Doc }[] {
  const out: { file: string; doc: Doc }[] = [];
  for (const file of readdirSync(K8S_DIR).filter((f) => f.endsWith('.yaml'))) {
    for (const d of parseAllDocuments(readFileSync(join(K8S_DIR, file), 'utf8'))) {
      expect(d.errors, file).toEqual([]);
      out.push({ file, doc: d.toJS() });
    }
  }
  return out;
}

function validate(doc: Doc): void {
  const Kind = KINDS[`${doc.apiVersion} ${doc.kind}`];
  if (Kind === undefined) throw new Error(`no schema registered for ${doc.apiVersion} ${doc.kind}`);
  new Kind(doc).validate();
}

function sidecarDeployment(): Doc {
  return manifests().find((m) => m.doc.kind === 'Deployment')!.doc;
}

/** The cellgate container of every workload (the sidecar and the StatefulSet's). */
function cellgateContainers(): { file: string; container: Doc }[] {
  return manifests()
    .filter((m) => m.doc.kind === 'Deployment' || m.doc.kind === 'StatefulSet')
    .map((m) => {
      const pod = m.doc.spec.template.spec;
      return { file: m.file, container: [...(pod.initContainers ?? []), ...pod.containers].find((c: Doc) => c.name === 'cellgate') };
    });
}

/**
 * The environment as the kubelet gives it: `status.podIP` from the downward API as `podIp`, and
 * `$(NAME)` in a value replaced by an earlier variable's value.
 */
function kubeletEnv(container: Doc, podIp: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of container.env) {
    if (e.valueFrom?.fieldRef?.fieldPath === 'status.podIP') env[e.name] = podIp;
    else if (e.value !== undefined) env[e.name] = String(e.value).replace(/\$\((\w+)\)/g, (whole, name: string) => env[name] ?? whole);
  }
  return env;
}

/**
 * Runs an exec probe's command with the metrics port moved to `port`; its exit status (1 for a
 * status line other than 200 or no connection, above 128 when `read -t` gave up waiting).
 * Asynchronously: the port may be served by this process.
 */
function runProbe(command: string[], port: number): Promise<number | null> {
  const moved = command.map((a) => a.replace('/dev/tcp/127.0.0.1/9121', `/dev/tcp/127.0.0.1/${port}`));
  return new Promise((resolve) => {
    const child = spawn(moved[0], moved.slice(1), { stdio: 'ignore', timeout: 10_000 });
    child.on('exit', (status) => resolve(status));
  });
}

/** Metric names a PromQL expression uses: identifiers that are not functions, keywords or labels. */
const PROMQL_WORDS = new Set(['sum', 'by', 'rate', 'histogram_quantile', 'time', 'and', 'or', 'unless', 'without', 'avg', 'max', 'min', 'count', 'irate', 'increase', 'le', 'on', 'ignoring', 'bool']);
const PROMETHEUS_OWN = new Set(['up']);

function metricsIn(expr: string): string[] {
  const stripped = expr.replace(/"[^"]*"/g, '""').replace(/\{[^}]*\}/g, '{}').replace(/\[[^\]]*\]/g, '[]').replace(/\b(by|without|on|ignoring)\s*\([^)]*\)/g, '');
  return [...new Set((stripped.match(/[a-zA-Z_:][a-zA-Z0-9_:]*/g) ?? []).filter((w) => !PROMQL_WORDS.has(w) && !/^\$/.test(w)))];
}

/** Label names an expression filters or groups on. */
function labelsIn(expr: string): string[] {
  const names: string[] = [];
  for (const m of expr.matchAll(/\{([^}]*)\}/g)) for (const l of m[1].matchAll(/([a-zA-Z_]\w*)\s*(=~|!=|!~|=)/g)) names.push(l[1]);
  for (const m of expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)) names.push(...m[1].split(',').map((s) => s.trim()).filter(Boolean));
  return names;
}

function balanced(expr: string): boolean {
  let depth = 0;
  for (const c of expr) {
    if ('({['.includes(c)) depth++;
    if (')}]'.includes(c)) depth--;
    if (depth < 0) return false;
  }
  return depth === 0;
}

/** Checks every metric and label an expression names against a real scrape. */
function checkExpr(expr: string, scrape: Exposition, where: string): void {
  expect(balanced(expr), `${where}: brackets`).toBe(true);
  const used = metricsIn(expr);
  expect(used.length, `${where}: names a metric`).toBeGreaterThan(0);
  const labels = new Set(['job', 'instance']);
  for (const name of used) {
    if (PROMETHEUS_OWN.has(name)) continue;
    const samples = scrape.samples.filter((s) => s.name === name);
    expect(samples.length, `${where}: ${name} is exported by cellgate`).toBeGreaterThan(0);
    for (const s of samples) for (const l of Object.keys(s.labels)) labels.add(l);
  }
  for (const l of labelsIn(expr)) expect(labels.has(l), `${where}: label ${l} on ${used.join(', ')}`).toBe(true);
}

describe('image tags', () => {
  it("every cellgate image an example names is tagged with the package's version", () => {
    const version = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
    const files = ['examples/docker-compose.yml', 'examples/replicas/docker-compose.yml', ...readdirSync(K8S_DIR).filter((f) => f.endsWith('.yaml')).map((f) => `examples/kubernetes/${f}`)];
    const images = files.flatMap((f) => [...readFileSync(join(ROOT, f), 'utf8').matchAll(/image:\s*"?(cellgate[\w-]*):([\w.-]+)/g)].map((m) => `${f} ${m[1]}:${m[2]}`));
    expect(images.length).toBeGreaterThanOrEqual(4);
    for (const image of images) expect(image).toMatch(new RegExp(`:${version.replace(/\./g, '\\.')}$`));
  });
});

describe('examples/kubernetes', () => {
  it('every manifest validates against the Kubernetes API schema (kubernetes-models)', () => {
    const all = manifests();
    expect(all.map((m) => `${m.file} ${m.doc.kind}`).sort()).toEqual([
      'cellgate-sidecar.yaml Deployment', 'cellgate-sidecar.yaml Secret', 'cellgate-sidecar.yaml Service',
      'pvc-statefulset.yaml Service', 'pvc-statefulset.yaml StatefulSet',
    ]);
    for (const { file, doc } of all) expect(() => validate(doc), `${file} ${doc.kind}`).not.toThrow();
  });

  it('the validator is not a no-op: a wrong type or a missing required field is refused', () => {
    const bad = structuredClone(sidecarDeployment());
    bad.spec.template.spec.initContainers[0].ports[0].containerPort = '6379';
    expect(() => validate(bad)).toThrow(/containerPort must be integer/);
    const noImage = structuredClone(sidecarDeployment());
    delete noImage.spec.selector;
    expect(() => validate(noImage)).toThrow(/selector/);
  });

  it('cellgate is a native sidecar probed on /healthz and /readyz, with its password from the Secret through requirepass-file', () => {
    const all = manifests();
    const pod = sidecarDeployment().spec.template.spec;
    const sidecar = pod.initContainers.find((c: Doc) => c.name === 'cellgate');
    expect(sidecar.restartPolicy).toBe('Always');
    const metricsPort = sidecar.ports.find((p: Doc) => p.name === 'metrics').containerPort;
    expect(sidecar.args.join(' ')).toContain(`--metrics-port ${metricsPort}`);
    const env = Object.fromEntries(sidecar.env.map((e: Doc) => [e.name, e.value]));
    const mount = sidecar.volumeMounts.find((m: Doc) => env.CELLGATE_REQUIREPASS_FILE.startsWith(`${m.mountPath}/`));
    const volume = pod.volumes.find((v: Doc) => v.name === mount.name);
    const secret = all.find((m) => m.doc.kind === 'Secret')!.doc;
    expect(volume.secret.secretName).toBe(secret.metadata.name);
    expect(Object.keys(secret.stringData)).toContain(env.CELLGATE_REQUIREPASS_FILE.slice(mount.mountPath.length + 1));
    expect(pod.volumes.find((v: Doc) => v.name === 'cellgate-data').emptyDir).toBeDefined();
    // The app talks to the sidecar over loopback with the same Secret.
    const app = pod.containers.find((c: Doc) => c.name === 'app');
    expect(app.env.find((e: Doc) => e.name === 'CELLGATE_PASSWORD').valueFrom.secretKeyRef).toEqual({ name: secret.metadata.name, key: 'password' });
    // The image exposes the same metrics port.
    expect(readFileSync(join(ROOT, 'Dockerfile'), 'utf8')).toMatch(new RegExp(`^EXPOSE 6379 ${metricsPort}$`, 'm'));
  });

  it('probes ask /healthz and /readyz on loopback from inside the container (exec), where nobody outside the pod can hold the port; Prometheus scrapes the pod address', () => {
    const found = cellgateContainers();
    expect(found.map((f) => f.file).sort()).toEqual(['cellgate-sidecar.yaml', 'pvc-statefulset.yaml']);
    for (const { file, container } of found) {
      const metricsPort = container.ports.find((p: Doc) => p.name === 'metrics').containerPort;
      const probes = { startupProbe: '/healthz', livenessProbe: '/healthz', readinessProbe: '/readyz' };
      for (const [kind, path] of Object.entries(probes)) {
        const probe = container[kind];
        if (probe === undefined && kind === 'startupProbe' && file !== 'cellgate-sidecar.yaml') continue;
        expect(probe, `${file} ${kind}`).toBeDefined();
        // No httpGet or tcpSocket: those come from the node, to an address others reach too.
        expect(Object.keys(probe).filter((k) => ['httpGet', 'tcpSocket', 'grpc'].includes(k)), `${file} ${kind}`).toEqual([]);
        const script = probe.exec.command.join(' ');
        expect(probe.exec.command.slice(0, 2)).toEqual(['bash', '-c']);
        expect(script).toContain(`/dev/tcp/127.0.0.1/${metricsPort} `);
        expect(script).toContain(`GET ${path} HTTP/1.0`);
        // The kubelet's timeout leaves room for the command's own 2 s read timeout.
        expect(probe.timeoutSeconds, `${file} ${kind}`).toBeGreaterThan(2);
      }
      // The metrics port listens on loopback (the probes) and on the pod's address (Prometheus).
      const env = kubeletEnv(container, '10.1.2.3');
      expect(env.CELLGATE_METRICS_BIND, file).toBe('127.0.0.1 10.1.2.3');
      expect(container.args.join(' ')).toContain(`--metrics-port ${metricsPort}`);
    }
  });
});

describe('the sidecar configuration on a real cellgate; the dashboard and alerts against its scrape', () => {
  let server: RunningServer;
  let metricsPort: number;
  let scrape: Exposition;
  let dir: string;
  // The same sidecar on a shared Redis (--backend), for the panels and alerts about the backend.
  let redisNode: RedisNode;
  let backendServer: RunningServer;
  let backendScrape: Exposition;
  /** The scrape an expression is checked against: the backend sidecar's for the backend metrics. */
  const scrapeFor = (expr: string): Exposition => (expr.includes('cellgate_backend_') ? backendScrape : scrape);

  beforeAll(async () => {
    const sidecar = sidecarDeployment().spec.template.spec.initContainers[0];
    dir = mkdtempSync(join(tmpdir(), 'cellgate-k8s-'));
    const passwordFile = join(dir, 'password');
    writeFileSync(passwordFile, 'hunter2-from-a-secret\n');
    metricsPort = await freePort();
    // The manifest's own arguments, the metrics port moved to a free one and the addresses kept on
    // loopback (the test's network).
    // The pod address is 127.0.0.2 (a loopback address other than 127.0.0.1, as a pod's is).
    const args = (sidecar.args as string[]).map((a, i, all) => (all[i - 1] === '--metrics-port' ? String(metricsPort) : a));
    const env = kubeletEnv(sidecar, '127.0.0.2');
    server = await startServer({ args, env: { ...env, CELLGATE_REQUIREPASS_FILE: passwordFile } });
    const r = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2, password: 'hunter2-from-a-secret' });
    try {
      // One call of each kind the panels break down by, so their series exist in the scrape.
      await r.call('CL.THROTTLE', 'k8s', '0', '1', '60');
      await r.call('CL.THROTTLE', 'k8s', '0', '1', '60');
      await r.call('RL.FIXEDWINDOW', 'k8s:f', '5', '1000');
    } finally {
      r.disconnect();
    }
    scrape = parseExposition(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text());
    redisNode = await RedisNode.start();
    const backendMetricsPort = await freePort();
    backendServer = await startServer({ args: ['--backend', redisNode.url, '--metrics-port', String(backendMetricsPort)] });
    const b = new Redis({ port: backendServer.port, host: '127.0.0.1', protocol: 2 });
    try {
      // Up first: a call before the backend connection is up is answered by the policy.
      await waitFor(async () => String(await b.call('INFO', 'backend')).includes('backend_state:up'), 'backend_state up');
      await b.call('RL.FIXEDWINDOW', 'k8s:b', '5', '1000');
    } finally {
      b.disconnect();
    }
    backendScrape = parseExposition(await (await fetch(`http://127.0.0.1:${backendMetricsPort}/metrics`)).text());
  }, 60_000);
  afterAll(async () => {
    await backendServer?.stop();
    await redisNode?.destroy();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('starts with the manifest arguments and the password file; the probes answer 200', async () => {
    expect((await fetch(`http://127.0.0.1:${metricsPort}/healthz`)).status).toBe(200);
    expect((await fetch(`http://127.0.0.1:${metricsPort}/readyz`)).status).toBe(200);
    // Prometheus's way in: the pod address (127.0.0.2 here).
    expect((await fetch(`http://127.0.0.2:${metricsPort}/metrics`)).status).toBe(200);
    const noAuth = new Redis({ port: server.port, host: '127.0.0.1', protocol: 2, lazyConnect: true, maxRetriesPerRequest: 0, enableReadyCheck: false });
    try {
      await noAuth.connect();
      await expect(noAuth.call('CL.THROTTLE', 'x', '1', '1', '1')).rejects.toThrow(/NOAUTH/);
    } finally {
      noAuth.disconnect();
    }
  });

  it('with a backend, cellgate_keys is not exported (the keys are in Redis) and the backend families are', () => {
    expect(scrape.samples.some((s) => s.name === 'cellgate_keys')).toBe(true);
    expect(backendScrape.samples.some((s) => s.name === 'cellgate_keys')).toBe(false);
    expect(backendScrape.samples.find((s) => s.name === 'cellgate_backend_up')?.value).toBe(1);
  });

  it('the manifests\' probe commands pass against it, and fail against a port that answers 503 or nothing', async () => {
    const sidecar = sidecarDeployment().spec.template.spec.initContainers[0];
    for (const kind of ['startupProbe', 'livenessProbe', 'readinessProbe']) expect(await runProbe(sidecar[kind].exec.command, metricsPort), kind).toBe(0);
    const unavailable = http.createServer((_req, res) => res.writeHead(503).end('not ready: loading the snapshot\n'));
    await new Promise<void>((resolve) => unavailable.listen(0, '127.0.0.1', resolve));
    try {
      const port = (unavailable.address() as AddressInfo).port;
      // Failed for the answer (503: exit 1), not for want of one (read's timeout: above 128).
      for (const kind of ['livenessProbe', 'readinessProbe']) expect(await runProbe(sidecar[kind].exec.command, port), kind).toBe(1);
    } finally {
      await new Promise((resolve) => unavailable.close(resolve));
    }
    expect(await runProbe(sidecar.livenessProbe.exec.command, await freePort())).toBe(1);
  });

  it('examples/grafana/cellgate.json: a dashboard whose panels query metrics and labels cellgate exports', () => {
    const dash = JSON.parse(readFileSync(join(ROOT, 'examples/grafana/cellgate.json'), 'utf8'));
    expect(dash).toMatchObject({ title: expect.any(String), uid: 'cellgate', schemaVersion: expect.any(Number), panels: expect.any(Array) });
    expect(dash.templating.list.map((v: Doc) => v.name)).toEqual(['datasource', 'job', 'instance']);
    const ids = new Set<number>();
    const exprs: string[] = [];
    for (const p of dash.panels) {
      expect(ids.has(p.id), `panel id ${p.id} unique`).toBe(false);
      ids.add(p.id);
      expect(['timeseries', 'stat', 'gauge', 'table', 'bargauge']).toContain(p.type);
      expect(p.title).toMatch(/\S/);
      const { x, y, w, h } = p.gridPos;
      for (const n of [x, y, w, h]) expect(Number.isInteger(n) && n >= 0).toBe(true);
      expect(x + w, p.title).toBeLessThanOrEqual(24);
      expect(p.datasource).toEqual({ type: 'prometheus', uid: '${datasource}' });
      expect(p.targets.length, p.title).toBeGreaterThan(0);
      expect(new Set(p.targets.map((t: Doc) => t.refId)).size).toBe(p.targets.length);
      for (const t of p.targets) {
        checkExpr(t.expr, scrapeFor(t.expr), `${p.title} ${t.refId}`);
        exprs.push(t.expr);
      }
    }
    const all = exprs.join('\n');
    // What the dashboard is for: decisions per command and result, latency quantiles from the
    // histogram, keys, memory, snapshot age, the backend state.
    for (const needed of ['cellgate_limiter_decisions_total', 'histogram_quantile(0.99', 'cellgate_command_duration_seconds_bucket', 'cellgate_keys', 'cellgate_memory_used_bytes', 'cellgate_snapshot_last_save_timestamp_seconds', 'cellgate_loading',
      'cellgate_backend_up', 'cellgate_backend_calls_total', 'cellgate_backend_errors_total', 'cellgate_backend_timeouts_total', 'cellgate_backend_policy_decisions_total', 'cellgate_backend_cache_hits_total']) {
      expect(all).toContain(needed);
    }
  });

  it('examples/prometheus/alerts.yml: rule groups whose expressions name metrics cellgate exports', () => {
    const rules = parseYaml(readFileSync(join(ROOT, 'examples/prometheus/alerts.yml'), 'utf8'));
    expect(Object.keys(rules)).toEqual(['groups']);
    const names = new Set<string>();
    const exprs: string[] = [];
    for (const g of rules.groups) {
      expect(g.name).toMatch(/\S/);
      for (const r of g.rules) {
        expect(Object.keys(r).sort()).toEqual(['alert', 'annotations', 'expr', 'for', 'labels']);
        expect(r.alert).toMatch(/^[A-Z][A-Za-z]+$/);
        expect(names.has(r.alert)).toBe(false);
        names.add(r.alert);
        expect(r.for).toMatch(/^\d+[smh]$/);
        expect(['critical', 'warning', 'info']).toContain(r.labels.severity);
        expect(r.annotations.summary).toMatch(/\S/);
        checkExpr(r.expr, scrapeFor(r.expr), r.alert);
        exprs.push(r.expr);
      }
    }
    expect(names.size).toBeGreaterThanOrEqual(5);
    // The shared backend's health is alerted on too.
    for (const needed of ['cellgate_backend_up', 'cellgate_backend_policy_decisions_total', 'cellgate_backend_timeouts_total']) expect(exprs.join('\n')).toContain(needed);
  });
});
