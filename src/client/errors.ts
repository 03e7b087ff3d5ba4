/**
 * The client's exceptions. One base class, so an application can catch every cellgate failure with
 * one `instanceof`, and subclasses for the cases a caller decides on differently: a bad argument is
 * a bug to fix, a timeout or an unreachable server is an outage to ride out (fail open or closed).
 */

export class CellgateError extends Error {
  override name = 'CellgateError';
}

/** An argument was refused, by the client before sending or by the server (`ERR invalid <name> ...`). */
export class CellgateArgumentError extends CellgateError {
  override name = 'CellgateArgumentError';
  /** The argument's name as the command reference (docs/commands.md) spells it, e.g. `limit`, `BURST`. */
  readonly argument: string;
  constructor(argument: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.argument = argument;
  }
}

/** The server did not answer within the call's timeout. */
export class CellgateTimeoutError extends CellgateError {
  override name = 'CellgateTimeoutError';
  readonly timeoutMs: number;
  constructor(command: string, timeoutMs: number) {
    super(`cellgate did not answer ${command} within ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}

/**
 * The connection could not carry the call (server down, connection closed, offline queue off), or
 * the server answered that it cannot serve now (`LOADING`, `BUSY`, `TRYAGAIN`, maxclients...).
 */
export class CellgateUnavailableError extends CellgateError {
  override name = 'CellgateUnavailableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** Any other error reply from the server (e.g. `WRONGTYPE`, `NOAUTH`, Redis-style `GCRA` errors). */
export class CellgateReplyError extends CellgateError {
  override name = 'CellgateReplyError';
  /** The reply's first word: `ERR`, `WRONGTYPE`, `NOAUTH`... */
  readonly code: string;
  constructor(message: string) {
    super(message);
    this.code = /^[A-Z]+/.exec(message)?.[0] ?? 'ERR';
  }
}

/**
 * Error replies of a server that is starting, busy, failing over or full (Redis's LOADING, BUSY,
 * MASTERDOWN, CLUSTERDOWN, TRYAGAIN, NOREPLICAS, and the maxclients refusal).
 */
const UNAVAILABLE_REPLY = /^(?:LOADING|BUSY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|NOREPLICAS)\b|^ERR max number of clients reached/;

/**
 * What the connection libraries say when they cannot carry a call, in cellgate's words: an
 * application's log should say that cellgate is not connected, not that "enableOfflineQueue options
 * is false". The library's error stays the `cause`.
 */
const LIBRARY_TEXTS: [RegExp, string][] = [
  // ioredis, with the offline queue off (connect() and the middleware turn it off to fail fast).
  [/^Stream isn't writeable/, 'not connected to cellgate'],
  [/^Connection is closed/, 'the connection to cellgate is closed'],
  [/^Reached the max retries per request limit/, 'the connection to cellgate was lost during the call'],
  // node-redis.
  [/^The client is offline/, 'not connected to cellgate'],
  [/^The client is closed/, 'the connection to cellgate is closed'],
  [/^Socket closed unexpectedly/, 'the connection to cellgate was lost during the call'],
];
/** node:net's errors, as either library passes them on: the message (address, errno) is kept after ours. */
const SOCKET_TEXTS: [RegExp, string][] = [
  [/\bECONNREFUSED\b/, 'cellgate refused the connection (nothing listens there)'],
  [/\bECONNRESET\b|\bEPIPE\b/, 'the connection to cellgate was reset'],
  [/\bETIMEDOUT\b/, 'connecting to cellgate timed out'],
  [/\bENOTFOUND\b|\bEAI_AGAIN\b/, "cellgate's host name does not resolve"],
  [/\bENOENT\b/, "cellgate's unix socket does not exist"],
];

/** A connection library's or node:net's message in cellgate's words (unknown texts as they are). */
export function connectionText(message: string): string {
  const phrase = LIBRARY_TEXTS.find(([pattern]) => pattern.test(message));
  if (phrase !== undefined) return phrase[1];
  const socket = SOCKET_TEXTS.find(([pattern]) => pattern.test(message));
  return socket === undefined ? message : `${socket[1]}: ${message}`;
}

/**
 * The message of a `CellgateUnavailableError` for the library's `message`, with `lastConnectError`
 * (the connection's last failed attempt, when the client knows it) saying why it is not connected.
 */
export function unavailableMessage(message: string, lastConnectError?: string): string {
  const text = connectionText(message);
  const why = lastConnectError !== undefined && lastConnectError !== message ? ` (last connection attempt: ${connectionText(lastConnectError)})` : '';
  return `cellgate unavailable: ${text}${why}`;
}

/**
 * Turns whatever the connection library rejected with into one of the classes above. An error reply
 * arrives as the library's reply error (ioredis `ReplyError`, node-redis `ErrorReply`); everything
 * else (closed stream, refused connection, offline queue disabled) means the server is unavailable.
 * `lastConnectError`: the message of the connection's last failed attempt, when known.
 */
export function toCellgateError(err: unknown, lastConnectError?: string): CellgateError {
  if (err instanceof CellgateError) return err;
  const message = err instanceof Error ? err.message : String(err);
  // node-redis's reply errors keep the name "Error": their class tells them apart.
  const names = err instanceof Error ? [err.name, err.constructor.name] : [];
  if (names.some((n) => n === 'ReplyError' || n === 'ErrorReply' || n === 'SimpleError' || n === 'BlobError')) {
    // Replies that say the server cannot serve right now, not that the call was wrong: an outage.
    if (UNAVAILABLE_REPLY.test(message)) return new CellgateUnavailableError(`cellgate unavailable: ${message}`, { cause: err });
    const invalid = /^ERR invalid ([A-Za-z_/]+)/.exec(message);
    if (invalid) return new CellgateArgumentError(invalid[1], message);
    return new CellgateReplyError(message);
  }
  return new CellgateUnavailableError(unavailableMessage(message, lastConnectError), { cause: err });
}
