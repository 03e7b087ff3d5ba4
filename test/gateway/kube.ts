/**
 * examples/kubernetes read as the API server and the kubelet read them, for the manifests' tests:
 * the objects of each file, their validation against the Kubernetes schemas, the pods of the
 * workloads, and a container's environment, arguments and mounted files as the kubelet gives them
 * (Secrets and ConfigMaps from the same file, the downward API's pod address, `$(NAME)` expansion,
 * mounted volumes laid out as the kubelet lays them out, `..data` link included).
 *
 * The validator is `kubernetes-models` (tommy351/kubernetes-models-ts, a dev dependency), and
 * `@kubernetes-models/prometheus-operator` for the monitors: both ship the schemas compiled to ajv
 * validators, offline (no cluster, no download). Version 4 of each (5 needs Node 22; the project
 * supports Node 20). Their schemas accept unknown fields (as the API server does without field
 * validation), so the tests name the fields that matter.
 */
import { mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { PodMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const K8S_DIR = join(ROOT, 'examples/kubernetes');

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Doc = any;

interface Validatable { validate(): void }
const KINDS: Record<string, new (data: Doc) => Validatable> = {
  'apps/v1 Deployment': Deployment,
  'apps/v1 StatefulSet': StatefulSet,
  'v1 ConfigMap': ConfigMap,
  'v1 Secret': Secret,
  'v1 Service': Service,
  'networking.k8s.io/v1 NetworkPolicy': NetworkPolicy,
  'policy/v1 PodDisruptionBudget': PodDisruptionBudget,
  'monitoring.coreos.com/v1 PodMonitor': PodMonitor,
  'monitoring.coreos.com/v1 ServiceMonitor': ServiceMonitor,
};

/** Validates one object against its kind's schema; throws naming what is wrong. */
export function validate(doc: Doc): void {
  const Kind = KINDS[`${doc.apiVersion} ${doc.kind}`];
  if (Kind === undefined) throw new Error(`no schema registered for ${doc.apiVersion} ${doc.kind}`);
  new Kind(doc).validate();
}

/** The manifest files, one per topology. */
export function manifestFiles(): string[] {
  return readdirSync(K8S_DIR).filter((f) => f.endsWith('.yaml')).sort();
}

/** The objects of one file, in order. */
export function objectsOf(file: string): Doc[] {
  return parseAllDocuments(readFileSync(join(K8S_DIR, file), 'utf8')).map((d) => {
    if (d.errors.length > 0) throw new Error(`${file}: ${d.errors.map((e) => e.message).join('; ')}`);
    return d.toJS() as Doc;
  });
}

export interface Workload {
  file: string;
  /** The Deployment or StatefulSet. */
  object: Doc;
  /** Its pod template's spec and labels. */
  pod: Doc;
  podLabels: Record<string, string>;
  /** The cellgate container (a native sidecar among initContainers, or a container). */
  cellgate: Doc;
  /** Every container, init containers first. */
  containers: Doc[];
}

export function workloads(file: string): Workload[] {
  return objectsOf(file).filter((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet').map((object) => {
    const pod = object.spec.template.spec;
    const containers: Doc[] = [...(pod.initContainers ?? []), ...pod.containers];
    return { file, object, pod, podLabels: object.spec.template.metadata.labels, cellgate: containers.find((c) => c.name === 'cellgate'), containers };
  });
}

/** Whether a label selector (`matchLabels` only, as these manifests use) selects `labels`. */
export function selects(selector: { matchLabels?: Record<string, string> } | undefined, labels: Record<string, string>): boolean {
  const wanted = Object.entries(selector?.matchLabels ?? {});
  return wanted.length > 0 && wanted.every(([k, v]) => labels[k] === v);
}

/** The value of `key` in the Secret or ConfigMap `name` of the same file (stringData / data), or throws. */
export function dataOf(file: string, kind: 'Secret' | 'ConfigMap', name: string, key: string): string {
  const obj = objectsOf(file).find((o) => o.kind === kind && o.metadata.name === name);
  if (obj === undefined) throw new Error(`${file}: ${kind} ${name} is used but not defined in the file`);
  const data = kind === 'Secret' ? { ...obj.stringData, ...Object.fromEntries(Object.entries(obj.data ?? {}).map(([k, v]) => [k, Buffer.from(String(v), 'base64').toString()])) } : obj.data;
  if (data?.[key] === undefined) throw new Error(`${file}: ${kind} ${name} has no key ${key}`);
  return String(data[key]);
}

/**
 * The environment as the kubelet gives it: `status.podIP` from the downward API as `podIp`, a
 * Secret's or ConfigMap's key from the same file, and `$(NAME)` in a value replaced by an earlier
 * variable's value.
 */
export function kubeletEnv(file: string, container: Doc, podIp: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of container.env ?? []) {
    if (e.valueFrom?.fieldRef !== undefined) {
      if (e.valueFrom.fieldRef.fieldPath !== 'status.podIP') throw new Error(`${file} ${container.name}: ${e.name}: fieldRef ${e.valueFrom.fieldRef.fieldPath} is not modelled`);
      env[e.name] = podIp;
    } else if (e.valueFrom?.secretKeyRef !== undefined) {
      env[e.name] = dataOf(file, 'Secret', e.valueFrom.secretKeyRef.name, e.valueFrom.secretKeyRef.key);
    } else if (e.valueFrom?.configMapKeyRef !== undefined) {
      env[e.name] = dataOf(file, 'ConfigMap', e.valueFrom.configMapKeyRef.name, e.valueFrom.configMapKeyRef.key);
    } else {
      env[e.name] = String(e.value).replace(/\$\((\w+)\)/g, (whole, name: string) => env[name] ?? whole);
    }
  }
  return env;
}

/**
 * Lays out the container's Secret and ConfigMap mounts under `dir` as the kubelet does (each key a
 * link to `..data/<key>`, `..data` a link to a timestamped directory holding the files), and returns
 * a function that maps an in-container path under one of those mounts to its place under `dir`.
 */
export function mountVolumes(file: string, workload: Workload, container: Doc, dir: string): (path: string) => string {
  const mounts: [string, string][] = [];
  for (const [i, m] of (container.volumeMounts ?? []).entries()) {
    const volume = workload.pod.volumes?.find((v: Doc) => v.name === m.name);
    const source = volume?.secret !== undefined ? { kind: 'Secret' as const, name: volume.secret.secretName } : volume?.configMap !== undefined ? { kind: 'ConfigMap' as const, name: volume.configMap.name } : null;
    if (source === null) continue;
    const obj = objectsOf(file).find((o) => o.kind === source.kind && o.metadata.name === source.name);
    if (obj === undefined) throw new Error(`${file}: ${source.kind} ${source.name} is mounted but not defined in the file`);
    const keys = Object.keys(source.kind === 'Secret' ? { ...obj.stringData, ...obj.data } : obj.data);
    const at = join(dir, `mount-${i}`);
    const version = join(at, '..2026_01_01_00_00_00.000000001');
    mkdirSync(version, { recursive: true });
    for (const key of keys) {
      writeFileSync(join(version, key), dataOf(file, source.kind, source.name, key));
      symlinkSync(posix.join('..data', key), join(at, key));
    }
    symlinkSync(posix.basename(version), join(at, '..data'));
    mounts.push([m.mountPath, at]);
  }
  return (path) => {
    for (const [mountPath, at] of mounts) if (path === mountPath || path.startsWith(`${mountPath}/`)) return at + path.slice(mountPath.length);
    return path;
  };
}
