/**
 * The key store of the shared backend (docs/backend.md): DEL, UNLINK, EXISTS, TYPE, TTL, PTTL,
 * SCAN, KEYS, DBSIZE, FLUSHDB, FLUSHALL and RL.BLOCK act on the limiter keys under
 * `backend-prefix`, and only on them: nothing else in the backend's database is seen or touched.
 *
 * Keys go one per backend command (auto-pipelined into one write), so a Cluster never sees a
 * multi-key command across slots. SCAN, KEYS, DBSIZE and FLUSHDB visit every master; a Cluster's
 * SCAN cursor is the master's cursor times the number of masters plus the master's index.
 * DEL, UNLINK, FLUSHDB and RL.BLOCK tell every sidecar to forget its cached refusals of those keys
 * (a block shorter than a cached refusal ends before it).
 *
 * The backend does not answer within `backend-timeout`, or is down: the command gets
 * `-ERR backend unavailable (...)` (the limiter policies are about decisions, not about these).
 */
import type { Clock } from '../clock.js';
import type { CommandArgs } from '../protocol/command-args.js';
import type { ReplyWriter } from '../protocol/reply-writer.js';
import type { Stats } from '../server/stats.js';
import type { LocalKeyStore } from '../store/local-keys.js';
import type { KeyStore, ScanRequest, StoreSink } from '../store/store.js';
import type { BackendLimiterStore } from './backend-limiter.js';
import { KEY_TOO_LONG, MAX_BACKEND_KEY_BYTES } from './backend-limiter.js';
import { keySlot } from './key-slot.js';
import type { RedisBackend } from './redis-backend.js';

type Write = (w: ReplyWriter) => void;

export class BackendKeyStore implements KeyStore {
  constructor(
    private readonly backend: RedisBackend,
    /** This process's keys (the `local` policy's): DEL and FLUSHDB reset them too. */
    private readonly local: LocalKeyStore,
    /** A transaction's limiter calls before a keyspace command go to the backend before it. */
    private readonly limiter: BackendLimiterStore,
    private readonly stats: Stats,
    private readonly clock: Clock,
  ) {}

  /** Runs `work` against the backend and replies with what it returns, in order with the client's other replies. */
  private later(sink: StoreSink, work: () => Promise<Write>): void {
    const backend = this.backend;
    if (!backend.usable) {
      sink.reply.error(`ERR backend unavailable (${backend.state}${backend.lastError !== '' ? `: ${backend.lastError}` : ''})`);
      return;
    }
    this.limiter.flushUnit();
    const resolve = sink.client.defer();
    work().then(resolve, (e: Error) => resolve((w) => w.error(`ERR backend unavailable (${oneLine(e.message)})`)));
  }

  /** The keys of arguments 1..last (copied: the work outlives this turn), or null after an error reply for one too long. */
  private keyArgs(sink: StoreSink, argv: CommandArgs, last = argv.length - 1): Buffer[] | null {
    const keys: Buffer[] = [];
    for (let i = 1; i <= last; i++) {
      if (argv.byteLength(i) > MAX_BACKEND_KEY_BYTES) {
        sink.reply.error(KEY_TOO_LONG);
        return null;
      }
      keys.push(Buffer.concat([this.backend.prefixBytes, argv.buffer(i)]));
    }
    return keys;
  }

  /** The type script's time: the frozen debug clock (tests), else empty (the backend's TIME). */
  private typeScriptArgv(sink: StoreSink): string[] {
    return [this.clock.frozen ? String(sink.nowUs) : ''];
  }

  del(sink: StoreSink, argv: CommandArgs): void {
    // The local keys (the `local` policy's) go too, and the reply counts the backend's.
    this.local.deleteKeys(argv, sink.nowMs);
    const backend = this.backend;
    const keys = this.keyArgs(sink, argv);
    if (keys === null) return;
    const clientKeys = keys.map((k) => k.subarray(backend.prefixBytes.length));
    // This sidecar forgets at once; the others when the invalidation arrives.
    for (const k of clientKeys) backend.cache.invalidateKey(k.toString('latin1'));
    this.later(sink, async () => {
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

  block(sink: StoreSink, argv: CommandArgs, ms: number): void {
    const backend = this.backend;
    const key = this.keyArgs(sink, argv, 1)?.[0];
    if (key === undefined) return;
    // This process's key too (the `local` policy's): a block holds while the backend is down.
    this.local.blockKey(argv, ms, sink.nowMs);
    const clientKey = key.subarray(backend.prefixBytes.length);
    backend.cache.invalidateKey(clientKey.toString('latin1'));
    const argvTail = [String(ms), this.clock.frozen ? String(sink.nowUs) : ''];
    this.later(sink, async () => {
      try {
        await backend.askBlock(key, argvTail);
      } finally {
        // A cached refusal may end after the block does: every sidecar forgets it (as DEL's).
        await backend.invalidate([clientKey]);
      }
      return (w) => w.ok();
    });
  }

  exists(sink: StoreSink, argv: CommandArgs): void {
    const backend = this.backend;
    const keys = this.keyArgs(sink, argv);
    if (keys === null) return;
    const argvTail = this.typeScriptArgv(sink);
    this.later(sink, async () => {
      const types = await Promise.all(keys.map((k) => backend.askType(k, argvTail)));
      const found = types.filter((t) => String(t) !== 'none').length;
      return (w) => w.integer(found);
    });
  }

  type(sink: StoreSink, argv: CommandArgs): void {
    const backend = this.backend;
    const key = this.keyArgs(sink, argv)?.[0];
    if (key === undefined) return;
    const argvTail = this.typeScriptArgv(sink);
    this.later(sink, async () => {
      const t = String(await backend.askType(key, argvTail));
      return (w) => w.status(t);
    });
  }

  ttl(sink: StoreSink, argv: CommandArgs, inMs: boolean): void {
    const backend = this.backend;
    const key = this.keyArgs(sink, argv)?.[0];
    if (key === undefined) return;
    const frozenMs = this.clock.frozen ? sink.nowMs : -1;
    const stats = this.stats;
    this.later(sink, async () => {
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

  scan(sink: StoreSink, request: ScanRequest): void {
    const backend = this.backend;
    const argvTail = this.typeScriptArgv(sink);
    this.later(sink, async () => {
      const masters = backend.masters();
      // A Cluster's cursor: the master's cursor × masters + the master's index.
      const m = BigInt(Math.max(1, masters.length));
      const composite = /^\d+$/.test(request.cursorText) ? BigInt(request.cursorText) : BigInt(request.cursor);
      let index = Number(composite % m);
      const nodeCursor = (composite / m).toString();
      if (index >= masters.length) return (w: ReplyWriter) => writeScan(w, '0', []);
      const [next, found] = await scanStep(backend, masters[index], nodeCursor, matchPattern(backend, request.pattern), request.count);
      let keys = found;
      if (request.typeFilter !== null) {
        const types = await Promise.all(keys.map((k) => backend.askType(Buffer.concat([backend.prefixBytes, k]), argvTail)));
        keys = keys.filter((_, i) => String(types[i]) === request.typeFilter);
      }
      let out: bigint;
      if (next !== '0') out = BigInt(next) * m + BigInt(index);
      else if (++index < masters.length) out = BigInt(index);
      else out = 0n;
      return (w: ReplyWriter) => writeScan(w, out.toString(), keys);
    });
  }

  keys(sink: StoreSink, pattern: string): void {
    const backend = this.backend;
    this.later(sink, async () => {
      const keys = await allKeys(backend, pattern === '*' ? null : pattern);
      return (w) => {
        w.arrayHeader(keys.length);
        for (const k of keys) w.bulk(k);
      };
    });
  }

  dbsize(sink: StoreSink): void {
    const backend = this.backend;
    this.later(sink, async () => {
      const n = (await allKeys(backend, null)).length;
      return (w) => w.integer(n);
    });
  }

  flush(sink: StoreSink): void {
    this.local.keyspace.clear();
    const backend = this.backend;
    backend.cache.clear();
    this.later(sink, () => flushBackend(backend));
  }
}

function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ');
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

/** Keys per FLUSHDB step: one SCAN of this COUNT, then UNLINK of what it found (one per slot in a Cluster). */
export const FLUSH_BATCH_KEYS = 1000;
/**
 * How long a FLUSHDB/FLUSHALL through the backend may take in all. Its steps are not limiter calls:
 * they do not wait by backend-timeout and never count as timeouts or mark the backend down.
 */
export const FLUSH_BUDGET_MS = 60_000;

/** FLUSHDB's work on the backend: every master's keys under the prefix, in steps. */
async function flushBackend(backend: RedisBackend): Promise<Write> {
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
}
