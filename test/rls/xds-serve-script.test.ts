/**
 * scripts/xds-serve.mjs, the management server scripts/ratelimit-image-check.sh runs the image
 * against: its resource (a YAML file of limits → RateLimitConfig, encoded from the published
 * rls_conf.proto) makes the configuration the same file makes through cellgate's file loader, and
 * run as a process it feeds a real cellgate that then decides by those limits (ACK seen by the
 * script), refuses a YAML field the message has no place for, and exits 0 on SIGTERM.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadRlsConfig } from '../../src/rls/config.js';
import { validateResources } from '../../src/rls/xds/validation.js';
import { until } from './helpers.js';
import { startXdsCellgate } from './xds-helpers.js';

const SCRIPT_URL: string = new URL('../../scripts/xds-serve.mjs', import.meta.url).href;
const SCRIPT = fileURLToPath(SCRIPT_URL);

interface XdsServeModule {
  TYPE_URL: string;
  resourceFromYaml(name: string, text: string): { type_url: string; value: Buffer };
  decodeResource(value: Buffer): Record<string, unknown>;
}
const load = async (): Promise<XdsServeModule> => (await import(SCRIPT_URL)) as XdsServeModule;

const EDGE = 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n';
const NESTED = `
domain: api
descriptors:
  - key: api_key
    descriptors:
      - key: method
        value: POST
        rate_limit: { unit: hour, requests_per_unit: 1000, name: posts }
        shadow_mode: true
      - key: method
        rate_limit: { unlimited: true }
  - key: path
    value: /static
    detailed_metric: true
    rate_limit: { unit: second, requests_per_unit: 5, replaces: [{ name: posts }] }
`;

const dir = mkdtempSync(join(tmpdir(), 'cellgate-xds-serve-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('xds-serve.mjs resources', () => {
  it('a YAML file becomes the RateLimitConfig that makes the configuration the file makes', async () => {
    const { resourceFromYaml, decodeResource, TYPE_URL } = await load();
    const r = resourceFromYaml('api.yaml', NESTED);
    expect(r.type_url).toBe(TYPE_URL);
    expect(decodeResource(r.value)).toMatchObject({ name: 'api.yaml', domain: 'api', descriptors: [{ key: 'api_key' }, { key: 'path', rate_limit: { unit: 'SECOND' } }] });
    const fromFile = loadRlsConfig([{ name: 'api.yaml', text: NESTED }]);
    const fromXds = await validateResources([r]);
    expect(fromXds.domains).toEqual(fromFile.domains);
    expect(fromXds.files).toEqual(['api.yaml']);
    expect(fromXds.getLimit('api', [{ key: 'path', value: '/static' }], null)?.limit).toMatchObject({ requestsPerUnit: 5, unit: 'SECOND', replaces: ['posts'], detailedMetric: true });
  });

  it('refuses a field the message has no place for, naming it', async () => {
    const { resourceFromYaml } = await load();
    expect(() => resourceFromYaml('x.yaml', 'domain: x\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1, algorithm: gcra }\n'))
      .toThrow('x.yaml: descriptors[0].rate_limit: "algorithm" has no field in RateLimitPolicy');
  });
});

describe('xds-serve.mjs as a process', () => {
  it('feeds a real cellgate, sees its ACK, and exits 0 on SIGTERM', async () => {
    const file = join(dir, 'edge.yaml');
    writeFileSync(file, EDGE);
    const proc: ChildProcess = spawn(process.execPath, [SCRIPT, '--port', '0', '--version', 'v7', file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout!.on('data', (c: Buffer) => (out += c.toString('utf8')));
    proc.stderr!.on('data', (c: Buffer) => (out += c.toString('utf8')));
    const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
    try {
      await until(() => /listening on 127\.0\.0\.1:\d+/.test(out), `the listening line (output: ${out})`, 30_000);
      const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(out)![1]);
      const cg = await startXdsCellgate(port, ['--rls-xds-node-id', 'envoy-ratelimit']);
      try {
        await until(() => out.includes('ACK v7 nonce=n1 node=envoy-ratelimit'), `the ACK of v7 (output: ${out})`, 30_000);
        const codes = [];
        for (let i = 0; i < 3; i++) codes.push((await cg.should('edge', [{ key: 'remote_address', value: '10.1.1.1' }])).overall_code);
        expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
        expect(await cg.info()).toMatchObject({ rls_xds_acked_version: 'v7', rls_xds_nacks: '0' });
      } finally {
        await cg.stop();
      }
      proc.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      proc.kill('SIGKILL');
    }
  });

  it('a file it cannot encode ends it with 2 and the reason', async () => {
    const file = join(dir, 'bad.yml');
    writeFileSync(file, 'domain: bad\ndescriptors:\n  - key: k\n    limit: 3\n');
    const proc = spawn(process.execPath, [SCRIPT, '--port', '0', file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    proc.stderr.on('data', (c: Buffer) => (err += c.toString('utf8')));
    const timer = setTimeout(() => proc.kill('SIGKILL'), 60_000);
    const code = await new Promise<number | null>((resolve) => proc.on('exit', (c) => resolve(c)));
    clearTimeout(timer);
    expect(code).toBe(2);
    expect(err).toContain('xds-serve: bad.yml: descriptors[0]: "limit" has no field in RateLimitDescriptor');
  });
});
