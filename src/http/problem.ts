/**
 * The body of a response the middleware answers itself: an `application/problem+json` problem
 * (RFC 9457), or the application's own JSON `message`.
 */

export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail: string;
}

/** The 503 of `onUnavailable: 'deny'`. */
export function unavailableProblem(): ProblemDetails {
  return { type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'the rate limiter is unavailable, try again shortly' };
}

/** A refusal with `status` (429 by default, or the `statusCode` option). */
export function refusalProblem(status: number, detail: string): ProblemDetails {
  const title = status === 429 ? 'Too Many Requests' : 'Request Refused';
  return { type: 'about:blank', title, status, detail };
}

/** Writes a refusal's body as the response's JSON text. */
export function problemText(body: ProblemDetails | Record<string, unknown>): string {
  return JSON.stringify(body);
}
