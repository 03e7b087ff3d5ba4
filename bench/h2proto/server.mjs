#!/usr/bin/env node
/**
 * An experiment, not part of cellgate: how cheap a unary gRPC call can be in Node without node:http2.
 * A minimal HTTP/2 server over a plain net.Socket (h2c with prior knowledge), the subset a grpc-js client
 * needs, answering ShouldRateLimit with the same fixed response as bench/rls-http2-floor.mjs.
 * bench/h2proto/ab.mjs runs it beside that floor and CL.THROTTLE under the same client.
 *
 * What it does: the connection preface, SETTINGS (read, acked), PING acks, WINDOW_UPDATE both ways
 * (the connection's receive window opened wide and topped up; a stream's topped up past half; the
 * connection's send window honoured, answers queued until the peer opens it), HEADERS + CONTINUATION
 * through a real HPACK decoder (hpack.mjs), DATA holding one 5-byte-prefixed gRPC message, RST_STREAM
 * and GOAWAY from the peer; and an answer per stream: HEADERS (:status 200, content-type), DATA,
 * trailers (grpc-status) with END_STREAM. All output of one 'data' event leaves in one write.
 * What it lacks for production: see the end of this file.
 *
 *   node bench/h2proto/server.mjs <port>     (prints "ready" once it listens)
 */
import net from 'node:net';
import { FIXED_ANSWER_MESSAGE } from '../rls-fixed-answer.mjs';
import { HpackDecoder, HpackError } from './hpack.mjs';

const PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const T = { DATA: 0, HEADERS: 1, PRIORITY: 2, RST_STREAM: 3, SETTINGS: 4, PUSH_PROMISE: 5, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8, CONTINUATION: 9 };
const F = { END_STREAM: 1, ACK: 1, END_HEADERS: 4, PADDED: 8, PRIORITY: 0x20 };
const E = { PROTOCOL_ERROR: 1, FLOW_CONTROL_ERROR: 3, STREAM_CLOSED: 5, FRAME_SIZE_ERROR: 6, REFUSED_STREAM: 7, COMPRESSION_ERROR: 9 };
const MAX_STREAMS = 1000; // SETTINGS_MAX_CONCURRENT_STREAMS we advertise and enforce
const MAX_MESSAGE = 4 * 1024 * 1024; // grpc's default receive limit
const MAX_FRAME = 16384; // our SETTINGS_MAX_FRAME_SIZE (the default)
const MAX_HEADER_BLOCK = 64 * 1024; // HEADERS + CONTINUATION bytes of one block
const CONN_WINDOW = 2 ** 31 - 1;
const STREAM_WINDOW = 65535; // the default initial window: not changed in our SETTINGS

function frameHeader(out, at, len, type, flags, sid) {
  out[at] = len >>> 16;
  out[at + 1] = (len >>> 8) & 0xff;
  out[at + 2] = len & 0xff;
  out[at + 3] = type;
  out[at + 4] = flags;
  out.writeUInt32BE(sid, at + 5);
}

function frame(type, flags, sid, payload) {
  const out = Buffer.allocUnsafe(9 + payload.length);
  frameHeader(out, 0, payload.length, type, flags, sid);
  payload.copy(out, 9);
  return out;
}

const u32 = (n) => {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n);
  return b;
};

// The fixed answer, as bench/rls-http2-floor.mjs gives it.
const message = FIXED_ANSWER_MESSAGE;

// Header blocks with no dynamic table: ':status: 200' is static index 8; the rest literals never
// indexed with a static name (content-type is 31) or a literal name.
const lit = (nameIdx, name, value) => Buffer.concat([
  Buffer.from([0x10 | Math.min(nameIdx, 15)]), ...(nameIdx >= 15 ? [Buffer.from([nameIdx - 15])] : []),
  ...(nameIdx === 0 ? [Buffer.from([name.length]), Buffer.from(name, 'latin1')] : []),
  Buffer.from([value.length]), Buffer.from(value, 'latin1'),
]);
const HEAD = Buffer.concat([Buffer.from([0x88]), lit(31, '', 'application/grpc')]);
const trailerBlock = (status, msg) => Buffer.concat([lit(0, 'grpc-status', String(status)), ...(msg ? [lit(0, 'grpc-message', msg)] : [])]);
const TRAILERS_OK = trailerBlock(0);

/** One answer as a template: HEADERS, DATA, trailers; only the stream id changes (at 5, 9+h+5, ...). */
const ANSWER = (() => {
  const a = Buffer.alloc(27 + HEAD.length + message.length + TRAILERS_OK.length);
  let at = 0;
  frameHeader(a, at, HEAD.length, T.HEADERS, F.END_HEADERS, 0);
  HEAD.copy(a, at + 9);
  at += 9 + HEAD.length;
  frameHeader(a, at, message.length, T.DATA, 0, 0);
  message.copy(a, at + 9);
  at += 9 + message.length;
  frameHeader(a, at, TRAILERS_OK.length, T.HEADERS, F.END_HEADERS | F.END_STREAM, 0);
  TRAILERS_OK.copy(a, at + 9);
  return a;
})();
const SID_AT = [5, 9 + HEAD.length + 5, 18 + HEAD.length + message.length + 5];

/** A trailers-only answer (an error status): one HEADERS frame with END_STREAM. */
function errorAnswer(sid, status, msg) {
  return frame(T.HEADERS, F.END_HEADERS | F.END_STREAM, sid, Buffer.concat([HEAD, trailerBlock(status, msg)]));
}

// Reads and calls, printed on SIGUSR2 (to stderr): how many calls one 'data' event carries.
const stats = { reads: 0, calls: 0 };
process.on('SIGUSR2', () => process.stderr.write(`h2proto: ${stats.calls} calls in ${stats.reads} reads\n`));

class Connection {
  constructor(socket) {
    this.socket = socket;
    this.pending = null; // bytes not yet a whole frame
    this.prefaceSeen = false;
    this.hpack = new HpackDecoder();
    this.streams = new Map(); // open streams: sid -> { path, chunks, len, unacked }
    this.lastSid = 0;
    this.block = null; // a header block awaiting CONTINUATION: { sid, endStream, parts, len }
    this.sendWindow = 65535; // the peer's connection window for our DATA
    this.peerStreamWindow = 65535; // the peer's SETTINGS_INITIAL_WINDOW_SIZE
    this.peerMaxFrame = 16384;
    this.recvUnacked = 0; // DATA bytes received since our last connection WINDOW_UPDATE
    this.queued = []; // streams whose answer waits for the peer's connection window
    this.out = []; // control frames of this 'data' event
    this.answers = []; // stream ids answered in this 'data' event
    this.closing = false;
    socket.setNoDelay(true);
    socket.on('data', (d) => this.onData(d));
    socket.on('error', () => {});
    // Our preface: SETTINGS (MAX_CONCURRENT_STREAMS), then the connection window opened wide.
    const settings = Buffer.alloc(6);
    settings.writeUInt16BE(3, 0);
    settings.writeUInt32BE(MAX_STREAMS, 2);
    socket.write(Buffer.concat([frame(T.SETTINGS, 0, 0, settings), frame(T.WINDOW_UPDATE, 0, 0, u32(CONN_WINDOW - 65535))]));
  }

  onData(chunk) {
    stats.reads++;
    let buf = this.pending === null ? chunk : Buffer.concat([this.pending, chunk]);
    let at = 0;
    if (!this.prefaceSeen) {
      if (buf.length < PREFACE.length) {
        this.pending = buf;
        return;
      }
      if (!buf.subarray(0, PREFACE.length).equals(PREFACE)) return this.socket.destroy();
      this.prefaceSeen = true;
      at = PREFACE.length;
    }
    try {
      while (buf.length - at >= 9 && !this.closing) {
        const len = (buf[at] << 16) | (buf[at + 1] << 8) | buf[at + 2];
        if (len > MAX_FRAME) return this.goaway(E.FRAME_SIZE_ERROR, 'frame too large');
        if (buf.length - at < 9 + len) break;
        this.onFrame(buf[at + 3], buf[at + 4], buf.readUInt32BE(at + 5) & 0x7fffffff, buf, at + 9, at + 9 + len);
        at += 9 + len;
      }
    } catch (e) {
      if (!(e instanceof HpackError)) throw e;
      this.goaway(E.COMPRESSION_ERROR, e.message);
    }
    this.pending = at === buf.length ? null : buf.subarray(at);
    this.flush();
  }

  onFrame(type, flags, sid, buf, s, e) {
    if (this.block !== null && (type !== T.CONTINUATION || sid !== this.block.sid)) return this.goaway(E.PROTOCOL_ERROR, 'expected CONTINUATION');
    switch (type) {
      case T.DATA: return this.onDataFrame(flags, sid, buf, s, e);
      case T.HEADERS: return this.onHeaders(flags, sid, buf, s, e);
      case T.CONTINUATION: return this.onContinuation(flags, sid, buf, s, e);
      case T.SETTINGS: return this.onSettings(flags, sid, buf, s, e);
      case T.PING:
        if (sid !== 0 || e - s !== 8) return this.goaway(E.PROTOCOL_ERROR, 'bad PING');
        if ((flags & F.ACK) === 0) this.out.push(frame(T.PING, F.ACK, 0, buf.subarray(s, e)));
        return;
      case T.WINDOW_UPDATE: return this.onWindowUpdate(sid, buf, s, e);
      case T.RST_STREAM:
        this.streams.delete(sid);
        return;
      case T.GOAWAY:
        this.closing = true;
        this.socket.end();
        return;
      case T.PUSH_PROMISE: return this.goaway(E.PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
      default: return; // PRIORITY and unknown types are ignored
    }
  }

  onSettings(flags, sid, buf, s, e) {
    if (sid !== 0 || (e - s) % 6 !== 0) return this.goaway(E.FRAME_SIZE_ERROR, 'bad SETTINGS');
    if (flags & F.ACK) return;
    for (let i = s; i < e; i += 6) {
      const id = buf.readUInt16BE(i);
      const v = buf.readUInt32BE(i + 2);
      if (id === 4) {
        if (v > CONN_WINDOW) return this.goaway(E.FLOW_CONTROL_ERROR, 'window too large');
        this.peerStreamWindow = v;
      } else if (id === 5) this.peerMaxFrame = v;
      // 1 (the peer's decoder table) needs nothing: our blocks never use the dynamic table.
    }
    this.out.push(frame(T.SETTINGS, F.ACK, 0, Buffer.alloc(0)));
  }

  onWindowUpdate(sid, buf, s, e) {
    if (e - s !== 4) return this.goaway(E.FRAME_SIZE_ERROR, 'bad WINDOW_UPDATE');
    const inc = buf.readUInt32BE(s) & 0x7fffffff;
    if (sid !== 0) return; // our answers are one small DATA frame: a stream's window is checked whole
    this.sendWindow += inc;
    if (this.sendWindow > CONN_WINDOW) return this.goaway(E.FLOW_CONTROL_ERROR, 'window overflow');
    while (this.queued.length > 0 && this.sendWindow >= message.length) {
      this.sendWindow -= message.length;
      this.answers.push(this.queued.shift());
    }
  }

  onHeaders(flags, sid, buf, s, e) {
    if (sid === 0 || (sid & 1) === 0 || sid <= this.lastSid) return this.goaway(E.PROTOCOL_ERROR, 'bad stream id');
    if (flags & F.PADDED) {
      const pad = buf[s++];
      e -= pad;
      if (e < s) return this.goaway(E.PROTOCOL_ERROR, 'padding');
    }
    if (flags & F.PRIORITY) s += 5;
    this.lastSid = sid;
    const endStream = (flags & F.END_STREAM) !== 0;
    if (flags & F.END_HEADERS) return this.onBlock(sid, endStream, buf, s, e);
    this.block = { sid, endStream, parts: [buf.subarray(s, e)], len: e - s };
  }

  onContinuation(flags, sid, buf, s, e) {
    if (this.block === null) return this.goaway(E.PROTOCOL_ERROR, 'CONTINUATION without HEADERS');
    this.block.parts.push(Buffer.from(buf.subarray(s, e))); // copied: the frames may span 'data' events
    this.block.len += e - s;
    if (this.block.len > MAX_HEADER_BLOCK) return this.goaway(E.PROTOCOL_ERROR, 'header block too large');
    if ((flags & F.END_HEADERS) === 0) return;
    const { endStream, parts } = this.block;
    this.block = null;
    const all = Buffer.concat(parts);
    this.onBlock(sid, endStream, all, 0, all.length);
  }

  /** A whole header block: decoded (always, to keep the HPACK state), then a stream opened or refused. */
  onBlock(sid, endStream, buf, s, e) {
    const list = this.hpack.decode(buf, s, e);
    let path = '';
    for (let i = 0; i < list.length; i += 2) if (list[i] === ':path') path = list[i + 1];
    if (this.streams.size >= MAX_STREAMS) return this.out.push(frame(T.RST_STREAM, 0, sid, u32(E.REFUSED_STREAM)));
    const stream = { path, chunks: [], len: 0, unacked: 0 };
    this.streams.set(sid, stream);
    if (endStream) this.answer(sid, stream);
  }

  onDataFrame(flags, sid, buf, s, e) {
    const size = e - s; // the whole payload counts against the windows, padding included
    this.recvUnacked += size;
    if (this.recvUnacked > CONN_WINDOW / 2) {
      this.out.push(frame(T.WINDOW_UPDATE, 0, 0, u32(this.recvUnacked)));
      this.recvUnacked = 0;
    }
    const stream = this.streams.get(sid);
    if (stream === undefined) return this.out.push(frame(T.RST_STREAM, 0, sid, u32(E.STREAM_CLOSED)));
    if (flags & F.PADDED) {
      const pad = buf[s++];
      e -= pad;
      if (e < s) return this.goaway(E.PROTOCOL_ERROR, 'padding');
    }
    stream.len += e - s;
    if (stream.len > MAX_MESSAGE + 5) {
      this.streams.delete(sid);
      return this.out.push(errorAnswer(sid, 8, 'message larger than the limit'), frame(T.RST_STREAM, 0, sid, u32(0)));
    }
    // A whole message in one frame is used where it lies (answered before this event ends); parts
    // are copied, so that a stream waiting for more does not hold whole read buffers.
    if (flags & F.END_STREAM && stream.chunks.length === 0) {
      stream.chunks.push(buf.subarray(s, e));
      return this.answer(sid, stream);
    }
    if (e > s) stream.chunks.push(Buffer.from(buf.subarray(s, e)));
    if (flags & F.END_STREAM) return this.answer(sid, stream);
    stream.unacked += size;
    if (stream.unacked > STREAM_WINDOW / 2) {
      this.out.push(frame(T.WINDOW_UPDATE, 0, sid, u32(stream.unacked)));
      stream.unacked = 0;
    }
  }

  /** The request is whole: check it is one gRPC message for our method, then answer. */
  answer(sid, stream) {
    this.streams.delete(sid);
    stats.calls++;
    if (stream.path !== PATH) return this.out.push(errorAnswer(sid, 12, 'unknown method'));
    const msg = stream.chunks.length === 1 ? stream.chunks[0] : Buffer.concat(stream.chunks);
    if (msg.length < 5 || msg[0] !== 0 || msg.readUInt32BE(1) !== msg.length - 5) return this.out.push(errorAnswer(sid, 13, 'expected one uncompressed message'));
    // (cellgate would decode `msg` here; the floor server does not either.)
    if (message.length > this.peerStreamWindow || message.length > this.peerMaxFrame) return this.out.push(errorAnswer(sid, 8, 'peer window too small'));
    if (this.sendWindow < message.length || this.queued.length > 0) return this.queued.push(sid);
    this.sendWindow -= message.length;
    this.answers.push(sid);
  }

  goaway(code, why) {
    const p = Buffer.alloc(8 + Buffer.byteLength(why));
    p.writeUInt32BE(this.lastSid, 0);
    p.writeUInt32BE(code, 4);
    p.write(why, 8);
    this.out.push(frame(T.GOAWAY, 0, 0, p));
    this.closing = true;
  }

  /** Everything this 'data' event produced, in one write. */
  flush() {
    const n = this.answers.length;
    if (n === 0 && this.out.length === 0) return;
    let ctrl = 0;
    for (const b of this.out) ctrl += b.length;
    const all = Buffer.allocUnsafe(ctrl + n * ANSWER.length);
    let at = 0;
    for (const b of this.out) at += b.copy(all, at);
    for (let i = 0; i < n; i++) {
      ANSWER.copy(all, at);
      const sid = this.answers[i];
      for (const off of SID_AT) all.writeUInt32BE(sid, at + off);
      at += ANSWER.length;
    }
    this.out.length = 0;
    this.answers.length = 0;
    if (this.closing) this.socket.end(all);
    else this.socket.write(all);
  }
}

net.createServer((socket) => new Connection(socket)).listen(Number(process.argv.at(-1)), '127.0.0.1', () => process.stdout.write('ready\n'));

/*
 * Not here, and needed before this could carry production traffic (the estimate is in the report):
 * per-stream send windows (one small DATA frame per answer hides them), answers larger than a frame or
 * a window (DATA split and resumed on WINDOW_UPDATE), stream states per RFC 9113 5.1 (half-closed,
 * closed-stream frames, idle ids), SETTINGS_MAX_HEADER_LIST_SIZE and the peer's table size for an
 * encoder with a dynamic table, SETTINGS timeouts, PING floods and other abuse budgets (rapid reset:
 * RST_STREAM counted per connection), graceful GOAWAY on shutdown (two-step, last stream id), grpc-timeout
 * deadlines, a real gRPC error path, TLS with ALPN "h2", backpressure on the socket, and the hostile-
 * client tests for all of it.
 */
