/**
 * The Envoy Gateway and Envoy AI Gateway recipes (examples/envoy/envoy-gateway, ai-gateway) say what
 * their API and Deployments take: the EnvoyGateway fields of the image and the backend, AI Gateway's
 * quota Deployment as uid 65534 on a read-only root with /healthcheck probes, and the environments
 * they lead to start cellgate's ratelimit mode (CONFIG_TYPE=FILE while xDS is not in the build).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { ratelimitConfig } from '../../src/rls/ratelimit-mode.js';
import { deploymentEnv } from './ratelimit-helpers.js';

const read = (path: string) => readFileSync(new URL(`../../examples/envoy/${path}`, import.meta.url), 'utf8');
const EG = deploymentEnv('envoy-gateway/ratelimit-deployment.yaml');
const AIGW = deploymentEnv('envoy-ai-gateway/quota-ratelimit-deployment.yaml');

interface EnvoyGatewaySpec {
  provider: { type: string; kubernetes: { rateLimitDeployment: { container: { image: string } } } };
  rateLimit: { backend: { type: string; redis: { url: string } } };
}

function checkEnvoyGateway(eg: EnvoyGatewaySpec): void {
  expect(eg.provider.type).toBe('Kubernetes');
  expect(eg.provider.kubernetes.rateLimitDeployment.container.image).toMatch(/\/cellgate:/);
  expect(eg.rateLimit.backend.type).toBe('Redis');
  // The Deployment Envoy Gateway then writes: its environment with this URL maps onto cellgate's backend.
  const start = ratelimitConfig({ ...EG, REDIS_URL: eg.rateLimit.backend.redis.url, CONFIG_TYPE: 'FILE' }, []);
  expect(start.config.get('backend')).toBe(`redis://${eg.rateLimit.backend.redis.url}`);
}

describe('examples/envoy/envoy-gateway', () => {
  it('the ConfigMap holds an EnvoyGateway with cellgate as the rate limit image and a Redis backend', () => {
    const cm = parse(read('envoy-gateway/envoy-gateway-config.yaml'));
    expect(cm).toMatchObject({ kind: 'ConfigMap', metadata: { name: 'envoy-gateway-config', namespace: 'envoy-gateway-system' } });
    const eg = parse(cm.data['envoy-gateway.yaml']);
    expect(eg).toMatchObject({ apiVersion: 'gateway.envoyproxy.io/v1alpha1', kind: 'EnvoyGateway' });
    checkEnvoyGateway(eg);
  });

  it('the Helm values say the same under config.envoyGateway', () => {
    checkEnvoyGateway(parse(read('envoy-gateway/values.yaml')).config.envoyGateway);
  });
});

describe('examples/envoy/ai-gateway', () => {
  it("the values addon sets cellgate's image in Envoy Gateway's rate limit Deployment", () => {
    const v = parse(read('ai-gateway/envoy-gateway-values-addon.yaml')).config.envoyGateway;
    expect(v.provider.kubernetes.rateLimitDeployment.container.image).toMatch(/\/cellgate:/);
    expect(v.rateLimit.backend).toMatchObject({ type: 'Redis', redis: { url: 'redis.redis-system.svc.cluster.local:6379' } });
  });

  it("the quota Deployment: /bin/ratelimit, AI Gateway's environment, uid 65534, read-only root, /healthcheck on 8080", () => {
    const [deployment, service] = parseAllDocuments(read('ai-gateway/quota-ratelimit.yaml')).map((d) => d.toJS());
    expect(deployment.metadata).toMatchObject({ name: 'envoy-ai-gateway-ratelimit', namespace: 'envoy-gateway-system' });
    const c = deployment.spec.template.spec.containers[0];
    expect(c.command).toEqual(['/bin/ratelimit']);
    expect(c.image).toMatch(/\/cellgate:/);
    expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, runAsUser: 65534, runAsNonRoot: true, allowPrivilegeEscalation: false });
    for (const probe of [c.readinessProbe, c.livenessProbe]) expect(probe.httpGet).toEqual({ path: '/healthcheck', port: 8080 });
    const env = Object.fromEntries((c.env as { name: string; value: string }[]).map((e) => [e.name, e.value]));
    // AI Gateway's own environment, at the log level info instead of debug.
    expect(env).toEqual({ ...AIGW, LOG_LEVEL: 'info' });
    expect(ratelimitConfig({ ...env, CONFIG_TYPE: 'FILE' }, []).config.get('rls-port')).toBe('8081');
    expect(service.spec.ports).toEqual([{ name: 'grpc', protocol: 'TCP', port: 8081, targetPort: 8081 }]);
  });
});
