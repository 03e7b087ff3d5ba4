#!/usr/bin/env node
/**
 * Redis CPU per call of the backend limiter script (dist/backend/limiter-script.js) against the
 * classic Lua token bucket of bench/RESULTS.md, on one redis-server started here (random loopback
 * port, temp dir, no persistence). Each op is run as EVALSHA with the ARGV limiterScriptArgv builds
 * (no debug clock: the script reads TIME) by the load generator below, which does what
 * `redis-benchmark -c 50 -P 16 -r 100000` does (50 connections, 16 commands in flight on each, keys
 * key:<random below 100000>) but can send the script's binary ARGV, which a command line cannot
 * carry. The figure is INFO commandstats' usec_per_call for evalsha, reset before each run. Rounds
 * alternate the variants (classic, ours[, old]) so a busy machine slows all alike; medians are printed.
 * With --batch n, our variants run as a sidecar's batches do (batchScriptHeader: n calls of the op
 * per EVALSHA, keys in ARGV, TIME read once) and the figure is usec_per_call ÷ n: the script's time
 * per call, which is what a batch of mostly absent keys costs (the classic still runs one per call).
 *
 *   node bench/backend-script.mjs [--old <dist dir of another build>] [--n 100000] [--rounds 3] [--ops c,t,...]
 *     [--lua a.lua,b.lua: edited copies of the script, run with this build's ARGV, as more variants]
 *     [--batch 26: calls per EVALSHA for our variants; --n counts calls]
 *     [--cluster: redis-server in cluster mode, one master serving every slot (a Cluster master's
 *      per-key costs: slot checks of the script's commands, the slot's key index), no other node]
 *
 * Beside usec_per_call, the redis-server's CPU (utime + stime from /proc) per call over each run: it
 * also counts reading the commands and writing the replies, which usec_per_call leaves out.
 *
 * Ops: c CL.THROTTLE 100 1000 60 1; g GCRA 100 1000 60 1; t l f w s r RL.TOKENBUCKET / LEAKYBUCKET /
 * FIXEDWINDOW / SLIDINGWINDOW / SLIDINGLOG / GCRA with limit 1000 per 60 s, cost 1; all RL.ALL of two
 * token buckets (two keys); empty: a `return {0}` script (the EVALSHA floor).
 */
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { LUA_TOKEN_BUCKET } from './lua-token-bucket.mjs';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const N = Number(opt('n', '100000'));
const ROUNDS = Number(opt('rounds', '3'));
const OPS = opt('ops', 'c,g,t,l,f,w,s,r,all').split(',');
const OLD = opt('old', null);
const EXTRA = opt('lua', '').split(',').filter((f) => f !== '');
const BATCH = Number(opt('batch', '0'));
const CLUSTER = args.includes('--cluster');

const CLASSIC = LUA_TOKEN_BUCKET;

/** The key type tags, as snapshots store them (stable across builds: docs/snapshot-format.md). */
const KeyType = { Gcra: 1, TokenBucket: 2, LeakyBucket: 3, FixedWindow: 4, SlidingLog: 5, SlidingWindow: 6 };

async function build(dir) {
  const base = pathToFileURL(resolve(dir)).href;
  const script = await import(`${base}/backend/limiter-script.js`);
  const { cellParams } = await import(`${base}/limiters/cell-throttle.js`);
  const { gcraParams } = await import(`${base}/limiters/redis-gcra.js`);
  const { gcraMsParams, newGcraMsParams } = await import(`${base}/limiters/gcra-ms.js`);
  const rl = (type) => {
    const gcra = newGcraMsParams();
    if (type === KeyType.Gcra) gcraMsParams(1000, 60_000, 1000, gcra);
    return { kind: 'rl', type, limit: 1000, periodMs: 60_000, burst: 1000, gcra, cost: 1 };
  };
  const limits = {
    c: [{ kind: 'cl.throttle', params: cellParams(100, 1000, 60), quantity: 1 }],
    g: [{ kind: 'gcra', params: gcraParams(100, 1000, 60, 1) }],
    t: [rl(KeyType.TokenBucket)],
    l: [rl(KeyType.LeakyBucket)],
    f: [rl(KeyType.FixedWindow)],
    w: [rl(KeyType.SlidingWindow)],
    s: [rl(KeyType.SlidingLog)],
    r: [rl(KeyType.Gcra)],
    all: [rl(KeyType.TokenBucket), rl(KeyType.TokenBucket)],
  };
  return { script: script.LIMITER_SCRIPT, argv: (op) => script.limiterScriptArgv(limits[op], op === 'all', null), count: (op) => limits[op].length, header: script.batchScriptHeader };
}

async function startRedis() {
  const dir = mkdtempSync(join(tmpdir(), 'cellgate-bench-redis-'));
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = 20000 + Math.floor(Math.random() * 40000);
    const proc = spawn('/usr/bin/redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '',
      '--appendonly', 'no', '--loglevel', 'warning',
      ...(CLUSTER ? ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`)] : [])], { stdio: 'ignore' });
    const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => {});
    for (let i = 0; i < 100 && proc.exitCode === null; i++) {
      try {
        await client.connect();
        const info = await client.info('server');
        if (info.includes(`process_id:${proc.pid}\r`)) {
          if (CLUSTER) {
            await client.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
            while (!(await client.call('CLUSTER', 'INFO')).includes('cluster_state:ok')) await new Promise((r) => setTimeout(r, 50));
          }
          return { port, proc, dir, client };
        }
        break;
      } catch {
        client.disconnect();
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    client.disconnect();
    proc.kill('SIGKILL');
  }
  rmSync(dir, { recursive: true, force: true });
  throw new Error('redis-server did not start');
}


/** RESP of one command; the string '__rand_int__' in an argument becomes a random number below 100000. */
function encode(cmd) {
  const parts = [Buffer.from(`*${cmd.length}\r\n`)];
  for (const arg of cmd) {
    const b = Buffer.isBuffer(arg) ? arg : Buffer.from(arg.replace('__rand_int__', String(Math.floor(Math.random() * 100000)).padStart(12, '0')));
    parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
  }
  return Buffer.concat(parts);
}

/** Skips one RESP2 reply in buf from at: the index after it, or -1 when it is incomplete. */
function skip(buf, at) {
  const eol = buf.indexOf('\r\n', at);
  if (eol < 0) return -1;
  const type = buf[at];
  if (type === 0x2a) { // '*'
    let next = eol + 2;
    for (let n = Number(buf.toString('latin1', at + 1, eol)); n > 0 && next >= 0; n--) next = skip(buf, next);
    return next;
  }
  if (type === 0x24) { // '$'
    const len = Number(buf.toString('latin1', at + 1, eol));
    if (len < 0) return eol + 2;
    return buf.length >= eol + 4 + len ? eol + 4 + len : -1;
  }
  if (type === 0x2d) throw new Error(`error reply: ${buf.toString('latin1', at, eol)}`); // '-'
  return eol + 2;
}

/** `commands` commands over 50 connections, 16 in flight on each (as redis-benchmark -c 50 -P 16). */
function load(port, cmd, commands) {
  const CONNS = 50;
  const DEPTH = 16;
  let left = commands;
  return Promise.all(Array.from({ length: CONNS }, () => new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let pending = Buffer.alloc(0);
    let inFlight = 0;
    const send = () => {
      const batch = [];
      for (; batch.length < DEPTH && left > 0; left--) batch.push(encode(cmd));
      if (batch.length === 0) { sock.end(); resolve(); return; }
      inFlight = batch.length;
      sock.write(Buffer.concat(batch));
    };
    sock.on('connect', send);
    sock.on('error', reject);
    sock.on('data', (chunk) => {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      let at = 0;
      try {
        for (;;) {
          const next = skip(pending, at);
          if (next < 0) break;
          at = next;
          if (--inFlight === 0) break;
        }
      } catch (e) { sock.destroy(); reject(e); return; }
      pending = pending.subarray(at);
      if (inFlight === 0) send();
    });
  })));
}

/** utime + stime of a process, in µs. */
function cpuUs(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const ours = await build('dist');
const old = OLD ? await build(OLD) : null;
const redis = await startRedis();
const stop = () => {
  redis.client.disconnect();
  redis.proc.kill('SIGKILL');
  rmSync(redis.dir, { recursive: true, force: true });
};
process.on('SIGINT', () => { stop(); process.exit(130); });
try {
  const c = redis.client;
  const shas = {
    classic: await c.script('LOAD', CLASSIC),
    empty: await c.script('LOAD', 'return {0}'),
    ours: await c.script('LOAD', ours.script),
  };
  if (old) shas.old = await c.script('LOAD', old.script);
  for (const f of EXTRA) shas[f] = await c.script('LOAD', readFileSync(f, 'utf8'));

  // Each run starts on an empty keyspace (the same mix of fresh and warm keys for every variant, and
  // no growing dict rehashing the later runs).
  // calls: the calls one command carries (a batch's), over which its time is divided.
  const run = async (cmd, calls = 1) => {
    await c.flushall('SYNC');
    await c.config('RESETSTAT');
    const cpu0 = cpuUs(redis.proc.pid);
    await load(redis.port, cmd, Math.ceil(N / calls));
    cpuPerCall.push((cpuUs(redis.proc.pid) - cpu0) / (Math.ceil(N / calls) * calls));
    const m = /cmdstat_evalsha:calls=(\d+),usec=\d+,usec_per_call=([\d.]+),rejected_calls=\d+,failed_calls=(\d+)/.exec(await c.info('commandstats'));
    if (!m) throw new Error('no evalsha in INFO commandstats');
    if (Number(m[3]) > 0) throw new Error(`${m[3]} failed calls: ${cmd.join(' ')}`);
    return Number(m[2]) / calls;
  };
  const cmdFor = (variant, build, op, prefix) => {
    const argv = build.argv(op);
    if (!Array.isArray(argv)) throw new Error(argv.error);
    const keys = op === 'all' ? [`${prefix}a:__rand_int__`, `${prefix}b:__rand_int__`] : [`${prefix}${op}:__rand_int__`];
    if (BATCH > 0) return ['EVALSHA', shas[variant], '0', build.header(false), ...Array.from({ length: BATCH }, () => [argv[0], ...keys]).flat()];
    return ['EVALSHA', shas[variant], String(keys.length), ...keys, ...argv];
  };

  const cpuPerCall = [];
  const cpu = {};
  const results = {};
  const variants = [...(old ? ['classic', 'ours', 'old'] : ['classic', 'ours']), ...EXTRA];
  const floor = [];
  for (let round = 0; round < ROUNDS; round++) {
    floor.push(await run(['EVALSHA', shas.empty, '1', 'e:__rand_int__']));
    for (const op of OPS) {
      for (const v of variants) {
        const cmd = v === 'classic'
          ? ['EVALSHA', shas.classic, '1', `classic:__rand_int__`, '101', '16.666666666666668', '1']
          : cmdFor(v, v === 'old' ? old : ours, op, `${v}:`);
        ((results[op] ??= {})[v] ??= []).push(await run(cmd, v === 'classic' ? 1 : Math.max(1, BATCH)));
        ((cpu[op] ??= {})[v] ??= []).push(cpuPerCall.at(-1));
      }
    }
  }
  console.log(`usec_per_call (INFO commandstats, median of ${ROUNDS} alternating rounds of ${N} calls, 50 connections × 16 in flight, keys below 100000${BATCH > 0 ? `; ours in batches of ${BATCH} calls, per call` : ''}${CLUSTER ? '; cluster mode, one master' : ''})`);
  console.log(`empty 'return {0}' script: ${median(floor).toFixed(2)}`);
  console.log(['op', ...variants, 'ours/classic', ...(old ? ['old/classic'] : [])].join('\t'));
  for (const op of OPS) {
    const r = results[op];
    const m = Object.fromEntries(variants.map((v) => [v, median(r[v])]));
    console.log([op, ...variants.map((v) => m[v].toFixed(2)), (m.ours / m.classic).toFixed(2),
      ...(old ? [(m.old / m.classic).toFixed(2)] : [])].join('\t'));
  }
  console.log(`redis-server CPU µs per call (utime + stime, median)`);
  for (const op of OPS) console.log([op, ...variants.map((v) => median(cpu[op][v]).toFixed(2))].join('\t'));
} finally {
  stop();
}
