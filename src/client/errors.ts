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
 * Turns whatever the connection library rejected with into one of the classes above. An error reply
 * arrives as the library's reply error (ioredis `ReplyError`, node-redis `ErrorReply`); everything
 * else (closed stream, refused connection, offline queue disabled) means the server is unavailable.
 */
export function toCellgateError(err: unknown): CellgateError {
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
  return new CellgateUnavailableError(`cellgate unavailable: ${message}`, { cause: err });
}
