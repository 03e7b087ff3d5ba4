/**
 * The fixed ShouldRateLimit answer the floor servers give (bench/rls-http2-floor.mjs, bench/h2proto/):
 * an OK status for one descriptor, encoded by cellgate's own codec, as one gRPC message (compressed
 * flag, 4-byte length, the protobuf bytes).
 */
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const { encodeRateLimitResponse } = await import(pathToFileURL(join(ROOT, 'dist/rls/codec.js')).href);

const body = encodeRateLimitResponse({
  overall_code: 'OK',
  statuses: [{ code: 'OK', current_limit: { requests_per_unit: 1_000_000_000, unit: 'MINUTE', name: '' }, limit_remaining: 999_999_999, duration_until_reset: { seconds: 30, nanos: 0 } }],
  response_headers_to_add: [],
});

export const FIXED_ANSWER_MESSAGE = Buffer.alloc(5 + body.length);
FIXED_ANSWER_MESSAGE.writeUInt32BE(body.length, 1);
body.copy(FIXED_ANSWER_MESSAGE, 5);
