-- RL.BLOCK: KEYS[1] becomes a block (src/limiters/block.ts) ending ARGV[1] ms after now, whatever it
-- held. Now is the debug clock in µs (ARGV[2]) when given, else the backend's TIME, as the limiter
-- script's. The value is the limiter script's header with the block's type tag, its end as the
-- expiry and A, B, C 0; the key expires then, as every limiter key does at its stored expiry.
local nowUs
if ARGV[2] ~= nil and ARGV[2] ~= '' then
  nowUs = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local exp = math.floor(nowUs / 1000) + tonumber(ARGV[1])
redis.call('SET', KEYS[1], struct.pack('<BBdddd', 198, ${BLOCK_TYPE}, exp, 0, 0, 0), 'PXAT', string.format('%.0f', exp))
return redis.status_reply('OK')
