/**
 * The incumbent the benchmarks measure cellgate against: the token bucket many services run in Redis
 * today. bench/throttle.mjs (one cellgate vs one redis-server) and bench/backend.mjs (sidecars sharing a
 * Redis vs the applications calling Redis directly) load this same script.
 *
 * The token bucket many services keep in Redis: a hash {tokens, ts}, refilled by elapsed time × rate up
 * to the capacity, spent if enough tokens remain, expired when it would be full again.
 * KEYS[1] bucket; ARGV capacity, refill rate per second, tokens requested. Reply {allowed, tokens left}.
 */
export const LUA_TOKEN_BUCKET = `
local capacity = tonumber(ARGV[1])
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
`.trim();
