/**
 * Raw-socket helpers for protocol and abuse tests: a connection that records bytes and closes, a
 * minimal RESP reply parser, frame encoders, a seeded PRNG and a one-command-at-a-time checker.
 * Shared by test/server/protocol.test.ts and test/hardening/*.
 */
import net from 'node:net';
import { Worker } from 'node:worker_threads';
import { setTimeout as delay } from 'node:timers/promises';
import { expect } from 'vitest';
import type { RunningServer } from './server.js';

// ---------------------------------------------------------------------------------------------
// A raw connection: bytes in, bytes out, and whether the server closed its side.
// ---------------------------------------------------------------------------------------------

export class RawConnection {
  private chunks: Buffer[] = [];
  private bytes = 0;
  /** The server sent FIN (or the socket was reset). */
  ended = false;
  /** The socket is fully closed (both directions, or after an error). */
  closed = false;
  errorCode: string | null = null;
  private listeners = new Set<() => void>();

  private constructor(readonly socket: net.Socket) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => {
      this.chunks.push(chunk);
      this.bytes += chunk.length;
      this.notify();
    });
    socket.on('end', () => {
      this.ended = true;
      this.notify();
    });
    socket.on('error', (e: NodeJS.ErrnoException) => {
      this.errorCode = e.code ?? e.message;
      this.notify();
    });
    socket.on('close', () => {
      this.closed = true;
      this.ended = true;
      this.notify();
    });
  }

  /**
   * `allowHalfOpen` keeps our side open after the server's FIN, like a peer that does not notice
   * the close (Tcl's sockets in protocol.tcl): only a real close on the server side ends it.
   */
  static open(port: number, opts: { allowHalfOpen?: boolean } = {}): Promise<RawConnection> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: opts.allowHalfOpen ?? false });
      socket.once('connect', () => {
        socket.off('error', reject);
        resolve(new RawConnection(socket));
      });
      socket.once('error', reject);
    });
  }

  private notify(): void {
    for (const l of [...this.listeners]) l();
  }

  get received(): Buffer {
    if (this.chunks.length > 1) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0] ?? Buffer.alloc(0);
  }

  get length(): number {
    return this.bytes;
  }

  text(): string {
    return this.received.toString('latin1');
  }

  /** Writes and resolves once the bytes were handed to the kernel (errors are recorded, not thrown). */
  write(data: string | Buffer): Promise<void> {
    if (this.socket.destroyed || !this.socket.writable) return Promise.resolve();
    const buf = typeof data === 'string' ? Buffer.from(data, 'latin1') : data;
    return new Promise((resolve) => this.socket.write(buf, () => resolve()));
  }

  /**
   * Writes `buf` in pieces cut at `cuts` (any order; out-of-range or repeated cuts are skipped), one
   * timer tick apart, so the server sees the frame split at those bytes.
   */
  async writeInPieces(buf: Buffer, cuts: number[]): Promise<void> {
    let from = 0;
    for (const cut of [...cuts].sort((a, b) => a - b).concat(buf.length)) {
      if (cut <= from) continue;
      await this.write(buf.subarray(from, cut));
      from = cut;
      await new Promise((resolve) => setTimeout(resolve, 0));
    }
  }

  /** Resolves when `ready()` holds; rejects after `timeoutMs` with what was received so far. */
  waitFor(ready: () => boolean, timeoutMs: number, what: string): Promise<void> {
    if (ready()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (!ready()) return;
        clearTimeout(timer);
        this.listeners.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.listeners.delete(check);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; received ${JSON.stringify(this.text().slice(0, 300))}, ended=${this.ended}`));
      }, timeoutMs);
      this.listeners.add(check);
    });
  }

  waitForBytes(n: number, timeoutMs = 5000): Promise<void> {
    return this.waitFor(() => this.bytes >= n || this.ended, timeoutMs, `${n} bytes`);
  }

  waitForEnd(timeoutMs = 5000): Promise<void> {
    return this.waitFor(() => this.ended, timeoutMs, 'the server to close the connection');
  }

  waitForClose(timeoutMs = 5000): Promise<void> {
    return this.waitFor(() => this.closed, timeoutMs, 'the socket to close');
  }

  /**
   * Waits until the received bytes are whole replies, at least `minReplies` of them, and nothing
   * new came for `quietMs` (or the server closed): the server has answered everything it is going
   * to answer to what was sent. `minReplies` keeps a busy machine from passing for a quiet one: a
   * server that has not answered yet is not done.
   */
  async settle(quietMs = 15, timeoutMs = 3000, minReplies = 0): Promise<void> {
    const deadline = Date.now() + Math.max(timeoutMs, minReplies > 0 ? 30_000 : 0);
    for (;;) {
      if (this.ended) return;
      const before = this.bytes;
      await delay(quietMs);
      if (this.bytes === before) {
        const { replies, rest } = parseReplies(this.received);
        if (rest === 0 && replies.length >= minReplies) return;
      }
      if (Date.now() > deadline) throw new Error(`no quiet moment within ${timeoutMs} ms: ${JSON.stringify(this.text().slice(-200))}`);
    }
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** Sends `payload` on a new connection and returns exactly `expected.length` bytes of the answer. */
export async function exchange(port: number, payload: string | Buffer, expected: string): Promise<{ text: string; conn: RawConnection }> {
  const conn = await RawConnection.open(port);
  await conn.write(payload);
  await conn.waitForBytes(Buffer.byteLength(expected, 'latin1'));
  return { text: conn.text(), conn };
}

/** Sends `payload`, expects exactly `expected` and then the server closing the connection. */
export async function expectAnswerThenClose(port: number, payload: string | Buffer, expected: string): Promise<void> {
  const conn = await RawConnection.open(port);
  try {
    await conn.write(payload);
    await conn.waitForEnd();
    expect(conn.text()).toBe(expected);
  } finally {
    conn.destroy();
  }
}

/**
 * Sends `payload`, then a probe on the same connection (PING, or AUTH on the password server):
 * exactly `expected` must come, then the probe's answer, and the connection stays open.
 */
export async function expectAnswerThenPong(port: number, payload: string | Buffer, expected: string, probe: [string, string] = ['PING\r\n', '+PONG\r\n']): Promise<void> {
  const conn = await RawConnection.open(port);
  try {
    await conn.write(payload);
    await conn.write(probe[0]);
    await conn.waitForBytes(Buffer.byteLength(expected + probe[1], 'latin1'));
    await delay(10);
    expect(conn.text()).toBe(expected + probe[1]);
    expect(conn.ended).toBe(false);
  } finally {
    conn.destroy();
  }
}

// ---------------------------------------------------------------------------------------------
// RESP replies: enough of a parser to count whole replies and read simple values.
// ---------------------------------------------------------------------------------------------

export type Reply = string | number | null | boolean | Reply[] | { error: string } | Map<Reply, Reply>;

/** Parses as many whole RESP2/RESP3 replies as `buf` holds; `rest` is the number of bytes left over. */
export function parseReplies(buf: Buffer): { replies: Reply[]; rest: number } {
  const replies: Reply[] = [];
  let pos = 0;
  const INCOMPLETE = Symbol('incomplete');
  const line = (at: number): [string, number] | typeof INCOMPLETE => {
    const cr = buf.indexOf('\r\n', at, 'latin1');
    if (cr === -1) return INCOMPLETE;
    return [buf.toString('latin1', at + 1, cr), cr + 2];
  };
  const one = (at: number): [Reply, number] | typeof INCOMPLETE => {
    if (at >= buf.length) return INCOMPLETE;
    const type = String.fromCharCode(buf[at]);
    const l = line(at);
    if (l === INCOMPLETE) return INCOMPLETE;
    const [head, next] = l;
    switch (type) {
      case '+': return [head, next];
      case '-': return [{ error: head }, next];
      case ':': return [Number(head), next];
      case ',': return [Number(head), next];
      case '#': return [head === 't', next];
      case '_': return [null, next];
      case '$':
      case '=':
      case '!': {
        const n = Number(head);
        if (n < 0) return [null, next];
        if (next + n + 2 > buf.length) return INCOMPLETE;
        return [buf.toString('latin1', next, next + n), next + n + 2];
      }
      case '*':
      case '~':
      case '>':
      case '%': {
        const n = Number(head);
        if (n < 0) return [null, next];
        const count = type === '%' ? n * 2 : n;
        const items: Reply[] = [];
        let p = next;
        for (let i = 0; i < count; i++) {
          const r = one(p);
          if (r === INCOMPLETE) return INCOMPLETE;
          items.push(r[0]);
          p = r[1];
        }
        if (type !== '%') return [items, p];
        const map = new Map<Reply, Reply>();
        for (let i = 0; i < items.length; i += 2) map.set(items[i], items[i + 1]);
        return [map, p];
      }
      default:
        throw new Error(`not a RESP reply at byte ${at}: ${JSON.stringify(buf.toString('latin1', at, at + 40))}`);
    }
  };
  for (;;) {
    const r = one(pos);
    if (r === INCOMPLETE) break;
    replies.push(r[0]);
    pos = r[1];
  }
  return { replies, rest: buf.length - pos };
}

/** Encodes a command as a RESP multibulk (binary safe). */
export function mbulk(...args: (string | Buffer)[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const a of args) {
    const b = typeof a === 'string' ? Buffer.from(a, 'latin1') : a;
    parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
  }
  return Buffer.concat(parts);
}

export function bulkReply(value: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`$${value.length}\r\n`), value, Buffer.from('\r\n')]);
}

/** A small deterministic PRNG (xorshift32) so failures reproduce. */
export function prng(seed: number): (n: number) => number {
  let x = seed >>> 0 || 1;
  return (n: number) => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x % n;
  };
}

export function randomBytes(n: number, seed: number): Buffer {
  const next = prng(seed);
  const out = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) out[i] = next(256);
  return out;
}

/** A persistent RESP2 command connection for checks (one command at a time). */
export class Checker {
  private constructor(private readonly conn: RawConnection) {}

  static async open(port: number): Promise<Checker> {
    return new Checker(await RawConnection.open(port));
  }

  /** A checker over a connection the test also watches (to see it closed). */
  static wrap(conn: RawConnection): Checker {
    return new Checker(conn);
  }

  async call(...args: (string | Buffer)[]): Promise<Reply> {
    const start = this.conn.length;
    await this.conn.write(mbulk(...args));
    let result: Reply | undefined;
    await this.conn.waitFor(() => {
      const tail = this.conn.received.subarray(start);
      const { replies } = parseReplies(tail);
      if (replies.length > 0) result = replies[0];
      return replies.length > 0 || this.conn.ended;
    }, 5000, `a reply to ${args.map(String).join(' ').slice(0, 60)}`);
    if (result === undefined) throw new Error('connection closed before the reply');
    return result;
  }

  close(): void {
    this.conn.destroy();
  }
}

export function infoField(info: Reply, field: string): string | undefined {
  const m = new RegExp(`^${field}:(.*)\r$`, 'm').exec(String(info));
  return m?.[1];
}

export function processAlive(server: RunningServer): boolean {
  return server.proc.exitCode === null && server.proc.signalCode === null;
}


/** Round-trip times of PINGs sent one after another on a separate connection while something runs. */
export interface PingStats {
  count: number;
  maxMs: number;
  p50Ms: number;
  p99Ms: number;
}

/**
 * The probe's loop, run in a worker thread: its timing must not include this process's own work
 * (building big payloads, opening thousands of sockets), only the server's. PING, wait for +PONG,
 * record the round trip, pause `gap` ms, until told to stop; then post the times.
 */
const PROBE_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const net = require('node:net');
const { port, gap, password } = workerData;
const times = [];
let stopping = false;
let failure = null;
parentPort.on('message', () => { stopping = true; });
const socket = net.connect({ port, host: '127.0.0.1' }, () => {
  socket.setNoDelay(true);
  if (password === undefined) return next();
  authing = true;
  socket.write('AUTH ' + password + '\\r\\n');
});
socket.on('error', (e) => { failure = e.message; finish(); });
let authing = false;
let buf = '';
let t0 = 0;
let timer = null;
function next() {
  // At least one round trip, however early the stop comes (a loaded machine may not have connected yet).
  if (stopping && times.length > 0) return finish();
  buf = '';
  t0 = performance.now();
  timer = setTimeout(() => { failure = 'no PONG within 5 s'; finish(); }, 5000);
  socket.write('PING\\r\\n');
}
socket.on('data', (d) => {
  buf += d.toString('latin1');
  if (authing) {
    if (buf.length < 5) return;
    authing = false;
    if (buf !== '+OK\\r\\n') { failure = 'AUTH answered ' + JSON.stringify(buf); return finish(); }
    return next();
  }
  if (buf.length < 7) return;
  clearTimeout(timer);
  times.push(performance.now() - t0);
  if (buf !== '+PONG\\r\\n') { failure = 'PING answered ' + JSON.stringify(buf); return finish(); }
  setTimeout(next, gap);
});
function finish() {
  socket.destroy();
  parentPort.postMessage({ times, failure });
}
`;

/**
 * Starts PINGing `port` from its own connection in a worker thread, one PING at a time with `gapMs`
 * between them, until `stop()`; returns the round-trip statistics. A PING that gets no answer
 * within 5 s (or a wrong answer) fails the stop(). With `password`, the connection AUTHs first.
 */
export async function startPingProbe(port: number, gapMs = 5, password?: string): Promise<{ stop(): Promise<PingStats> }> {
  const worker = new Worker(PROBE_WORKER, { eval: true, workerData: { port, gap: gapMs, password } });
  const result = new Promise<{ times: number[]; failure: string | null }>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  await delay(20); // connected and pinging
  return {
    async stop() {
      worker.postMessage('stop');
      const { times, failure } = await result;
      await worker.terminate();
      if (failure !== null) throw new Error(`ping probe: ${failure}`);
      const sorted = [...times].sort((a, b) => a - b);
      const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
      return { count: sorted.length, maxMs: sorted[sorted.length - 1] ?? 0, p50Ms: at(0.5), p99Ms: at(0.99) };
    },
  };
}

/** `used_memory_heap` after a full GC (DEBUG GC), the live heap: for before/after comparisons. */
export async function liveMemory(checker: Checker): Promise<number> {
  await checker.call('DEBUG', 'GC');
  return Number(infoField(await checker.call('INFO', 'memory'), 'used_memory_heap'));
}
