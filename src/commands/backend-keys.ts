/**
 * The keyspace commands with a shared backend (docs/backend.md): DEL, UNLINK, EXISTS, TYPE, TTL,
 * PTTL, SCAN, KEYS, DBSIZE, FLUSHDB and FLUSHALL act on the limiter keys under `backend-prefix`,
 * and only on them: nothing else in the backend's database is seen or touched.
 *
 * Keys go one per backend command (auto-pipelined into one write), so a Cluster never sees a
 * multi-key command across slots. SCAN, KEYS, DBSIZE and FLUSHDB visit every master; a Cluster's
 * SCAN cursor is the master's cursor times the number of masters plus the master's index.
 * DEL, UNLINK and FLUSHDB tell every sidecar to forget its cached refusals of those keys.
 *
 * The backend does not answer within `backend-timeout`, or is down: the command gets
 * `-ERR backend unavailable (...)` (the limiter policies are about decisions, not about these).
 */
import type { CommandArgs } from '../protocol/command-args.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import type { RedisBackend } from '../backend/redis-backend.js';
import { parseScanArgs } from './scan-args.js';
import { KEY_TOO_LONG, MAX_BACKEND_KEY_BYTES } from './backend-limiter.js';
import type { CommandContext } from './types.js';
import { keySlot } from '../backend/key-slot.js';

type Write = (w: ReplyWriter) => void;

/** Runs `work` against the backend and replies with what it returns, in order with the client's other replies. */
function later(ctx: CommandContext, backend: RedisBackend, work: () => Promise<Write>): void {
  if (!backend.usable) {
    ctx.reply.error(`ERR backend unavailable (${backend.state}${backend.lastError !== '' ? `: ${backend.lastError}` : ''})`);
    return;
  }
  const resolve = ctx.client.defer();
  work().then(resolve, (e: Error) => resolve((w) => w.error(`ERR backend unavailable (${oneLine(e.message)})`)));
}

function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ');
}

function prefixed(backend: RedisBackend, argv: CommandArgs, i: number): Buffer {
  return Buffer.concat([backend.prefixBytes, argv.buffer(i)]);
}

/** The keys of arguments 1.. (copied: the work outlives this turn), or null after an error reply for one too long. */
function keyArgs(ctx: CommandContext, backend: RedisBackend, argv: CommandArgs): Buffer[] | null {
  const keys: Buffer[] = [];
  for (let i = 1; i < argv.length; i++) {
    if (argv.byteLength(i) > MAX_BACKEND_KEY_BYTES) {
      ctx.reply.error(KEY_TOO_LONG);
      return null;
    }
    keys.push(prefixed(backend, argv, i));
  }
  return keys;
}

export function backendDel(ctx: CommandContext, argv: CommandArgs, backend: RedisBackend): void {
  const keys = keyArgs(ctx, backend, argv);
  if (keys === null) return;
  const clientKeys = keys.map((k) => k.subarray(backend.prefixBytes.length));
  // This sidecar forgets at once; the others when the invalidation arrives.
  for (const k of clientKeys) backend.cache.invalidateKey(k.toString('latin1'));
  later(ctx, backend, async () => {
    let replies: unknown[];
    try {
      replies = await Promise.all(keys.map((k) => backend.ask('del', [k])));
    } finally {
      // Some may be deleted even if others failed. The reply waits for every sidecar to have dropped
      // its cached refusals of these keys (or for backend-timeout).
      await backend.invalidate(clientKeys);
    }
    const removed = replies.reduce((sum: number, n) => sum + Number(n), 0);
    return (w) => w.integer(removed);
  });
}

export function backendExists(ctx: CommandContext, argv: CommandArgs, backend: RedisBackend): void {
  const keys = keyArgs(ctx, backend, argv);
  if (keys === null) return;
  const argvTail = typeScriptArgv(ctx);
  later(ctx, backend, async () => {
    const types = await Promise.all(keys.map((k) => backend.askType(k, argvTail)));
    const found = types.filter((t) => String(t) !== 'none').length;
    return (w) => w.integer(found);
  });
}

export function backendType(ctx: CommandContext, argv: CommandArgs, backend: RedisBackend): void {
  const key = keyArgs(ctx, backend, argv)?.[0];
  if (key === undefined) return;
  const argvTail = typeScriptArgv(ctx);
  later(ctx, backend, async () => {
    const t = String(await backend.askType(key, argvTail));
    return (w) => w.status(t);
  });
}

/** The type script's time: the frozen debug clock (tests), else empty (the backend's TIME). */
function typeScriptArgv(ctx: CommandContext): string[] {
  return [ctx.server.clock.frozen ? String(ctx.nowUs) : ''];
}

export function backendTtl(ctx: CommandContext, argv: CommandArgs, backend: RedisBackend, inMs: boolean): void {
  const key = keyArgs(ctx, backend, argv)?.[0];
  if (key === undefined) return;
  const frozenMs = ctx.server.clock.frozen ? ctx.nowMs : -1;
  const stats = ctx.server.stats;
  later(ctx, backend, async () => {
    let ms: number;
    if (frozenMs === -1) {
      ms = Number(await backend.ask('pttl', [key]));
    } else {
      // The debug clock is not the backend's: the TTL as of the frozen time, from the absolute expiry.
      const at = Number(await backend.ask('pexpiretime', [key]));
      ms = at < 0 ? at : at <= frozenMs ? -2 : at - frozenMs;
    }
    if (ms === -2) stats.keyspaceMisses++;
    else stats.keyspaceHits++;
    return (w) => w.integer(ms < 0 || inMs ? ms : Math.floor((ms + 500) / 1000));
  });
}

/** Backslashes the glob characters of the prefix, so MATCH takes it literally. */
function globLiteral(bytes: Buffer): Buffer {
  const out: number[] = [];
  for (const b of bytes) {
    if (b === 0x2a || b === 0x3f || b === 0x5b || b === 0x5d || b === 0x5c) out.push(0x5c);
    out.push(b);
  }
  return Buffer.from(out);
}

function matchPattern(backend: RedisBackend, pattern: string | null): Buffer {
  return Buffer.concat([globLiteral(backend.prefixBytes), Buffer.from(pattern ?? '*')]);
}

/** One SCAN step on one master: [next cursor, keys without the prefix]. */
async function scanStep(backend: RedisBackend, node: Parameters<RedisBackend['ask']>[2], cursor: string, match: Buffer, count: number): Promise<[string, Buffer[]]> {
  const reply = (await backend.ask('scan', [cursor, 'MATCH', match, 'COUNT', count], node)) as [Buffer, Buffer[]];
  const n = backend.prefixBytes.length;
  return [reply[0].toString(), reply[1].map((k) => k.subarray(n))];
}

export function backendScan(ctx: CommandContext, argv: CommandArgs, backend: RedisBackend): void {
  const args = parseScanArgs(ctx, argv);
  if (args === null) return;
  const cursorText = argv.str(1);
  const argvTail = typeScriptArgv(ctx);
  later(ctx, backend, async () => {
    const masters = backend.masters();
    // A Cluster's cursor: the master's cursor × masters + the master's index.
    const m = BigInt(Math.max(1, masters.length));
    const composite = /^\d+$/.test(cursorText) ? BigInt(cursorText) : BigInt(args.cursor);
    let index = Number(composite % m);
    const nodeCursor = (composite / m).toString();
    if (index >= masters.length) return (w: ReplyWriter) => writeScan(w, '0', []);
    const [next, found] = await scanStep(backend, masters[index], nodeCursor, matchPattern(backend, args.pattern), args.count);
    let keys = found;
    if (args.typeFilter !== null) {
      const types = await Promise.all(keys.map((k) => backend.askType(Buffer.concat([backend.prefixBytes, k]), argvTail)));
      keys = keys.filter((_, i) => String(types[i]) === args.typeFilter);
    }
    let out: bigint;
    if (next !== '0') out = BigInt(next) * m + BigInt(index);
    else if (++index < masters.length) out = BigInt(index);
    else out = 0n;
    return (w: ReplyWriter) => writeScan(w, out.toString(), keys);
  });
}

function writeScan(w: ReplyWriter, cursor: string, keys: Buffer[]): void {
  w.arrayHeader(2);
  w.bulk(cursor);
  w.arrayHeader(keys.length);
  for (const k of keys) w.bulk(k);
}

/** Every key under the prefix matching `pattern`, from every master. */
async function allKeys(backend: RedisBackend, pattern: string | null): Promise<Buffer[]> {
  const match = matchPattern(backend, pattern);
  const keys: Buffer[] = [];
  for (const node of backend.masters()) {
    let cursor = '0';
    do {
      const [next, found] = await scanStep(backend, node, cursor, match, 1000);
      for (const k of found) keys.push(k);
      cursor = next;
    } while (cursor !== '0');
  }
  return keys;
}

export function backendKeys(ctx: CommandContext, argv: CommandArgs, backend: RedisBackend): void {
  const pattern = argv.str(1);
  later(ctx, backend, async () => {
    const keys = await allKeys(backend, pattern === '*' ? null : pattern);
    return (w) => {
      w.arrayHeader(keys.length);
      for (const k of keys) w.bulk(k);
    };
  });
}

export function backendDbsize(ctx: CommandContext, backend: RedisBackend): void {
  later(ctx, backend, async () => {
    const n = (await allKeys(backend, null)).length;
    return (w) => w.integer(n);
  });
}

/** Keys per FLUSHDB step: one SCAN of this COUNT, then UNLINK of what it found (one per slot in a Cluster). */
export const FLUSH_BATCH_KEYS = 1000;
/**
 * How long a FLUSHDB/FLUSHALL through the backend may take in all. Its steps are not limiter calls:
 * they do not wait by backend-timeout and never count as timeouts or mark the backend down.
 */
export const FLUSH_BUDGET_MS = 60_000;

export function backendFlush(ctx: CommandContext, backend: RedisBackend): void {
  backend.cache.clear();
  later(ctx, backend, async () => {
    const deadlineMs = Date.now() + FLUSH_BUDGET_MS;
    const match = matchPattern(backend, null);
    try {
      for (const node of backend.masters()) {
        let cursor = '0';
        do {
          const reply = (await backend.bulk(node, 'scan', [cursor, 'MATCH', match, 'COUNT', FLUSH_BATCH_KEYS], deadlineMs)) as [Buffer, Buffer[]];
          cursor = reply[0].toString();
          const found = reply[1];
          if (found.length === 0) continue;
          if (backend.target.mode !== 'cluster') {
            await backend.bulk(node, 'unlink', found, deadlineMs);
            continue;
          }
          // A node takes a multi-key command only within one slot.
          const bySlot = new Map<number, Buffer[]>();
          for (const k of found) {
            const slot = keySlot(k);
            const group = bySlot.get(slot);
            if (group === undefined) bySlot.set(slot, [k]);
            else group.push(k);
          }
          await Promise.all([...bySlot.values()].map((keys) => backend.bulk(node, 'unlink', keys, deadlineMs)));
        } while (cursor !== '0');
      }
    } finally {
      // Whatever was deleted, even if the flush did not finish: every sidecar forgets its refusals.
      backend.cache.clear();
      await backend.invalidate([]);
    }
    return (w) => w.ok();
  });
}
