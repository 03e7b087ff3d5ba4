/**
 * gRPC over an HTTP/2 stream, the part that is gRPC's own (its "PROTOCOL-HTTP2" document): the
 * 5-byte length prefix of each message, the status in trailers (or in the headers of a
 * trailers-only answer) and the percent-encoding of grpc-message. HTTP/2 itself is node:http2's.
 * Also the two messages of grpc.health.v1.Health/Check, which are one field each.
 */
import type http2 from 'node:http2';

/** The status codes this server sends (grpc/status.h). */
export const GrpcStatus = {
  OK: 0,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
} as const;
export type GrpcCode = (typeof GrpcStatus)[keyof typeof GrpcStatus];

/** The length prefix: a compressed-flag byte, then the message length as a big-endian uint32. */
export const MESSAGE_HEADER_BYTES = 5;

/** One message with its length prefix, in one buffer (one DATA frame for a small answer). */
export function framed(payload: Buffer): Buffer {
  const out = Buffer.allocUnsafe(MESSAGE_HEADER_BYTES + payload.length);
  out[0] = 0;
  out.writeUInt32BE(payload.length, 1);
  payload.copy(out, MESSAGE_HEADER_BYTES);
  return out;
}

/** grpc-message's encoding: bytes outside printable ASCII, and '%', as %XX (UTF-8). */
export function encodeGrpcMessage(text: string): string {
  if (/^[\x20-\x24\x26-\x7e]*$/.test(text)) return text;
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

function open(stream: http2.ServerHttp2Stream): boolean {
  return !stream.destroyed && !stream.closed && !stream.headersSent;
}

/** A successful unary answer: headers, the message, trailers with grpc-status 0. */
export function answerOk(stream: http2.ServerHttp2Stream, payload: Buffer): void {
  answerOkFramed(stream, framed(payload));
}

/**
 * answerOk of a message written after MESSAGE_HEADER_BYTES of room (`frame`: room and message),
 * its prefix filled here.
 */
export function answerOkFramed(stream: http2.ServerHttp2Stream, frame: Buffer): void {
  if (!open(stream)) return;
  frame[0] = 0;
  frame.writeUInt32BE(frame.length - MESSAGE_HEADER_BYTES, 1);
  stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-accept-encoding': 'identity' }, { waitForTrailers: true });
  stream.on('wantTrailers', sendOkTrailers);
  stream.end(frame);
}

/** 'wantTrailers' comes once per stream; `this` is the stream (one function for every call, no closure). */
function sendOkTrailers(this: http2.ServerHttp2Stream): void {
  this.sendTrailers({ 'grpc-status': '0' });
}

/**
 * An error: a trailers-only answer (the status in the one HEADERS frame that ends the stream).
 * `reset`: the request may still be arriving (a budget or a deadline ended it), so the stream is
 * closed as well, which tells the peer to stop sending (RST_STREAM NO_ERROR after a complete
 * answer, as HTTP/2 allows) and lets what it held go.
 */
export function answerError(stream: http2.ServerHttp2Stream, code: GrpcCode, message: string, reset = false): void {
  if (open(stream)) {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': String(code), 'grpc-message': encodeGrpcMessage(message) }, { endStream: true });
  }
  if (reset && !stream.destroyed && !stream.closed) stream.close();
}

/** grpc.health.v1.HealthCheckRequest's `service` (field 1); anything malformed throws. Linear in the message. */
export function decodeHealthCheckRequest(buf: Buffer): string {
  let pos = 0;
  let service = '';
  const varint = (): number => {
    let result = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (pos >= buf.length) throw new Error('truncated varint');
      const b = buf[pos++];
      result += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return result;
      scale *= 128;
    }
    throw new Error('varint longer than 10 bytes');
  };
  while (pos < buf.length) {
    const tag = varint();
    const wire = tag % 8;
    if (wire === 0) varint();
    else if (wire === 1 || wire === 5) pos += wire === 1 ? 8 : 4;
    else if (wire === 2) {
      const len = varint();
      if (len > buf.length - pos) throw new Error('length beyond the message');
      if (Math.floor(tag / 8) === 1) service = buf.toString('utf8', pos, pos + len);
      pos += len;
    } else throw new Error(`wire type ${wire}`);
    if (pos > buf.length) throw new Error('truncated field');
  }
  return service;
}

/** HealthCheckResponse { status = 1 }: SERVING is 1, NOT_SERVING 2. */
export const HEALTH_SERVING = Buffer.from([0x08, 0x01]);
export const HEALTH_NOT_SERVING = Buffer.from([0x08, 0x02]);
