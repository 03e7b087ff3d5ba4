#!/usr/bin/env node
/**
 * Redis CPU per call of the backend limiter script (dist/backend/limiter-script.js) against the
 * classic Lua token bucket of bench/RESULTS.md, on one redis-server started here (random loopback
 * port, temp dir, no persistence). Each op is run by redis-benchmark (-c 50 -P 16 -r 100000) as
 * EVALSHA with the ARGV limiterScriptArgv builds (no debug clock: the script reads TIME); the figure
 * is INFO commandstats' usec_per_call for evalsha, reset before each run. Rounds alternate the
 * variants (classic, ours[, old]) so a busy machine slows all alike; medians are printed.
 *
 *   node bench/backend-script.mjs [--old <dist dir of another build>] [--n 100000] [--rounds 3] [--ops c,t,...]
 *
 * Ops: c CL.THROTTLE 100 1000 60 1; g GCRA 100 1000 60 1; t l f w s r RL.TOKENBUCKET / LEAKYBUCKET /
 * FIXEDWINDOW / SLIDINGWINDOW / SLIDINGLOG / GCRA with limit 1000 per 60 s, cost 1; all RL.ALL of two
 * token buckets (two keys); empty: a `return {0}` script (the EVALSHA floor).
 */
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const N = Number(opt('n', '100000'));
const ROUNDS = Number(opt('rounds', '3'));
const OPS = opt('ops', 'c,g,t,l,f,w,s,r,all').split(',');
const OLD = opt('old', null);

const CLASSIC = `local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local requested = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = capacity
  ts = now
end
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens = math.min(capacity, tokens + elapsed * rate / 1000)
local allowed = 0
if tokens >= requested then
  tokens = tokens - requested
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil((capacity - tokens) / rate * 1000)))
return {allowed, math.floor(tokens)}
`;

async function build(dir) {
  const base = pathToFileURL(resolve(dir)).href;
  const script = await import(`${base}/backend/limiter-script.js`);
  const { cellParams } = await import(`${base}/limiters/cell-throttle.js`);
  const { gcraParams } = await import(`${base}/limiters/redis-gcra.js`);
  const { gcraMsParams, newGcraMsParams } = await import(`${base}/limiters/gcra-ms.js`);
  const { KeyType } = await import(`${base}/keyspace/keyspace.js`);
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
  return { script: script.LIMITER_SCRIPT, argv: (op) => script.limiterScriptArgv(limits[op], op === 'all', null), count: (op) => limits[op].length };
}

async function startRedis() {
  const dir = mkdtempSync(join(tmpdir(), 'cellgate-bench-redis-'));
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = 20000 + Math.floor(Math.random() * 40000);
    const proc = spawn('/usr/bin/redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '',
      '--appendonly', 'no', '--loglevel', 'warning'], { stdio: 'ignore' });
    const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => {});
    for (let i = 0; i < 100 && proc.exitCode === null; i++) {
      try {
        await client.connect();
        const info = await client.info('server');
        if (info.includes(`process_id:${proc.pid}\r`)) return { port, proc, dir, client };
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

  const run = async (cmd) => {
    await c.config('RESETSTAT');
    execFileSync('redis-benchmark', ['-h', '127.0.0.1', '-p', String(redis.port), '-c', '50', '-n', String(N), '-r', '100000',
      '-P', '16', '-q', ...cmd], { stdio: ['ignore', 'ignore', 'inherit'] });
    const m = /cmdstat_evalsha:calls=(\d+),usec=\d+,usec_per_call=([\d.]+),rejected_calls=\d+,failed_calls=(\d+)/.exec(await c.info('commandstats'));
    if (!m) throw new Error('no evalsha in INFO commandstats');
    if (Number(m[3]) > 0) throw new Error(`${m[3]} failed calls: ${cmd.join(' ')}`);
    return Number(m[2]);
  };
  const cmdFor = (variant, build, op, prefix) => {
    const argv = build.argv(op);
    if (!Array.isArray(argv)) throw new Error(argv.error);
    const keys = op === 'all' ? [`${prefix}a:__rand_int__`, `${prefix}b:__rand_int__`] : [`${prefix}${op}:__rand_int__`];
    return ['EVALSHA', shas[variant], String(keys.length), ...keys, ...argv];
  };

  const results = {};
  const variants = old ? ['classic', 'ours', 'old'] : ['classic', 'ours'];
  const floor = [];
  for (let round = 0; round < ROUNDS; round++) {
    floor.push(await run(['EVALSHA', shas.empty, '1', 'e:__rand_int__']));
    for (const op of OPS) {
      for (const v of variants) {
        const cmd = v === 'classic'
          ? ['EVALSHA', shas.classic, '1', `classic:__rand_int__`, '101', '16.666666666666668', '1']
          : cmdFor(v, v === 'ours' ? ours : old, op, `${v}:`);
        ((results[op] ??= {})[v] ??= []).push(await run(cmd));
      }
    }
  }
  console.log(`usec_per_call (INFO commandstats, median of ${ROUNDS} alternating rounds, -n ${N} -c 50 -P 16 -r 100000)`);
  console.log(`empty 'return {0}' script: ${median(floor).toFixed(2)}`);
  console.log(['op', ...variants, 'ours/classic', ...(old ? ['old/classic'] : [])].join('\t'));
  for (const op of OPS) {
    const r = results[op];
    const m = Object.fromEntries(variants.map((v) => [v, median(r[v])]));
    console.log([op, ...variants.map((v) => m[v].toFixed(2)), (m.ours / m.classic).toFixed(2),
      ...(old ? [(m.old / m.classic).toFixed(2)] : [])].join('\t'));
  }
} finally {
  stop();
}
