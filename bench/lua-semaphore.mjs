/**
 * The incumbent bench/concurrency.mjs measures cellgate's leases against: the counting semaphore many
 * services keep in Redis as a sorted set of lease ids scored by their expiry. Acquire drops the
 * expired members, counts the rest and adds the caller's id if fewer than the limit remain; release is
 * a plain ZREM. The key lives as long as its newest lease.
 * KEYS[1] semaphore; ARGV limit, lease ms, id. Reply 1 (granted) or 0 (full).
 */
export const LUA_SEMAPHORE_ACQUIRE = `
local limit = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], lease)
  return 1
end
return 0
`.trim();
