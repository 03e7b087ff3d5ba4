/**
 * An xDS server that misbehaves (docs/envoy.md, "Configuration over xDS", bounds): silent, flapping,
 * sending huge, malformed, endless or too deep configurations. Each time the configuration in force
 * stays, the process serves on (RESP and gRPC), and INFO, the metrics and the log say what happened.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { counter, until } from './helpers.js';
import { oneLimit, startXdsCellgate, type XdsCellgate } from './xds-helpers.js';
import { encodeResponse, resource, XdsTestServer } from './xds-server.js';

const k = (value: string): { key: string; value: string }[] => [{ key: 'k', value }];

describe('a hostile xDS server', () => {
  const xds = new XdsTestServer();
  let cg: XdsCellgate;
  beforeAll(async () => {
    await xds.start();
    cg = await startXdsCellgate(xds.port, ['--rls-xds-max-message-bytes', '262144', '--rls-xds-first-response-ms', '500']);
    xds.push('good', [resource(oneLimit('app', 'app', 1))]);
    await until(async () => (await cg.info()).rls_xds_acked_version === 'good', 'the first configuration');
    expect((await cg.should('app', k('a'))).overall_code).toBe('OK');
  });
  afterAll(async () => {
    await cg?.stop();
    xds.stop();
  });

  /** The configuration in force still answers, RESP too, and the process is up. */
  async function stillServing(): Promise<void> {
    expect((await cg.should('app', k('a'))).overall_code).toBe('OVER_LIMIT');
    expect(await cg.redis.ping()).toBe('PONG');
    expect(cg.server.proc.exitCode).toBeNull();
    expect((await cg.info()).rls_xds_acked_version).toBe('good');
  }

  it('a message over rls-xds-max-message-bytes breaks the stream before it is decoded; the client reconnects', async () => {
    const failures = Number((await cg.info()).rls_xds_stream_failures);
    const opened = xds.streamsOpened;
    xds.sendResponse({ version_info: 'huge', resources: [resource({ name: 'x'.repeat(300_000), domain: 'huge' })] });
    await until(async () => Number((await cg.info()).rls_xds_stream_failures) > failures, 'the stream failure', 30_000);
    expect((await cg.info()).rls_xds_last_error).toMatch(/RESOURCE_EXHAUSTED/);
    await until(() => xds.streamsOpened > opened, 'a new stream', 30_000);
    await stillServing();
  });

  it('bytes that are not a DiscoveryResponse break the stream (no nonce to NACK); the client reconnects', async () => {
    await until(() => xds.openStreams > 0, 'an open stream');
    const opened = xds.streamsOpened;
    xds.sendRaw(Buffer.from([0x12, 0xff, 0xff, 0xff, 0x0f, 0x01]));
    await until(() => xds.streamsOpened > opened, 'a new stream', 30_000);
    expect((await cg.info()).rls_xds_last_error).toContain('does not decode as a DiscoveryResponse');
    expect(cg.logged('does not decode as a DiscoveryResponse').length).toBeGreaterThan(0);
    await stillServing();
  });

  it('more resources than the bound, descriptors nested too deep, a response of another type: NACKed', async () => {
    await until(() => xds.openStreams > 0, 'an open stream');
    let deep: Record<string, unknown> = { key: 'leaf', rate_limit: { unit: 'SECOND', requests_per_unit: 1 } };
    for (let i = 0; i < 70; i++) deep = { key: `level${i}`, descriptors: [deep] };
    const many = Array.from({ length: 1001 }, (_, i) => resource(oneLimit(`r${i}`, `d${i}`, 1)));
    const cases: [Record<string, unknown>, string][] = [
      [{ version_info: 'many', resources: many }, '1001 resources in one response, more than 1000'],
      [{ version_info: 'deep', resources: [resource({ name: 'deep', domain: 'deep', descriptors: [deep] })] }, 'deep: descriptors nested more than 64 deep'],
      [{ version_info: 'cluster', type_url: 'type.googleapis.com/envoy.config.cluster.v3.Cluster', resources: [] }, 'was not subscribed to'],
    ];
    expect(encodeResponse(cases[0][0]).length).toBeLessThan(262144); // refused for its count, not its size
    for (const [fields, reason] of cases) {
      const nonce = xds.sendResponse(fields);
      await until(() => xds.answersTo(nonce).length > 0, `the NACK of ${String(fields.version_info)}`, 30_000);
      const nack = xds.answersTo(nonce)[0];
      expect(nack.version_info).toBe('good');
      expect(nack.error_detail?.message).toContain(reason);
    }
    await stillServing();
  });

  it('an endless burst of responses: validated one at a time, the overtaken ones skipped, RESP served meanwhile; the last one is in force', async () => {
    await until(() => xds.openStreams > 0, 'an open stream');
    const acksBefore = Number((await cg.info()).rls_xds_acks);
    const body = Array.from({ length: 20 }, (_, i) => ({ key: `key${i}`, rate_limit: { unit: 'MINUTE', requests_per_unit: 10 } }));
    const nonces: string[] = [];
    for (let i = 0; i < 50; i++) nonces.push(xds.sendResponse({ version_info: `burst-${i}`, resources: [resource({ name: 'app', domain: 'app', descriptors: [{ key: 'k', rate_limit: { unit: 'MINUTE', requests_per_unit: 1 } }, ...body] })] }));
    let pings = 0;
    while (xds.answersTo(nonces[nonces.length - 1]).length === 0 && pings < 10_000) {
      expect(await cg.redis.ping()).toBe('PONG');
      pings++;
    }
    await until(() => xds.answersTo(nonces[nonces.length - 1]).length > 0, 'the last answer', 60_000);
    // Each answered at most once and never refused; those overtaken while another was validated
    // (each is the whole state) are left unanswered and counted.
    const answered = nonces.filter((nonce) => xds.answersTo(nonce).length > 0);
    for (const nonce of answered) expect(xds.answersTo(nonce).map((r) => r.error_detail)).toEqual([null]);
    const info = await cg.info();
    expect(info.rls_xds_acked_version).toBe('burst-49');
    expect(Number(info.rls_xds_acks)).toBe(acksBefore + answered.length);
    expect(answered.length + Number(info.rls_xds_superseded)).toBe(50);
    expect(pings).toBeGreaterThan(0);
    // Its limit on k counts on from the configurations before it (the same cache key).
    expect((await cg.should('app', k('a'))).overall_code).toBe('OVER_LIMIT');
  }, 120_000);

  it('a large configuration is validated in a worker thread while RESP and gRPC are served, then applied; responses that arrive meanwhile: the newest kept', async () => {
    await until(() => xds.openStreams > 0, 'an open stream');
    const descriptors = [{ key: 'k', rate_limit: { unit: 'MINUTE', requests_per_unit: 1 } },
      ...Array.from({ length: 4000 }, (_, i) => ({ key: `key${i}`, value: `value${i}`, rate_limit: { unit: 'HOUR', requests_per_unit: i + 1 } }))];
    const big = resource({ name: 'big', domain: 'big', descriptors });
    expect(big.value.length).toBeGreaterThan(16 * 1024); // over the inline bound
    const superseded = Number((await cg.info()).rls_xds_superseded);
    const nonce = xds.sendResponse({ version_info: 'big', resources: [big] });
    // Three more while it is validated: the two in the middle are overtaken by the last (each is
    // the whole state), which is validated next.
    const middle = [xds.sendResponse({ version_info: 'mid-1', resources: [] }), xds.sendResponse({ version_info: 'mid-2', resources: [] })];
    const last = xds.sendResponse({ version_info: 'big-again', resources: [big] });
    let served = 0;
    while (xds.answersTo(last).length === 0 && served < 10_000) {
      expect(await cg.redis.ping()).toBe('PONG');
      expect((await cg.should('app', k(`fresh-${served}`))).overall_code).toBe('OK');
      served++;
    }
    await until(() => xds.answersTo(last).length > 0, 'the answer to big-again', 60_000);
    expect(xds.answersTo(nonce).map((r) => r.error_detail)).toEqual([null]);
    expect(xds.answersTo(last).map((r) => r.error_detail)).toEqual([null]);
    for (const m of middle) expect(xds.answersTo(m)).toEqual([]);
    expect(Number((await cg.info()).rls_xds_superseded)).toBe(superseded + 2);
    expect((await cg.info()).rls_xds_acked_version).toBe('big-again');
    expect((await cg.should('big', [{ key: 'key2', value: 'value2' }])).statuses[0].current_limit).toMatchObject({ requests_per_unit: 3, unit: 'HOUR' });
    // The same size, one mistake deep inside: NACKed from the worker with the place.
    descriptors[3000] = { key: 'key2999', value: 'value2999', rate_limit: { unit: 'UNKNOWN', requests_per_unit: 1 } };
    const bad = xds.sendResponse({ version_info: 'big-bad', resources: [resource({ name: 'big', domain: 'big', descriptors })] });
    await until(() => xds.answersTo(bad).length > 0, 'the answer to big-bad', 60_000);
    expect(xds.answersTo(bad)[0].error_detail?.message).toMatch(/^big: .*descriptors\[3000\]/);
    xds.sendResponse({ version_info: 'good', resources: [resource(oneLimit('app', 'app', 1))] });
    await until(async () => (await cg.info()).rls_xds_acked_version === 'good', 'back to good', 30_000);
  }, 120_000);
});

describe('an xDS server that never answers, or flaps', () => {
  it('never answers: the missing first response is logged, the stream opened again, /readyz says why', async () => {
    const xds = new XdsTestServer();
    xds.mode = 'silent';
    await xds.start();
    const cg = await startXdsCellgate(xds.port, ['--rls-xds-first-response-ms', '300']);
    try {
      await until(async () => Number((await cg.info()).rls_xds_first_response_timeouts) >= 2, 'two first-response timeouts', 20_000);
      expect(cg.logged('sent no response within 300 ms').length).toBeGreaterThanOrEqual(2);
      expect(Number((await cg.info()).rls_xds_streams)).toBeGreaterThanOrEqual(2);
      expect(xds.streamsOpened).toBeGreaterThanOrEqual(1);
      const ready = await cg.readyz();
      expect(ready.status).toBe(503);
      expect(ready.text).toContain('rls-xds-first-response-ms');
      expect(await cg.redis.ping()).toBe('PONG');
      // It answers after all: the configuration arrives on the next stream.
      xds.mode = 'serve';
      xds.push('late', [resource(oneLimit('app', 'app', 1))]);
      await until(async () => (await cg.info()).rls_xds_acked_version === 'late', 'the late configuration', 20_000);
      expect((await cg.readyz()).status).toBe(200);
    } finally {
      await cg.stop();
      xds.stop();
    }
  });

  it('flaps (each stream ended at once): the wait before the next attempt doubles; it comes back when the server does', async () => {
    const xds = new XdsTestServer();
    xds.mode = 'hangup';
    await xds.start();
    const cg = await startXdsCellgate(xds.port, ['--rls-xds-retry-ms', '50']);
    try {
      await until(async () => Number((await cg.info()).rls_xds_consecutive_failures) >= 4, 'four breaks in a row', 20_000);
      const info = await cg.info();
      const failures = Number(info.rls_xds_consecutive_failures);
      expect(Number(info.rls_xds_backoff_ms)).toBe(Math.min(60_000, 50 * 2 ** (failures - 1)));
      expect(info.rls_xds_state).toBe('waiting');
      expect(counter(await cg.metrics(), 'cellgate_rls_xds_stream_failures_total')).toBeGreaterThanOrEqual(4);
      xds.mode = 'serve';
      xds.push('v1', [resource(oneLimit('app', 'app', 1))]);
      await until(async () => (await cg.info()).rls_xds_acked_version === 'v1', 'the configuration once the server serves', 30_000);
      expect((await cg.should('app', k('a'))).overall_code).toBe('OK');
      expect(cg.server.proc.exitCode).toBeNull();
    } finally {
      await cg.stop();
      xds.stop();
    }
  });

  it('nothing listens at rls-xds-server: the start goes on, not ready, the failures counted', async () => {
    const xds = new XdsTestServer();
    await xds.start();
    const port = xds.port;
    xds.stop();
    const cg = await startXdsCellgate(port);
    try {
      await until(async () => Number((await cg.info()).rls_xds_stream_failures) >= 2, 'two failed attempts', 20_000);
      expect((await cg.info()).rls_xds_last_error).toMatch(/UNAVAILABLE/);
      const ready = await cg.readyz();
      expect(ready.status).toBe(503);
      expect(ready.text).toContain(`xDS server 127.0.0.1:${port}`);
    } finally {
      await cg.stop();
    }
  });
});
