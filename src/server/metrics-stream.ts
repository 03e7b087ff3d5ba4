/**
 * Sends a metrics exposition in slices: the parts are rendered a slice (about SLICE_CHARS of text)
 * at a time, each slice written and the event loop given back before the next (setImmediate, or the
 * socket's 'drain' when the scraper reads slower than the server writes). A large exposition then
 * never holds the loop for more than one slice, RESP and gRPC clients are served between slices,
 * and a slow scraper holds one slice of text in the server, not the whole body.
 */
import type http from 'node:http';

/** Text rendered per slice before it is written and the loop is given back. */
export const SLICE_CHARS = 64 * 1024;

/**
 * Renders `parts` into `res` (status 200, chunked). An exception while rendering answers 500 if
 * nothing was sent yet, else ends the connection (the scraper sees a broken body, not a short one
 * that parses); `failed` reports it either way.
 */
export function streamExposition(res: http.ServerResponse, parts: Iterable<string>, contentType: string, failed: (e: unknown) => void): void {
  const it = parts[Symbol.iterator]();
  let started = false;
  const step = (): void => {
    if (res.destroyed) return; // the scraper left: the rest is not rendered
    let slice = '';
    let done = false;
    try {
      while (slice.length < SLICE_CHARS) {
        const r = it.next();
        if (r.done === true) {
          done = true;
          break;
        }
        slice += r.value;
      }
    } catch (e) {
      failed(e);
      if (started) res.destroy();
      else res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics unavailable\n');
      return;
    }
    if (!started) {
      started = true;
      res.writeHead(200, { 'content-type': contentType });
    }
    if (done) {
      res.end(slice);
      return;
    }
    if (res.write(slice)) setImmediate(step);
    else res.once('drain', step);
  };
  step();
}
