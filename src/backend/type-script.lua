local nowUs
if ARGV[1] ~= nil and ARGV[1] ~= '' then
  nowUs = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nowMs = math.floor(nowUs / 1000)
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'string' then return redis.status_reply(kind) end
-- The header only (a long sliding log is not read): the same checks as the limiter script's load.
local len = redis.call('STRLEN', KEYS[1])
local v = redis.call('GETRANGE', KEYS[1], 0, 33)
local names = { --@type_names }
if len < 34 or string.byte(v, 1) ~= 198 then return redis.status_reply('string') end
local name = names[string.byte(v, 2)]
if name == nil then return redis.status_reply('string') end
local exp, a, b, c = struct.unpack('<dddd', v, 3)
local function isint(x) return x == x and x == math.floor(x) and math.abs(x) <= 9007199254740992 end
if not (isint(exp) and isint(a) and isint(b) and isint(c)) then return redis.status_reply('string') end
if name == 'slidinglog' then
  if (len - 34) % 16 ~= 0 or a < 0 or b < 1 or b > ${MAX_BACKEND_SLIDING_LOG_LIMIT} or a + b ~= (len - 34) / 16 then return redis.status_reply('string') end
elseif name == 'concurrency' then
  -- Leases follow the header (lease-script.lua): their count is A.
  if a < 0 then return redis.status_reply('string') end
elseif len ~= 34 then
  return redis.status_reply('string')
end
if nowMs > exp then return redis.status_reply('none') end
return redis.status_reply(name)
