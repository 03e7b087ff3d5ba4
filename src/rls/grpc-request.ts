/**
 * One unary call's request message as it arrives on its HTTP/2 stream, and the bounds on what
 * unfinished messages may hold.
 *
 * A message that comes whole in one DATA chunk (every request Envoy sends below ~16 KB) is decoded
 * from that chunk and never held. One that spans chunks is held, as copies of its pieces, until its
 * last byte: those bytes are what a peer can make the server keep by announcing a message and not
 * finishing it, so they are counted three ways at the moment they arrive:
 *  - per connection, against `rls-max-unfinished-bytes-per-connection` (the memory account of the
 *    connection: INFO clients_total_memory and mem_clients_normal, limited by maxmemory-clients);
 *  - per process, against `rls-max-unfinished-bytes`;
 *  - in time: a call whose message is not complete `rls-message-timeout` ms after its stream opened
 *    is ended (DEADLINE_EXCEEDED), whatever it holds.
 * A chunk that would cross either byte budget ends its call with RESOURCE_EXHAUSTED, the stream is
 * reset (the peer stops sending) and everything the call held is released at once; so is what a
 * call holds when its stream closes or its connection goes, however that happens.
 */
import type http2 from 'node:http2';
import { performance } from 'node:perf_hooks';
import { answerError, GrpcStatus, MESSAGE_HEADER_BYTES, type GrpcCode } from './grpc-wire.js';

/** The process's side: the budgets, what is held now, the calls waiting for their message (oldest first). */
export class MessageBudget {
  /** Bytes held in unfinished messages now, over every connection (INFO rls_unfinished_bytes). */
  held = 0;
  /** Calls ended because a budget would have been crossed, and because their message came too slowly. */
  budgetResets = 0;
  timeouts = 0;
  /** Calls whose message is not complete yet, in the order their streams opened (a Set keeps insertion order). */
  readonly waiting = new Set<UnaryRequest>();

  constructor(
    readonly processLimit: number,
    readonly connectionLimit: number,
    readonly maxMessageBytes: number,
    readonly timeoutMs: number,
  ) {}

  /** Ends the calls whose message is late; the oldest come first, so the walk stops at the first on time. */
  expire(nowMs: number): void {
    for (const request of this.waiting) {
      if (nowMs - request.openedMs < this.timeoutMs) return;
      this.timeouts++;
      request.fail(GrpcStatus.DEADLINE_EXCEEDED, `the request message was not complete within ${this.timeoutMs} ms (rls-message-timeout)`);
    }
  }
}

/** The connection's side: its share of the held bytes (its memory account follows it). */
export interface HeldBytes {
  held: number;
  /** `delta` bytes more (or fewer) held by the connection's calls. */
  charge(delta: number): void;
}

const EMPTY = Buffer.alloc(0);

export class UnaryRequest {
  /** When the stream opened (performance.now()): the message deadline counts from here. */
  readonly openedMs = performance.now();
  private head: Buffer | null = null;
  private headFill = 0;
  private expected = -1;
  private parts: Buffer[] = [];
  private received = 0;
  /** Bytes this call holds now (counted in the connection's and the process's figures). */
  private held = 0;
  private done = false;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    private readonly connection: HeldBytes,
    private readonly budget: MessageBudget,
    private readonly onMessage: (message: Buffer) => void,
  ) {
    budget.waiting.add(this);
  }

  /** A DATA chunk of the stream. Linear in its length; at most one message is taken (unary). */
  push(chunk: Buffer): void {
    let off = 0;
    while (off < chunk.length && !this.done) {
      if (this.expected < 0) {
        let flags: number;
        let length: number;
        if (this.headFill === 0 && chunk.length - off >= MESSAGE_HEADER_BYTES) {
          flags = chunk[off];
          length = chunk.readUInt32BE(off + 1);
          off += MESSAGE_HEADER_BYTES;
        } else {
          // The length prefix split across chunks (a peer may send it a byte at a time).
          this.head ??= Buffer.alloc(MESSAGE_HEADER_BYTES);
          const take = Math.min(MESSAGE_HEADER_BYTES - this.headFill, chunk.length - off);
          chunk.copy(this.head, this.headFill, off, off + take);
          this.headFill += take;
          off += take;
          if (this.headFill < MESSAGE_HEADER_BYTES) return;
          flags = this.head[0];
          length = this.head.readUInt32BE(1);
        }
        if ((flags & 1) !== 0) {
          // No grpc-accept-encoding but identity is offered in answers; a client that compresses anyway is told so.
          this.fail(GrpcStatus.UNIMPLEMENTED, 'compressed messages are not accepted (grpc-accept-encoding: identity)');
          return;
        }
        if (length > this.budget.maxMessageBytes) {
          // Refused from the prefix alone, before any of it is held (grpc-js's wording).
          this.fail(GrpcStatus.RESOURCE_EXHAUSTED, `Received message larger than max (${length} vs. ${this.budget.maxMessageBytes})`);
          return;
        }
        this.expected = length;
        if (length === 0) this.complete(EMPTY);
        continue;
      }
      const take = Math.min(this.expected - this.received, chunk.length - off);
      if (this.received === 0 && take === this.expected) {
        // The whole message in this chunk: decoded from it, never held.
        this.complete(chunk.subarray(off, off + take));
        return;
      }
      if (!this.hold(take)) return;
      // A copy: a slice would keep the whole chunk it came from alive, beyond what is counted.
      this.parts.push(Buffer.from(chunk.subarray(off, off + take)));
      this.received += take;
      off += take;
      if (this.received === this.expected) this.complete(Buffer.concat(this.parts, this.expected));
    }
  }

  /** The peer ended its side: without a complete message, the call fails. */
  end(): void {
    if (this.done) return;
    this.fail(GrpcStatus.INTERNAL, this.expected < 0 && this.headFill === 0 ? 'the request had no message' : 'the request ended before its message was complete');
  }

  /** The stream is gone (reset, or its connection closed): what it held goes. */
  closed(): void {
    if (this.done) return;
    this.done = true;
    this.release();
  }

  /** Ends the call with `code`, resets the stream, releases what it held. */
  fail(code: GrpcCode, message: string): void {
    if (this.done) return;
    this.done = true;
    this.release();
    answerError(this.stream, code, message, true);
  }

  private complete(message: Buffer): void {
    this.done = true;
    this.release();
    this.onMessage(message);
  }

  /** Counts `n` more bytes held, unless that would cross a budget (then the call ends). */
  private hold(n: number): boolean {
    const b = this.budget;
    if (this.connection.held + n > b.connectionLimit || b.held + n > b.processLimit) {
      b.budgetResets++;
      const which = this.connection.held + n > b.connectionLimit
        ? `this connection's unfinished messages would hold more than ${b.connectionLimit} bytes (rls-max-unfinished-bytes-per-connection)`
        : `unfinished messages would hold more than ${b.processLimit} bytes in all (rls-max-unfinished-bytes)`;
      this.fail(GrpcStatus.RESOURCE_EXHAUSTED, which);
      return false;
    }
    this.held += n;
    b.held += n;
    this.connection.charge(n);
    return true;
  }

  private release(): void {
    this.budget.waiting.delete(this);
    if (this.held > 0) {
      this.budget.held -= this.held;
      this.connection.charge(-this.held);
      this.held = 0;
    }
    this.parts = [];
    this.head = null;
  }
}
