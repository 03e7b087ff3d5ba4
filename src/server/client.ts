/**
 * One client connection: it owns framing (bytes in → commands, replies out) and the per-connection
 * state Redis keeps (protocol version, name, auth, library info). Executing a command is the
 * server's job; the connection only hands it argument vectors, in order.
 */
import type { Socket } from 'node:net';
import { ProtocolError, RequestParser } from '../protocol/request-parser.js';
import type { Protocol } from '../protocol/reply-writer.js';
import type { Server } from './server.js';

/** Stop reading from a client whose unsent replies exceed this (it pipelines without reading). */
const OUTPUT_PAUSE_BYTES = 64 * 1024 * 1024;

export class Client {
  readonly parser: RequestParser;
  proto: Protocol = 2;
  name = '';
  libName = '';
  libVer = '';
  authenticated: boolean;
  noEvict = false;
  readonly createdMs = Date.now();
  lastInteractionMs = Date.now();
  lastCommand = 'NULL';
  /** Set by QUIT, protocol errors and kills: no more commands run, the socket ends after the reply. */
  closing = false;
  readonly addr: string;
  readonly laddr: string;

  constructor(
    readonly id: number,
    readonly socket: Socket,
    private readonly server: Server,
  ) {
    this.parser = new RequestParser({ maxBulkBytes: server.config.int('proto-max-bulk-len') });
    this.authenticated = server.config.get('requirepass') === '';
    this.addr = formatAddress(socket.remoteAddress, socket.remotePort);
    this.laddr = formatAddress(socket.localAddress, socket.localPort);
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('drain', () => socket.resume());
    socket.on('error', () => {
      /* ECONNRESET and friends: 'close' follows and cleans up. */
    });
    socket.on('close', () => server.removeClient(this));
  }

  private onData(chunk: Buffer): void {
    if (this.closing) return;
    this.lastInteractionMs = Date.now();
    this.server.stats.netInputBytes += chunk.length;
    this.parser.feed(chunk);
    this.server.beginBatch();
    const writer = this.server.writer;
    writer.proto = this.proto;
    for (;;) {
      const result = this.parser.next(this.authenticated);
      if (result === null) break;
      if (result instanceof ProtocolError) {
        writer.error(`ERR Protocol error: ${result.message}`);
        this.server.log.verbose('protocol error from client', { id: this.id, addr: this.addr, error: result.message });
        this.closing = true;
        break;
      }
      this.server.execute(this, result);
      writer.proto = this.proto; // HELLO may have switched it
      if (this.closing) break;
    }
    this.flush();
    if (this.closing) {
      this.endAfterReplies();
      return;
    }
    if (this.parser.pendingBytes > this.server.config.int('client-query-buffer-limit')) {
      this.server.log.warning('closing client that reached max query buffer length', { id: this.id, addr: this.addr, qbuf: this.parser.pendingBytes });
      this.socket.destroy();
    }
  }

  /** Sends everything the shared writer holds for this client in one socket write. */
  flush(): void {
    const writer = this.server.writer;
    if (writer.length === 0) return;
    const out = writer.take();
    this.server.stats.netOutputBytes += out.length;
    if (this.socket.destroyed) return;
    this.socket.write(out);
    if (this.socket.writableLength > OUTPUT_PAUSE_BYTES) this.socket.pause();
  }

  /** Closes the connection after what was already written (QUIT, kills, shutdown). */
  close(): void {
    this.closing = true;
    this.endAfterReplies();
  }

  /**
   * Sends what is queued, then releases the socket, as Redis frees a CLOSE_AFTER_REPLY client.
   * A half-close (`end()` alone) is not enough: a peer that never closes its side (or keeps
   * writing after a protocol error) would hold the connection, its fd and a maxclients slot
   * forever, and its further writes would be silently swallowed instead of failing.
   */
  private endAfterReplies(): void {
    this.socket.destroySoon();
  }
}

function formatAddress(address: string | undefined, port: number | undefined): string {
  if (address === undefined) return '?:0';
  const host = address.startsWith('::ffff:') ? address.slice(7) : address;
  return `${host}:${port ?? 0}`;
}
