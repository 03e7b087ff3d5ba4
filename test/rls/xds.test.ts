/**
 * The rate limit configuration over xDS (docs/envoy.md, "Configuration over xDS"): a real cellgate
 * subscribed to the tests' management server (xds-server.ts: grpc-js's server from Envoy's published
 * definitions), answering ShouldRateLimit on its rls-port by what was pushed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { counter, until } from './helpers.js';
import { oneLimit, refusedStart, startXdsCellgate, type XdsCellgate } from './xds-helpers.js';
import { resource, TYPE_URL, XdsTestServer } from './xds-server.js';

const k = (value: string): { key: string; value: string }[] => [{ key: 'k', value }];

describe('xDS state of the world', () => {
  const xds = new XdsTestServer();
  let cg: XdsCellgate;
  beforeAll(async () => {
    await xds.start();
    cg = await startXdsCellgate(xds.port, ['--rls-xds-node-id', 'edge-7', '--rls-xds-node-metadata', 'zone=a,role=x=y,noequals,k:v']);
  });
  afterAll(async () => {
    await cg?.stop();
    xds.stop();
  });

  it('subscribes as envoyproxy/ratelimit does: node id and metadata, the type URL, all resources, no version yet', async () => {
    await until(() => xds.requests.length > 0, 'the first DiscoveryRequest');
    const first = xds.requests[0];
    expect(first.type_url).toBe(TYPE_URL);
    expect(first.resource_names).toEqual([]);
    expect(first.version_info).toBe('');
    expect(first.response_nonce).toBe('');
    expect(first.error_detail).toBeNull();
    expect(first.node?.id).toBe('edge-7');
    // Split at the first '=' per comma-separated pair; a pair without '=' is dropped (their getClientNode).
    const fields = first.node?.metadata?.fields ?? {};
    expect(Object.fromEntries(Object.entries(fields).map(([key, v]) => [key, v.stringValue]))).toEqual({ zone: 'a', role: 'x=y' });
  });

  it('before any configuration: not ready, and calls are refused', async () => {
    const ready = await cg.readyz();
    expect(ready.status).toBe(503);
    expect(ready.text).toContain(`xDS server 127.0.0.1:${xds.port}`);
    await expect(cg.should('app', k('a'))).rejects.toMatchObject({ details: 'no rate limit configuration loaded' });
  });

  it('a pushed configuration is applied and ACKed with its version and nonce', async () => {
    xds.push('v1', [resource(oneLimit('app-config', 'app', 2))]);
    const nonce = xds.lastNonce;
    await until(() => xds.answersTo(nonce).length > 0, 'the ACK of v1');
    const ack = xds.answersTo(nonce)[0];
    expect(ack.version_info).toBe('v1');
    expect(ack.error_detail).toBeNull();
    expect(ack.node?.id).toBe('edge-7');
    expect((await cg.should('app', k('a'))).overall_code).toBe('OK');
    expect((await cg.should('app', k('a'))).overall_code).toBe('OK');
    const over = await cg.should('app', k('a'));
    expect(over.overall_code).toBe('OVER_LIMIT');
    expect(over.statuses[0].current_limit).toMatchObject({ requests_per_unit: 2, unit: 'MINUTE' });
    expect((await cg.readyz()).status).toBe(200);
    const info = await cg.info();
    expect(info).toMatchObject({ rls_config_source: 'xds', rls_config_loaded: '1', rls_xds_connected: '1', rls_xds_state: 'connected', rls_xds_acked_version: 'v1', rls_xds_acks: '1', rls_xds_nacks: '0' });
    expect(cg.logged("rls configuration applied: xDS version 'v1'").length).toBe(1);
  });

  it('a resource that fails validation is NACKed naming the problem; the configuration in force stays', async () => {
    const bad = oneLimit('bad-config', 'app', 5);
    (bad.descriptors as { rate_limit: Record<string, unknown> }[])[0].rate_limit = { requests_per_unit: 5 }; // no unit
    xds.push('v2', [resource(bad)]);
    const nonce = xds.lastNonce;
    await until(() => xds.answersTo(nonce).length > 0, 'the NACK of v2');
    const nack = xds.answersTo(nonce)[0];
    expect(nack.version_info).toBe('v1');
    expect(nack.error_detail?.message).toBe("bad-config: invalid rate limit unit 'UNKNOWN' (at descriptors[0].rate_limit.unit)");
    // v1's limit still answers (its counter already over).
    expect((await cg.should('app', k('a'))).overall_code).toBe('OVER_LIMIT');
    expect((await cg.should('app', k('b'))).overall_code).toBe('OK');
    const info = await cg.info();
    expect(info).toMatchObject({ rls_xds_acked_version: 'v1', rls_xds_nacks: '1', rls_xds_last_nack_version: 'v2' });
    expect(info.rls_xds_last_nack_reason).toContain("invalid rate limit unit 'UNKNOWN'");
    const metrics = await cg.metrics();
    expect(counter(metrics, 'cellgate_rls_xds_responses_total{result="nack"}')).toBe(1);
    expect(counter(metrics, 'ratelimit_service_config_load_error')).toBe(1);
    expect(counter(metrics, 'cellgate_rls_xds_acked_version{version="v1"}')).toBe(1);
    expect(cg.logged("configuration version 'v2' refused (NACK)").length).toBe(1);
  });

  it('the same domain twice, a resource of another type, bytes that are not a RateLimitConfig: NACKed', async () => {
    const cases: [string, { type_url: string; value: Buffer }[], string][] = [
      ['v3', [resource(oneLimit('one', 'app', 1)), resource(oneLimit('two', 'app', 1))], "two: duplicate domain 'app' in config file"],
      ['v4', [resource(oneLimit('one', 'app', 1), 'type.googleapis.com/envoy.config.cluster.v3.Cluster')], 'resources[0]: mismatched message type'],
      ['v5', [{ type_url: TYPE_URL, value: Buffer.from([0x1a, 0x05, 0x0a]) }], 'resources[0]: not a RateLimitConfig'],
    ];
    for (const [version, resources, reason] of cases) {
      xds.push(version, resources);
      const nonce = xds.lastNonce;
      await until(() => xds.answersTo(nonce).length > 0, `the answer to ${version}`);
      const nack = xds.answersTo(nonce)[0];
      expect(nack.version_info).toBe('v1');
      expect(nack.error_detail?.message).toContain(reason);
    }
    expect((await cg.info()).rls_xds_acked_version).toBe('v1');
    expect(cg.server.proc.exitCode).toBeNull();
  });

  it("cellgate's extension rides in the descriptor's metadata under 'cellgate'; keys it may not carry are NACKed", async () => {
    const cellgate = (fields: Record<string, unknown>): Record<string, unknown> => ({ metadata: { fields: { cellgate: { structValue: { fields } } } } });
    xds.push('v6', [resource(oneLimit('tb', 'bucket', 60, cellgate({ algorithm: { stringValue: 'token_bucket' }, burst: { numberValue: 3 } })))]);
    await until(async () => (await cg.info()).rls_xds_acked_version === 'v6', 'v6 in force');
    for (let i = 0; i < 3; i++) expect((await cg.should('bucket', k('x'))).overall_code).toBe('OK');
    expect((await cg.should('bucket', k('x'))).overall_code).toBe('OVER_LIMIT');
    for (const [fields, reason] of [
      [{ algoritm: { stringValue: 'gcra' } }, "config error, unknown key 'algoritm'"],
      [{ requests_per_unit: { numberValue: 9 } }, "'requests_per_unit' is a field of the RateLimitPolicy message"],
      // A number that is not an integer, as the file loader refuses `burst: 2.5`.
      [{ burst: { numberValue: 2.5 } }, 'error checking config (at descriptors[0].rate_limit.burst)'],
    ] as const) {
      xds.push(`bad-${reason.length}`, [resource(oneLimit('tb', 'bucket', 60, cellgate(fields)))]);
      const nonce = xds.lastNonce;
      await until(() => xds.answersTo(nonce).length > 0, 'the NACK');
      expect(xds.answersTo(nonce)[0].error_detail?.message).toContain(reason);
    }
  });

  it('after the server restarts the client reconnects, starting from the version in force; the configuration stays meanwhile', async () => {
    const port = xds.port;
    const opened = xds.streamsOpened;
    xds.stop();
    await until(async () => (await cg.info()).rls_xds_connected === '0', 'the disconnection seen');
    expect((await cg.should('bucket', k('x'))).overall_code).toBe('OVER_LIMIT');
    expect((await cg.readyz()).status).toBe(200);
    const before = Number((await cg.info()).rls_xds_reconnects);
    await xds.start(port);
    await until(() => xds.streamsOpened > opened, 'a new stream', 20_000);
    const first = xds.requests.filter((r) => r.stream === xds.streamsOpened)[0];
    expect(first.version_info).toBe('v6');
    expect(first.response_nonce).toBe('');
    await until(async () => (await cg.info()).rls_xds_connected === '1', 'connected again', 20_000);
    expect(Number((await cg.info()).rls_xds_reconnects)).toBeGreaterThan(before);
    expect(counter(await cg.metrics(), 'cellgate_rls_xds_reconnects_total')).toBeGreaterThan(0);
    // The server had v6 too: nothing to send. A new version goes through the new stream.
    xds.push('v7', [resource(oneLimit('fresh', 'fresh', 1))]);
    await until(async () => (await cg.info()).rls_xds_acked_version === 'v7', 'v7 in force');
    expect((await cg.should('fresh', k('y'))).overall_code).toBe('OK');
    expect((await cg.should('fresh', k('y'))).overall_code).toBe('OVER_LIMIT');
  });
});

describe('xDS start-up rules', () => {
  it('rls-config and rls-xds-server together refuse the start', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cellgate-xds-'));
    try {
      const r = await refusedStart(['--rls-config', dir, '--rls-xds-server', '127.0.0.1:1']);
      expect(r.status).toBe(1);
      expect(r.output).toContain('rls-config and rls-xds-server are both set');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);

  it('rls-force-start: ready before the first configuration, calls refused until it arrives', async () => {
    const xds = new XdsTestServer();
    await xds.start();
    const cg = await startXdsCellgate(xds.port, ['--rls-force-start', 'yes']);
    try {
      expect((await cg.readyz()).status).toBe(200);
      await expect(cg.should('app', k('a'))).rejects.toMatchObject({ details: 'no rate limit configuration loaded' });
      xds.push('v1', [resource(oneLimit('a', 'app', 1))]);
      await until(async () => (await cg.info()).rls_config_loaded === '1', 'the configuration');
      expect((await cg.should('app', k('a'))).overall_code).toBe('OK');
    } finally {
      await cg.stop();
      xds.stop();
    }
  });

  it('an empty state of the world is a configuration with no domain (as envoyproxy/ratelimit applies it)', async () => {
    const xds = new XdsTestServer();
    await xds.start();
    const cg = await startXdsCellgate(xds.port);
    try {
      xds.push('empty', []);
      await until(async () => (await cg.info()).rls_xds_acked_version === 'empty', 'the empty version ACKed');
      expect((await cg.readyz()).status).toBe(200);
      expect((await cg.should('app', k('a'))).overall_code).toBe('OK');
    } finally {
      await cg.stop();
      xds.stop();
    }
  });
});
