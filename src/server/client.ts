/**
 * One client connection: it owns framing (bytes in → commands, replies out), its input and output
 * limits, and the per-connection state Redis keeps (protocol version, name, auth,
 * library info). Executing a command is the dispatcher's job (dispatch.ts); the connection only
 * hands it argument vectors, in order. Replies stay in command order two ways: a command whose reply
 * comes after an asynchronous step that must finish first (hold(): CONFIG SET port/bind) stops
 * the client's later commands; a backend call (defer()) lets them run and keeps their replies
 * behind its own (ordered-replies.ts).
 */
import type { User } from '../acl/users.js';
import type { Socket } from 'node:net';
import { ProtocolError, RequestParser, UNAUTH_MAX_REQUEST_BYTES } from '../protocol/request-parser.js';
import type { Protocol, ReplyWriter } from '../protocol/reply-writer.js';
import type { Server } from './server.js';
import { errorText } from './tasks.js';
import { ClientMemory, DEFERRED_CALL_BYTES, type AccountHolder } from './client-memory.js';
import type { Transaction, Watching } from './transaction.js';
import { OrderedReplies } from './ordered-replies.js';

/**
 * Replies waiting for a client that is not reading them do not stop its input: as Redis, the server
 * reads on and runs what arrives, and the replies wait in the client's output (counted in its memory,
 * CLIENT LIST omem, maxmemory-clients) until `client-output-buffer-limit` closes it. Pausing the
 * input instead deadlocks every client library whose pipeline writes all its commands before reading
 * a reply (redis-py, go-redis, Jedis): the client blocks writing, the server waits for it to read.
 * Only with no hard limit configured (`0`) does the server stop reading, at this many waiting bytes,
 * so that nothing grows without bound, and it goes on when the socket drains.
 */
export const OUTPUT_PAUSE_WITHOUT_LIMIT_BYTES = 256 * 1024 * 1024;
/**
 * Before authentication the query buffer may hold at most the largest request a client may send
 * then (10 arguments of 16 KiB, see request-parser.ts), not Redis 7.4's 1 MB: a thousand clients
 * that never authenticate then pin ~160 MB at most, not a gigabyte.
 */
export const UNAUTH_QUERY_BUFFER_BYTES = UNAUTH_MAX_REQUEST_BYTES;
/**
 * Before authentication at most this many reply bytes may wait for a client (whatever
 * client-output-buffer-limit says): a client that sends junk without reading its -NOAUTH errors is
 * closed here instead of being read on up to the hard limit. Any pre-auth reply (AUTH, HELLO, PING)
 * is far smaller.
 */
export const UNAUTH_OUTPUT_BYTES = 64 * 1024;

/**
 * Replies a client may have waiting on the backend at once (pipelined limiter calls); beyond it its
 * later commands wait (its socket paused) until half are answered.
 */
export const MAX_DEFERRED_REPLIES = 1024;

export class Client implements AccountHolder {
  readonly parser: RequestParser;
  /** Everything this client holds, counted where it changes (src/server/client-memory.ts). */
  readonly memory = new ClientMemory();
  proto: Protocol = 2;
  name = '';
  libName = '';
  libVer = '';
  authenticated: boolean;
  /** The ACL user (src/acl/users.ts): `default` until AUTH as another one succeeds. */
  user: User;
  noEvict = false;
  readonly createdMs = Date.now();
  lastInteractionMs = Date.now();
  lastCommand = 'NULL';
  /** The queue between MULTI and EXEC/DISCARD, or null (see transaction.ts). */
  multi: Transaction | null = null;
  /** The keys WATCHed since the last EXEC/DISCARD/UNWATCH, or null. */
  watching: Watching | null = null;
  /** Watches this client ended that are still being freed in slices (src/server/watch-release.ts), and their bytes. */
  watchesFreeing = 0;
  watchesFreeingBytes = 0;
  /** Set by QUIT, protocol errors and kills: no more commands run, the socket ends after the reply. */
  closing = false;
  /** Reading and executing stopped until the socket drains (only without a hard output limit, see above). */
  private waitingForDrain = false;
  /** Since when (Date.now() ms) the unsent output has been above the soft limit; 0 = it is not. */
  private softLimitSinceMs = 0;
  readonly addr: string;
  readonly laddr: string;

  constructor(
    readonly id: number,
    readonly socket: Socket,
    private readonly server: Server,
    /** The unix socket's path for a client connected through it (CLIENT LIST shows `addr=<path>:0`, as Redis). */
    unixPath?: string,
  ) {
    this.parser = new RequestParser({ maxBulkBytes: server.config.int('proto-max-bulk-len') });
    this.user = server.acl.defaultUser;
    this.authenticated = !server.authRequired;
    this.addr = unixPath !== undefined ? `${unixPath}:0` : formatAddress(socket.remoteAddress, socket.remotePort);
    this.laddr = unixPath !== undefined ? `${unixPath}:0` : formatAddress(socket.localAddress, socket.localPort);
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('drain', () => this.onDrain());
    // The peer closed its side: Node ends ours right after this event, so replies still waiting for
    // the end of the turn go now (a pipeline read to its FIN in one turn had them refused, EPIPE).
    socket.on('end', () => this.sendPending());
    socket.on('error', () => {
      /* ECONNRESET and friends: 'close' follows and cleans up. */
    });
    socket.on('close', () => {
      this.discardTransaction();
      server.removeClient(this);
    });
  }

  /** Leaves MULTI and drops every WATCH (DISCARD, EXEC, RESET, a closed connection), as Redis's discardTransaction. */
  discardTransaction(): void {
    if (this.multi !== null) {
      this.multi = null;
      this.server.clientsMemory.set(this, 'multi', 0);
    }
    this.dropWatches();
  }

  /**
   * Ends this client's WATCHes (UNWATCH, EXEC, DISCARD, RESET, a closed connection): from now on
   * nothing marks it; a big set leaves the keyspace's watch index in slices (src/server/watch-release.ts).
   */
  dropWatches(): void {
    const w = this.watching;
    if (w === null) return;
    this.watching = null;
    this.server.releaseWatches(w, this);
    this.accountWatches();
  }

  /** Accounts the watches: those held, and those ended but still being freed. */
  accountWatches(): void {
    this.server.clientsMemory.set(this, 'watch', (this.watching === null ? 0 : this.watching.bytes) + this.watchesFreeingBytes);
  }

  /** Accounts the name and library fields (CLIENT SETNAME, SETINFO, HELLO SETNAME): each a one-byte string. */
  accountFields(): void {
    const bytes = stringBytes(this.name) + stringBytes(this.libName) + stringBytes(this.libVer);
    this.server.clientsMemory.set(this, 'fields', bytes);
  }

  /** Accounts the query buffer and the unsent output (after a read, a batch, and periodically). */
  accountBuffers(): void {
    const accounts = this.server.clientsMemory;
    accounts.set(this, 'query', this.parser.heldBytes);
    accounts.set(this, 'output', this.outputBytes);
  }

  /**
   * Closed by client eviction (`maxmemory-clients`, see client-memory.ts): its account already left
   * the sum. Logged at most once a second (an attack evicts many), counted in INFO evicted_clients.
   */
  evictForMemory(limitBytes: number): void {
    const message = `Evicting client: id=${this.id} addr=${this.addr} name=${this.name.slice(0, 128)} tot-mem=${this.memory.total} (maxmemory-clients ${limitBytes})`;
    this.server.tasks.warnLimited('client eviction', message, { id: this.id, addr: this.addr, totMem: this.memory.total, limit: limitBytes });
    this.kill();
  }

  /** Unsent reply bytes (CLIENT LIST omem, output limits). */
  get outputBytes(): number {
    return this.socket.writableLength + (this.pendingOut === null ? 0 : this.pendingOut.length) + this.ordered.queuedBytes;
  }

  /** Whether reading is stopped (CLIENT LIST events). */
  get readPaused(): boolean {
    return this.waitingForDrain;
  }

  private onData(chunk: Buffer): void {
    if (this.closing) return;
    this.lastInteractionMs = Date.now();
    this.server.stats.netInputBytes += chunk.length;
    this.parser.feed(chunk);
    this.server.clientsMemory.set(this, 'query', this.parser.heldBytes);
    if (this.closing) return; // evicted: the input grew the clients' memory over maxmemory-clients
    if (this.waitingForDrain) return; // bytes already read when the socket was paused: run them on drain
    this.processGuarded();
  }

  private onDrain(): void {
    if (!this.waitingForDrain || this.closing) return;
    this.waitingForDrain = false;
    this.processGuarded();
    if (!this.waitingForDrain && !this.closing && !this.held && !this.socket.destroyed) this.socket.resume();
  }

  /**
   * processInput from a socket event: an exception there (commands' own are answered by the
   * dispatcher, so this would be a bug in framing) closes this connection only, logged, instead of
   * ending the process.
   */
  private processGuarded(): void {
    try {
      this.processInput();
      this.accountBuffers();
    } catch (e) {
      this.discardReplies();
      const reason = errorText(e);
      this.server.tasks.warnLimited('client input', `internal error serving client id=${this.id} addr=${this.addr}, closing it: ${reason}`, { id: this.id, addr: this.addr, error: reason });
      this.kill();
    }
  }

  /** A command's reply is still to come (hold()): later commands wait, so replies stay in order. */
  private held = false;

  /**
   * For a command whose reply comes after an asynchronous step (CONFIG SET port/bind binds new
   * listeners): this client's later commands wait, and the returned function, called once, writes
   * the reply through `write` (into the shared writer), sends it and goes on with what arrived.
   */
  hold(): (write: (reply: ReplyWriter) => void) => void {
    this.held = true;
    this.socket.pause();
    return (write) => {
      this.held = false;
      if (this.socket.destroyed) return;
      const writer = this.server.writer;
      writer.proto = this.proto;
      this.server.dispatcher.beginBatch(this);
      write(writer);
      this.processGuarded();
      if (!this.waitingForDrain && !this.closing && !this.socket.destroyed) this.socket.resume();
    };
  }

  /** Whether the client waits in a blocking command (RL.ACQUIRE ... WAIT): CLIENT LIST flag `b`. */
  blocked = false;

  /**
   * For a blocking command (RL.ACQUIRE ... WAIT), as Redis blocks BLPOP: the client's later commands
   * wait unread and unrun (their replies too) until the returned function, called once, writes the
   * reply (in its place, through a deferred reply: it may be called while another client's commands
   * run); the commands that arrived meanwhile run in a later turn.
   */
  block(): (write: (reply: ReplyWriter) => void) => void {
    const reply = this.defer();
    this.held = true;
    this.blocked = true;
    this.socket.pause();
    return (write) => {
      if (!this.blocked) return;
      reply(write);
      this.blocked = false;
      this.held = false;
      if (this.socket.destroyed) return;
      setImmediate(() => {
        if (this.held || this.closing || this.socket.destroyed) return;
        this.processGuarded();
        if (!this.waitingForDrain && !this.waitingForBackend && !this.closing && !this.held && !this.socket.destroyed) this.socket.resume();
      });
    };
  }

  /** Runs the complete commands in the query buffer, sends their replies, then applies the limits. */
  private processInput(): void {
    if (this.held || this.waitingForBackend) return;
    this.server.dispatcher.beginBatch(this);
    const writer = this.server.writer;
    writer.proto = this.proto;
    let authenticated = this.authenticated;
    let hardBytes = outputHardLimit(this.server.outputLimit.hardBytes, authenticated);
    const queued = this.outputBytes;
    // The replies of this batch stop at the hard limit (disconnect), or without one at the pause.
    let stopAt = readOnLimit(hardBytes);
    let backpressure = false;
    for (;;) {
      if (queued + writer.length > stopAt) {
        if (!authenticated && this.authenticated) {
          // AUTH succeeded earlier in this batch: the rest of it has the limits of an authenticated client.
          authenticated = true;
          hardBytes = outputHardLimit(this.server.outputLimit.hardBytes, true);
          stopAt = readOnLimit(hardBytes);
          continue;
        }
        if (hardBytes > 0 && queued + writer.length > hardBytes) {
          this.closeForOutputLimit(queued + writer.length);
          return;
        }
        backpressure = true;
        break;
      }
      const result = this.parser.next(this.authenticated);
      if (result === null) break;
      if (result instanceof ProtocolError) {
        writer.error(`ERR Protocol error: ${result.message}`);
        this.server.log.verbose('protocol error from client', { id: this.id, addr: this.addr, error: result.message });
        this.closing = true;
        break;
      }
      if (this.multi === null) this.server.dispatcher.execute(this, result);
      else this.server.dispatcher.executeInMulti(this, result);
      writer.proto = this.proto; // HELLO may have switched it
      if (this.closing || this.held) break;
      if (this.ordered.pending >= MAX_DEFERRED_REPLIES) {
        // Backend calls in flight for this client: the rest waits until some are answered.
        this.waitingForBackend = true;
        this.socket.pause();
        break;
      }
    }
    if (!this.closing && hardBytes > 0 && queued + writer.length > hardBytes) {
      this.closeForOutputLimit(queued + writer.length);
      return;
    }
    if (!this.closing && !backpressure && this.socket.writableLength === 0) {
      // The usual case: nothing queued on the socket, so no limit can be near; the replies go out at
      // the end of this event-loop turn (Server.toFlush).
      this.deferFlush();
      this.checkQueryBuffer();
      return;
    }
    this.flush();
    if (this.closing) {
      this.endAfterReplies();
      return;
    }
    if (this.socket.destroyed) return;
    if (!this.checkSoftOutputLimit(Date.now())) return;
    if (backpressure || (hardBytes === 0 && this.socket.writableLength > OUTPUT_PAUSE_WITHOUT_LIMIT_BYTES)) {
      this.waitingForDrain = true;
      this.socket.pause();
      // 'drain' comes only after a write the socket refused; if everything already left, go on now.
      if (!this.socket.writableNeedDrain) this.server.tasks.soon('client drain', () => this.onDrain());
      return;
    }
    this.checkQueryBuffer();
  }

  /**
   * The query buffer limits, as Redis's readQueryFromClient: `client-query-buffer-limit`, and
   * UNAUTH_QUERY_BUFFER_BYTES before authentication (the pre-auth argument limits keep a command
   * under that, so only a client that is not speaking RESP gets there). The client is closed without
   * a reply, as Redis does.
   */
  private checkQueryBuffer(): void {
    const pending = this.parser.pendingBytes;
    if (pending === 0) return; // the usual case after a batch; spares reading the setting
    const limit = this.authenticated ? this.server.config.int('client-query-buffer-limit') : Math.min(UNAUTH_QUERY_BUFFER_BYTES, this.server.config.int('client-query-buffer-limit'));
    if (pending > limit) this.closeForQueryBuffer(pending);
  }

  /**
   * The query buffer limit was passed (by pending input, or by input plus a MULTI queue: see
   * Dispatcher.queue): closed without a reply, as Redis does.
   */
  closeForQueryBuffer(bytes: number): void {
    this.server.stats.queryBufferLimitDisconnections++;
    this.server.log.warning(`Closing client that reached max query buffer length: id=${this.id} addr=${this.addr} qbuf=${bytes}`, { id: this.id, addr: this.addr, qbuf: bytes });
    this.discardReplies();
    this.closing = true;
    this.socket.destroy();
  }

  /** Drops this batch's replies (the connection is being closed). */
  private discardReplies(): void {
    this.server.writer.discard();
    this.ordered.dropMarks();
  }

  /**
   * The soft output limit: unsent output above `soft` bytes for more than `soft-seconds` closes the
   * client (checked after each batch and by the periodic task, since a paused client runs no
   * batches). Returns false if the client was closed.
   */
  checkSoftOutputLimit(nowMs: number): boolean {
    const { softBytes, softSeconds } = this.server.outputLimit;
    const pending = this.socket.writableLength;
    if (softBytes === 0 || pending <= softBytes) {
      this.softLimitSinceMs = 0;
      return true;
    }
    if (this.softLimitSinceMs === 0) this.softLimitSinceMs = nowMs;
    if (nowMs - this.softLimitSinceMs < softSeconds * 1000) return true;
    this.closeForOutputLimit(pending);
    return false;
  }

  /** Redis's "scheduled to be closed ASAP for overcoming of output buffer limits": no more replies. */
  private closeForOutputLimit(pendingBytes: number): void {
    this.discardReplies();
    this.server.stats.outputLimitDisconnections++;
    const message = `Client id=${this.id} addr=${this.addr} omem=${pendingBytes} scheduled to be closed ASAP for overcoming of output buffer limits.`;
    const fields = { id: this.id, addr: this.addr, omem: pendingBytes };
    // Unauthenticated junk senders come by the thousand: at most one line a second for them.
    if (this.authenticated) this.server.log.warning(message, fields);
    else this.server.tasks.warnLimited('unauthenticated output limit', message, fields);
    this.closing = true;
    this.socket.destroy();
  }

  /** Sends everything the shared writer holds for this client in one socket write. */
  flush(): void {
    // Replies leave here without Server.flushPending: the turn's journal records go first.
    this.server.journal.commit();
    this.sendPending();
    const out = this.takeReplies();
    if (out !== null && !this.socket.destroyed) this.socket.write(out);
  }

  /** Replies of this event-loop turn, sent once every readable client has been served. */
  private pendingOut: Buffer | null = null;

  /** Has the server send this client's replies at the end of this turn. */
  private deferFlush(): void {
    this.sendPending();
    this.pendingOut = this.takeReplies();
    if (this.pendingOut !== null) this.server.flushLater(this);
  }

  /** The shared writer's replies for this client (counted as output), or null if there are none. */
  private takeReplies(): Buffer | null {
    const writer = this.server.writer;
    if (this.ordered.marked) {
      const all = writer.take();
      this.server.stats.netOutputBytes += all.length;
      return this.ordered.takeAround(all);
    }
    if (writer.length === 0) return null;
    if (this.ordered.waiting) {
      // A reply is still to come from the backend: these go after it.
      const out = writer.take();
      this.server.stats.netOutputBytes += out.length;
      this.ordered.enqueue(out);
      return null;
    }
    const out = writer.take();
    this.server.stats.netOutputBytes += out.length;
    return out;
  }

  /** Replies that come later (a backend call), kept in order with the others (ordered-replies.ts). */
  private readonly ordered = new OrderedReplies();
  /** Reading and executing stopped until some of the MAX_DEFERRED_REPLIES are answered. */
  private waitingForBackend = false;
  /** A deferred reply was written since the queue was last sent (a flush is scheduled). */
  private queueReady = false;
  /** close() came while replies were deferred: end the socket once the queue is empty. */
  private endWhenSent = false;

  /**
   * For a command whose reply comes after an asynchronous call (the backend): marks its place, so
   * later commands go on running and their replies wait behind it. The returned function, called
   * once, writes the reply (with the protocol of the time of the command) and sends what is ready.
   */
  defer(): (write: (reply: ReplyWriter) => void) => void {
    const ordered = this.ordered;
    const slot = ordered.mark(this.server.writer.length);
    this.server.clientsMemory.set(this, 'deferred', ordered.pending * DEFERRED_CALL_BYTES);
    const proto = this.proto;
    return (write) => {
      if (slot.bytes !== null) return;
      const writer = this.server.asyncWriter;
      writer.proto = proto;
      try {
        write(writer);
      } catch (e) {
        // The reply must come whatever happened, or this client's later replies would wait forever.
        writer.discard();
        writer.error('ERR internal error');
        this.server.tasks.warnLimited('deferred reply', `internal error answering client id=${this.id}: ${errorText(e)}`, { id: this.id, error: errorText(e) });
      }
      const bytes = writer.take();
      ordered.fill(slot, bytes);
      this.server.stats.netOutputBytes += bytes.length;
      this.server.clientsMemory.set(this, 'deferred', ordered.pending * DEFERRED_CALL_BYTES);
      // The backend answers a pipeline's calls together: send them together at the end of the turn
      // (Server.flushLater), one socket write instead of one per reply.
      if (!this.queueReady) {
        this.queueReady = true;
        this.server.flushLater(this);
      }
      if (this.waitingForBackend && ordered.pending < MAX_DEFERRED_REPLIES / 2 && !this.socket.destroyed) {
        this.waitingForBackend = false;
        this.processGuarded();
        if (!this.waitingForBackend && !this.waitingForDrain && !this.closing && !this.held && !this.socket.destroyed) this.socket.resume();
      }
    };
  }

  /** Sends the queue's ready prefix (up to the first reply still missing); after pendingOut (sendPending). */
  private sendQueued(): void {
    this.queueReady = false;
    if (this.socket.destroyed) {
      this.ordered.clear();
      return;
    }
    const ready = this.ordered.takeReady();
    if (ready !== null) this.socket.write(ready);
    if (!this.ordered.waiting && this.endWhenSent) this.socket.destroySoon();
  }

  /** Sends the deferred replies, if any (before anything written after them). */
  sendPending(): void {
    const out = this.pendingOut;
    if (out !== null) {
      this.server.journal.commit();
      this.pendingOut = null;
      if (!this.socket.destroyed) this.socket.write(out);
    }
    if (this.queueReady) this.sendQueued();
  }

  /** Closes the connection now, replies or not (CLIENT KILL of another client, timeouts). */
  kill(): void {
    this.closing = true;
    this.socket.destroy();
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
    if (this.ordered.waiting) {
      this.endWhenSent = true;
      return;
    }
    this.socket.destroySoon();
  }
}

/** Waiting reply bytes up to which a client's input is read on (see OUTPUT_PAUSE_WITHOUT_LIMIT_BYTES). */
function readOnLimit(hardBytes: number): number {
  return hardBytes > 0 ? hardBytes : OUTPUT_PAUSE_WITHOUT_LIMIT_BYTES;
}

/** The hard output limit of a batch: client-output-buffer-limit, and UNAUTH_OUTPUT_BYTES before AUTH. */
function outputHardLimit(hardBytes: number, authenticated: boolean): number {
  if (authenticated) return hardBytes;
  return hardBytes > 0 ? Math.min(hardBytes, UNAUTH_OUTPUT_BYTES) : UNAUTH_OUTPUT_BYTES;
}

/** V8's one-byte string: a 16-byte header, the bytes rounded up to 8 (names are printable ASCII). */
function stringBytes(s: string): number {
  return s.length === 0 ? 0 : 16 + ((s.length + 7) & ~7);
}

function formatAddress(address: string | undefined, port: number | undefined): string {
  if (address === undefined) return '?:0';
  const host = address.startsWith('::ffff:') ? address.slice(7) : address;
  return `${host}:${port ?? 0}`;
}
