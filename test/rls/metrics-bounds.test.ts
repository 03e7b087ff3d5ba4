/**
 * detailed_metric over values a client chooses (anyone who sets the header Envoy reads): the metric
 * labels are bounded in bytes (a value over 1,024 bytes, or past 1 MiB of label text in all, counts
 * under the `_overflow_` series instead of one of its own: every hit still counted), so /metrics stays
 * a few MB whatever the requests carry; and the exposition is sent in slices, the loop given back
 * between them, so a RESP PING and a gRPC call issued while a scrape is being sent are answered
 * before it completes (shown by the scrape's own tail counting the gRPC call made in its middle).
 *
 * Needs /usr/bin/python3 (the scraper with a small receive buffer: Node's net cannot set SO_RCVBUF).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { counter, startRls, type Descriptor, type Rls } from './helpers.js';

const CONFIG = `
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: { unit: hour, requests_per_unit: 1000000 }
`;


let rls: Rls;
beforeAll(async () => {
  rls = await startRls({ 'd.yaml': CONFIG });
});
afterAll(async () => {
  await rls?.stop();
});

/** Sends `n` distinct values of `bytes` bytes, `perCall` descriptors a call (under rls-max-message-bytes). */
async function sendValues(prefix: string, n: number, bytes: number, perCall: number): Promise<void> {
  await sendValuesTo(rls, prefix, n, bytes, perCall);
}

async function sendValuesTo(rls: Rls, prefix: string, n: number, bytes: number, perCall: number): Promise<void> {
  for (let i = 0; i < n; i += perCall) {
    const descriptors: Descriptor[] = [];
    for (let j = i; j < Math.min(n, i + perCall); j++) {
      const head = `${prefix}${j}-`;
      descriptors.push({ entries: [{ key: 'user', value: head + 'v'.repeat(bytes - head.length) }] });
    }
    const r = await rls.should('d', descriptors);
    expect(r.overall_code).toBe('OK');
  }
}

/** Every `ratelimit_service_rate_limit_total_hits` series: its labels and value. */
function totalHits(text: string): { labels: string; value: number }[] {
  const out: { labels: string; value: number }[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('ratelimit_service_rate_limit_total_hits{')) continue;
    const sp = line.lastIndexOf(' ');
    out.push({ labels: line.slice('ratelimit_service_rate_limit_total_hits'.length, sp), value: Number(line.slice(sp + 1)) });
  }
  return out;
}

describe('detailed_metric labels', () => {
  it('600 values of 7.9 KB and 1,500 of 900 bytes: /metrics stays bounded, every hit counted, the rest under _overflow_', async () => {
    await sendValues('big', 600, 7900, 120);
    await sendValues('mid', 1500, 900, 256);
    const text = await rls.metrics();
    console.log(`[attack] detailed_metric: 600 values of 7.9 KB and 1,500 of 900 bytes: /metrics is ${text.length} bytes`);
    // Unbounded, these labels alone would be 5 families × (600 × 7.9 KB + 1,500 × 0.9 KB) ≈ 30 MB.
    // Bounded: 5 × (1 MiB of label text + some 100 bytes per series) whatever the requests carry.
    expect(text.length).toBeLessThan(12 * 1024 * 1024);
    const series = totalHits(text);
    for (const s of series) expect(Buffer.byteLength(s.labels)).toBeLessThan(1024 + 64);
    expect(series.reduce((a, s) => a + s.value, 0)).toBe(2100);
    const overflow = series.find((s) => s.labels === '{domain="_overflow_"}');
    expect(overflow).toBeDefined();
    const own = series.length - 1;
    // The big values never get a series; the mid ones until 1 MiB of label text.
    expect(series.some((s) => s.labels.includes('big'))).toBe(false);
    expect(own).toBeGreaterThan(1000);
    expect(own).toBeLessThan(1500);
    expect(overflow!.value).toBe(2100 - own);
    expect(counter(text, 'cellgate_rls_stats_labels_overflowed_total')).toBe(2100 - own);
    expect(counter(text, 'cellgate_rls_stats_label_bytes')).toBeLessThanOrEqual(1024 * 1024);
    // A value already counted under the overflow series stays there, and is still counted.
    await sendValues('big', 1, 7900, 1);
    const again = totalHits(await rls.metrics()).find((s) => s.labels === '{domain="_overflow_"}');
    expect(again!.value).toBe(overflow!.value + 1);
  }, 120_000);

  it('a RESP PING and a gRPC call made while a scrape is sent are answered before it completes', async () => {
    // A server of its own with ~9 MB of series, near the bound (1 MiB of long labels, then 8,000
    // short ones): more than the kernel's buffers hold for a 4 KiB receive window (Linux's send
    // buffer grows to 4 MB), little enough to read in seconds even rendered whole.
    const own = await startRls({ 'd.yaml': CONFIG });
    try {
      await scrapeDuringCalls(own);
    } finally {
      await own.stop();
    }
  }, 120_000);
});

async function scrapeDuringCalls(rls: Rls): Promise<void> {
  {
    await sendValuesTo(rls, 'long', 1000, 1000, 256);
    await sendValuesTo(rls, 's', 8000, 20, 256);
    const py = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
    const callsBefore = counter(await rls.metrics(), 'cellgate_rls_request_duration_seconds_count');
    // A scraper with a 4 KiB receive buffer: it reads the first bytes of the response, says so, and
    // reads the rest (chunked) only when told, so the server cannot have sent the body before then.
    const script = [
      'import socket, sys',
      's = socket.socket()',
      's.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)',
      "s.connect(('127.0.0.1', int(sys.argv[1])))",
      "s.sendall(b'GET /metrics HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n')",
      'data = s.recv(4096)',
      "sys.stdout.write('started\\n'); sys.stdout.flush()",
      'sys.stdin.readline()',
      'while True:',
      '    b = s.recv(65536)',
      '    if not b: break',
      '    data += b',
      "head, _, rest = data.partition(b'\\r\\n\\r\\n')",
      "body = b''",
      // Chunked (sent in slices) or with a Content-Length (rendered whole): either is read.
      "chunked = b'transfer-encoding: chunked' in head.lower()",
      'if not chunked: body = rest',
      'while chunked:',
      "    line, _, rest = rest.partition(b'\\r\\n')",
      '    n = int(line, 16)',
      '    if n == 0: break',
      '    body += rest[:n]; rest = rest[n + 2:]',
      "for l in body.decode().split('\\n'):",
      "    if l.startswith('cellgate_rls_request_duration_seconds_count '): print(l)",
      "print('bytes', len(body))",
    ].join('\n');
    const child = spawn(py, ['-c', script, String(rls.metricsPort)], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    const killer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    try {
      while (!stdout.includes('started\n')) {
        if (child.exitCode !== null) throw new Error(`the scraper exited: ${stderr}`);
        await new Promise((r) => setTimeout(r, 10));
      }
      // The scrape is under way and its scraper is not reading: both are answered now.
      expect(await rls.redis.ping()).toBe('PONG');
      expect((await rls.should('d', [{ entries: [{ key: 'user', value: 'during-the-scrape' }] }])).overall_code).toBe('OK');
      child.stdin.write('go\n');
      expect(await exited).toBe(0);
    } finally {
      clearTimeout(killer);
      child.kill('SIGKILL');
    }
    expect(stderr).toBe('');
    // The body's tail was rendered after the gRPC call: it counts it (one rendering before the first
    // byte, as a scrape rendered whole on the loop, would not).
    expect(stdout).toContain(`cellgate_rls_request_duration_seconds_count ${callsBefore + 1}\n`);
    expect(Number(/bytes (\d+)/.exec(stdout)![1])).toBeGreaterThan(1024 * 1024);
  }
}

