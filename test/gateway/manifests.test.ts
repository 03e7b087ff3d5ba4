/**
 * examples/kubernetes, one file per topology (a sidecar deciding locally; sidecars sharing a Redis
 * backend; a central cellgate service), checked as the API server would check them and for what a
 * cluster operator needs of them: every object valid against the Kubernetes schemas (and the
 * Prometheus Operator's), every Secret and ConfigMap a pod uses defined, every container hardened,
 * probes on cellgate's own health endpoints, headless Services where pods are addressed one by one,
 * a PodDisruptionBudget, a NetworkPolicy and a monitor for each workload, images a reader can build
 * and push. test/gateway/manifests-run.test.ts runs the same containers' arguments for real.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { dataOf, manifestFiles, objectsOf, ROOT, selects, validate, workloads, type Doc } from './kube.js';
import { parsePromQL } from './promql.js';

const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const FILES = manifestFiles();
/** The registry placeholder docs/deploy.md explains, and the images the repository's Dockerfiles build. */
const REGISTRY = 'registry.example.com/platform';
const BUILT_IMAGES: Record<string, string> = { cellgate: 'Dockerfile', 'cellgate-example-app': 'examples/replicas/app.Dockerfile' };

/** The job label the alert rules select on (`job="..."` matchers). */
function alertJobs(): Set<string> {
  const rules = parseYaml(readFileSync(join(ROOT, 'examples/prometheus/alerts.yml'), 'utf8')) as { groups: { rules: { expr: string }[] }[] };
  const jobs = new Set<string>();
  for (const g of rules.groups) for (const r of g.rules) for (const m of parsePromQL(r.expr).matchers) if (m.label === 'job' && m.op === '=') jobs.add(m.value);
  return jobs;
}

/** The job a monitor's scrape gets: its relabeling of `job`, else the Prometheus Operator's default. */
function monitorJob(monitor: Doc, endpoint: Doc): string {
  const relabel = (endpoint.relabelings ?? []).find((r: Doc) => r.targetLabel === 'job' && (r.action ?? 'replace') === 'replace' && (r.sourceLabels ?? []).length === 0);
  if (relabel !== undefined) return relabel.replacement;
  return monitor.kind === 'ServiceMonitor' ? '(the Service name)' : `${monitor.metadata.namespace ?? '<namespace>'}/${monitor.metadata.name}`;
}

describe('examples/kubernetes', () => {
  it('one file per topology: a sidecar deciding locally, sidecars on a shared backend, a central service', () => {
    expect(FILES).toEqual(['central-statefulset.yaml', 'sidecar-local.yaml', 'sidecar-shared-backend.yaml']);
    expect(workloads('sidecar-local.yaml').map((w) => w.object.kind)).toEqual(['Deployment']);
    expect(workloads('sidecar-shared-backend.yaml')[0].cellgate.env.map((e: Doc) => e.name)).toContain('CELLGATE_BACKEND');
    expect(workloads('central-statefulset.yaml').map((w) => w.object.kind)).toEqual(['StatefulSet']);
  });

  it('every object validates against its schema (kubernetes-models; @kubernetes-models/prometheus-operator for the monitors)', () => {
    const kinds = FILES.flatMap((f) => objectsOf(f).map((o) => `${f} ${o.kind} ${o.metadata.name}`));
    for (const f of FILES) for (const o of objectsOf(f)) expect(() => validate(o), `${f} ${o.kind} ${o.metadata.name}`).not.toThrow();
    for (const f of FILES) {
      for (const kind of ['Secret', 'Service', 'PodDisruptionBudget', 'NetworkPolicy']) expect(kinds.some((k) => k.startsWith(`${f} ${kind} `)), `${f} ${kind}`).toBe(true);
      expect(kinds.some((k) => k.startsWith(`${f} PodMonitor `) || k.startsWith(`${f} ServiceMonitor `)), `${f} monitor`).toBe(true);
    }
  });

  it('the validator is not a no-op: a wrong type or a missing required field is refused, monitors included', () => {
    const [deployment] = workloads('sidecar-local.yaml');
    const badPort = structuredClone(deployment.object);
    badPort.spec.template.spec.initContainers[0].ports[0].containerPort = '6379';
    expect(() => validate(badPort)).toThrow(/containerPort must be integer/);
    const noSelector = structuredClone(deployment.object);
    delete noSelector.spec.selector;
    expect(() => validate(noSelector)).toThrow(/selector/);
    const monitor = structuredClone(objectsOf('sidecar-local.yaml').find((o) => o.kind === 'PodMonitor'));
    monitor.spec.podMetricsEndpoints = 'metrics';
    expect(() => validate(monitor)).toThrow(/podMetricsEndpoints must be array/);
    const pdb = structuredClone(objectsOf('central-statefulset.yaml').find((o) => o.kind === 'PodDisruptionBudget'));
    pdb.spec.selector = 'cellgate';
    expect(() => validate(pdb)).toThrow(/selector must be object/);
  });

  it(`images: the repository's own, under the ${REGISTRY} placeholder docs/deploy.md explains, tagged with the package's version`, () => {
    const deployDoc = readFileSync(join(ROOT, 'docs/deploy.md'), 'utf8');
    expect(deployDoc).toContain(`${REGISTRY}/cellgate:$VERSION`);
    expect(deployDoc).toContain(`\`${REGISTRY}\` is a placeholder`);
    for (const f of FILES) {
      for (const w of workloads(f)) {
        for (const c of w.containers) {
          const m = new RegExp(`^${REGISTRY.replace(/\./g, '\\.')}/([\\w-]+):([\\w.-]+)$`).exec(c.image);
          expect(m, `${f} ${c.name}: ${c.image}`).not.toBeNull();
          expect(Object.keys(BUILT_IMAGES), `${f} ${c.name}`).toContain(m![1]);
          expect(m![2], `${f} ${c.name}`).toBe(VERSION);
        }
      }
    }
    // The compose examples name the same images, built locally (no registry).
    for (const f of ['examples/docker-compose.yml', 'examples/replicas/docker-compose.yml']) {
      for (const m of readFileSync(join(ROOT, f), 'utf8').matchAll(/image:\s*"?(cellgate[\w-]*):([\w.-]+)/g)) {
        expect(Object.keys(BUILT_IMAGES), f).toContain(m[1]);
        expect(m[2], f).toBe(VERSION);
      }
    }
  });
});

for (const file of FILES) {
  describe(`examples/kubernetes/${file}`, () => {
    const objects = objectsOf(file);
    const [workload] = workloads(file);
    const services = objects.filter((o) => o.kind === 'Service');

    it('every Secret and ConfigMap its pods use is defined in the file, with the keys they read', () => {
      const uses: string[] = [];
      for (const c of workload.containers) {
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.secretKeyRef ?? e.valueFrom?.configMapKeyRef;
          if (ref === undefined) continue;
          const kind = e.valueFrom.secretKeyRef !== undefined ? 'Secret' : 'ConfigMap';
          expect(() => dataOf(file, kind, ref.name, ref.key), `${c.name} ${e.name}`).not.toThrow();
          uses.push(`${kind} ${ref.name}`);
        }
        expect(c.envFrom, c.name).toBeUndefined();
      }
      for (const v of workload.pod.volumes ?? []) {
        if (v.secret !== undefined) uses.push(`Secret ${v.secret.secretName}`);
        if (v.configMap !== undefined) uses.push(`ConfigMap ${v.configMap.name}`);
      }
      expect(uses.length).toBeGreaterThan(0);
      for (const u of uses) expect(objects.some((o) => `${o.kind} ${o.metadata.name}` === u), u).toBe(true);
    });

    it('every container is hardened (non-root, read-only root filesystem, no privilege escalation, no capabilities, RuntimeDefault seccomp), and cellgate writes only to a volume', () => {
      expect(workload.pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000, seccompProfile: { type: 'RuntimeDefault' } });
      expect(workload.pod.automountServiceAccountToken).toBe(false);
      for (const c of workload.containers) {
        expect(c.securityContext, c.name).toEqual({
          runAsNonRoot: true, allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] }, seccompProfile: { type: 'RuntimeDefault' },
        });
        expect(c.resources?.limits?.memory, c.name).toBeDefined();
      }
      // The image's dir (/data) is a mounted emptyDir or claim: the only place cellgate writes.
      const data = workload.cellgate.volumeMounts.find((m: Doc) => m.mountPath === '/data');
      expect(data).toBeDefined();
      const volume = workload.pod.volumes?.find((v: Doc) => v.name === data.name);
      const claim = workload.object.spec.volumeClaimTemplates?.find((t: Doc) => t.metadata.name === data.name);
      expect(volume?.emptyDir ?? claim, data.name).toBeDefined();
      expect(data.readOnly).not.toBe(true);
    });

    it("cellgate's probes ask its own /healthz and /readyz on the metrics port, over loopback from inside the container", () => {
      const c = workload.cellgate;
      const metricsPort = c.ports.find((p: Doc) => p.name === 'metrics').containerPort;
      expect(c.args.join(' ')).toContain(`--metrics-port ${metricsPort}`);
      for (const [kind, path] of Object.entries({ startupProbe: '/healthz', livenessProbe: '/healthz', readinessProbe: '/readyz' })) {
        const probe = c[kind];
        expect(probe, kind).toBeDefined();
        // No httpGet or tcpSocket: those come from the node, to an address others reach too.
        expect(Object.keys(probe).filter((k) => ['httpGet', 'tcpSocket', 'grpc'].includes(k)), kind).toEqual([]);
        expect(probe.exec.command.slice(0, 2)).toEqual(['bash', '-c']);
        const script = probe.exec.command[2];
        expect(script).toContain(`/dev/tcp/127.0.0.1/${metricsPort} `);
        expect(script).toContain(`GET ${path} HTTP/1.0`);
        // The kubelet's timeout leaves room for the command's own 2 s read timeout.
        expect(probe.timeoutSeconds, kind).toBeGreaterThan(2);
      }
      // A native sidecar: started before the app, restarted on its own, stopped after it.
      if (workload.object.kind === 'Deployment') expect(workload.pod.initContainers.find((x: Doc) => x.name === 'cellgate').restartPolicy).toBe('Always');
    });

    it('a PodDisruptionBudget and a NetworkPolicy select its pods; only Prometheus reaches the metrics port; a sidecar\'s RESP port is admitted from nowhere', () => {
      const pdbs = objects.filter((o) => o.kind === 'PodDisruptionBudget' && selects(o.spec.selector, workload.podLabels));
      expect(pdbs).toHaveLength(1);
      const replicas = workload.object.spec.replicas;
      expect(pdbs[0].spec.maxUnavailable, 'maxUnavailable').toBe(replicas > 1 ? 1 : 0);
      const policies = objects.filter((o) => o.kind === 'NetworkPolicy' && selects(o.spec.podSelector, workload.podLabels));
      expect(policies).toHaveLength(1);
      expect(policies[0].spec.policyTypes).toContain('Ingress');
      const rules: Doc[] = policies[0].spec.ingress;
      const portsOf = (r: Doc): string[] => (r.ports ?? []).map((p: Doc) => String(p.port));
      for (const r of rules.filter((r) => portsOf(r).includes('metrics'))) {
        expect(portsOf(r)).toEqual(['metrics']);
        expect(r.from.map((f: Doc) => f.podSelector?.matchLabels?.['app.kubernetes.io/name'])).toEqual(['prometheus']);
      }
      expect(rules.some((r) => portsOf(r).includes('metrics'))).toBe(true);
      // Every rule names its ports (none opens the whole pod), and each port is a named port of a container.
      const named = new Set(workload.containers.flatMap((c) => (c.ports ?? []).map((p: Doc) => p.name)));
      for (const r of rules) {
        expect(portsOf(r).length).toBeGreaterThan(0);
        for (const p of portsOf(r)) expect(named, p).toContain(p);
      }
      if (workload.object.kind === 'Deployment') {
        expect(rules.flatMap(portsOf)).not.toContain('resp');
      } else {
        for (const r of rules.filter((r) => portsOf(r).includes('resp') || portsOf(r).includes('grpc'))) expect(r.from?.length, 'clients only').toBeGreaterThan(0);
      }
    });

    it('a PodMonitor or ServiceMonitor scrapes the metrics port with job="cellgate", the job the alert rules select on', () => {
      const jobs = alertJobs();
      expect([...jobs]).toEqual(['cellgate']);
      const monitors = objects.filter((o) => o.kind === 'PodMonitor' || o.kind === 'ServiceMonitor');
      expect(monitors).toHaveLength(1);
      const [monitor] = monitors;
      const endpoints: Doc[] = monitor.kind === 'PodMonitor' ? monitor.spec.podMetricsEndpoints : monitor.spec.endpoints;
      expect(endpoints).toHaveLength(1);
      expect(endpoints[0]).toMatchObject({ port: 'metrics', path: '/metrics' });
      expect(monitorJob(monitor, endpoints[0])).toBe('cellgate');
      if (monitor.kind === 'PodMonitor') {
        expect(selects(monitor.spec.selector, workload.podLabels)).toBe(true);
        expect(workload.cellgate.ports.map((p: Doc) => p.name)).toContain('metrics');
      } else {
        const service = services.find((s) => selects(monitor.spec.selector, s.metadata.labels));
        expect(service).toBeDefined();
        expect(service.spec.ports.map((p: Doc) => p.name)).toContain('metrics');
      }
    });

    it('its Services select its pods on named ports; a StatefulSet\'s is headless and is its serviceName (pods addressed one by one)', () => {
      for (const s of services) {
        expect(Object.entries(s.spec.selector).every(([k, v]) => workload.podLabels[k] === v), s.metadata.name).toBe(true);
        const names = new Set(workload.containers.flatMap((c) => (c.ports ?? []).map((p: Doc) => p.name)));
        for (const p of s.spec.ports) expect(names, `${s.metadata.name} ${p.name}`).toContain(p.targetPort);
      }
      if (workload.object.kind === 'StatefulSet') {
        const governing = services.find((s) => s.metadata.name === workload.object.spec.serviceName);
        expect(governing?.spec.clusterIP).toBe('None');
      }
    });
  });
}
