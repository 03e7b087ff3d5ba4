local MAGIC = 198
local HEADER = 34
local SAFE = 9007199254740992
local MAX_LOG = ${MAX_BACKEND_SLIDING_LOG_LIMIT}
local fmod, floor, ceil = math.fmod, math.floor, math.ceil

-- ceil(a / b) and floor(a / b) of integers, exact where the double quotient rounds. Defined once per
-- run of the script, not in the decisions that use them: a function defined there is a new closure
-- on every call of a batch.
local function ceil_div(a, b)
  local q = ceil(a / b)
  if q * b < a then q = q + 1 elseif q > 0 and (q - 1) * b >= a then q = q - 1 end
  return q
end
local function floor_div(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local args = ARGV[1]
local flags, nowUs = struct.unpack('<Bd', args)
local all = flags % 2 == 1
if flags % 4 < 2 then
  local t = redis.call('TIME')
  nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nowMs = floor(nowUs / 1000)
-- The backend's time (a batch's calls without a debug clock decide at it).
local timeUs = nowUs
-- How a call's reply is returned: a table of integers, or in a batch packed (below). CL.THROTTLE's
-- remaining saturated to i64::MAX is this text in a table, which no double holds exactly.
local function as_table(...) return { ... } end
local reply, MAXREM = as_table, '9223372036854775807'
-- Set by load when it read an empty string and did not ask whether the key exists (lazy): the
-- call's write then asks (SET NX), and a call that does not write asks EXISTS.
local unsure = false

-- A failed first access to a key: -1 (WRONGTYPE) for a key of another Redis type, -3 for a key this
-- node does not serve (a batch names its keys in ARGV, so a Cluster node checks each as it is read:
-- after a resharding or a failover the call is sent again on its own, by its slot). Any other error
-- (-OOM, -CLUSTERDOWN) ends the script, as redis.call's would: the sidecar's policy answers.
local function elsewhere(e)
  local m = e.err
  if string.sub(m, 1, 9) == 'WRONGTYPE' then return -1 end
  if string.find(m, 'non local key', 1, true) then return -3 end
  error(m, 0)
end

-- In a batch (nil outside one): the keys whose value this script wrote last with a header SET, as
-- { type, expiry, A, B, C }. Every write goes to Redis as it happens; this only spares a key named
-- again in the batch (a large tenant's key, a window within its window) the read of what was just
-- written. A write of any other form (a sliding log, a refund's, a DEL) forgets the key.
local written = nil
local function remember(key, t, exp, a, b, c)
  if written ~= nil then written[key] = { t, exp, a, b, c } end
end
local function forget(key)
  if written ~= nil then written[key] = nil end
end

-- The key's state: 0 when absent or expired at nowMs, -1 when it is not a cellgate value (or not of
-- type want), -2 and exp for a block (RL.BLOCK) that refuses until exp, -3 when this node does not
-- serve it, else 1 and exp, A, B, C, the value (nil for a long sliding log: only its start is read)
-- and the value's length. A sliding log of more than 8 entries is read by its header, then entry by
-- entry as the binary searches need them: a call reads O(log n) of it, never the whole log.
local function load(key, log, want, lazy)
  local v, len, hdr
  if written ~= nil and not log then
    -- What the header of the value written last says, checked as below (in the same order).
    local w = written[key]
    if w ~= nil then
      if nowMs > w[2] then return 0 end
      if w[1] ~= want then return -1 end
      return 1, w[2], w[3], w[4], w[5], nil, HEADER
    end
  end
  if not log then
    -- One byte past the 34 a value of this kind has: a longer value (a sliding log, a foreign
    -- string of any size) is told apart without copying it into Lua; another Redis type errors.
    v = redis.pcall('GETRANGE', key, 0, HEADER)
    if type(v) == 'table' then return elsewhere(v) end
    if v == '' then
      -- Absent, or an empty string (not cellgate's): most calls on an absent key write it, and
      -- SET NX tells the two apart then at no extra call.
      if lazy then
        unsure = true
        return 0
      end
      if redis.call('EXISTS', key) == 1 then return -1 end
      return 0
    end
    len = #v
    hdr = v
    if len > HEADER then
      -- Only a sliding log is longer; it may have expired (then the key is absent), which its header
      -- says: its length is needed for the header's checks, not its entries.
      if string.byte(v, 1) ~= MAGIC or string.byte(v, 2) ~= 5 then return -1 end
      len = redis.call('STRLEN', key)
    end
  else
    -- At most the header and 8 entries: the whole of a short log in one call; STRLEN only when
    -- there may be more.
    v = redis.pcall('GETRANGE', key, 0, HEADER + 127)
    if type(v) == 'table' then return elsewhere(v) end
    if v == '' then
      if redis.call('EXISTS', key) == 1 then return -1 end
      return 0
    end
    len = #v
    hdr = v
    if len == HEADER + 128 then
      len = redis.call('STRLEN', key)
      if len > HEADER + 128 then v = nil end
    end
  end
  if len < HEADER then return -1 end
  local magic, t, exp, a, b, c = struct.unpack('<BBdddd', hdr)
  if magic ~= MAGIC or t < 1 or t > ${MAX_TYPE} then return -1 end
  -- Integers within 2^53 (NaN fails x == x).
  if not (exp == floor(exp) and a == floor(a) and b == floor(b) and c == floor(c)
    and exp <= SAFE and exp >= -SAFE and a <= SAFE and a >= -SAFE and b <= SAFE and b >= -SAFE and c <= SAFE and c >= -SAFE) then
    return -1
  end
  if t == 5 then
    if (len - HEADER) % 16 ~= 0 or a < 0 or b < 1 or b > MAX_LOG or a + b ~= (len - HEADER) / 16 then return -1 end
  elseif len ~= HEADER then
    return -1
  end
  if nowMs > exp then return 0 end
  if t ~= want then
    -- A block ends at exp: the key is fresh then, as every type's is at its expiry instant.
    if t == ${BLOCK_TYPE} then
      if nowMs == exp then return 0 end
      return -2, exp
    end
    return -1
  end
  return 1, exp, a, b, c, v, len
end

-- One limit's decision (a transcription of src/limiters/), as locals: limited, limit, remaining,
-- retry, reset, delay, write, then the stored A, B, C and expiry (ms) when it writes, first (the
-- first µs at which the same call is allowed when the decision knows it better than now + retry),
-- and commit (a function doing the write, for the sliding log; nil: SET of the header). nil when
-- the call needs redis-gcra.ts's BigInt path.
local function decide(op, x1, x2, x3, x4, x5, x6, key, has, sa, sb, sc, sv, slen)
--@decide c
--@decide g
  end
  -- The RL.* rate limiters (rate-decision.ts): limit x1, period x2 (ms), burst x3, cost x4; a
  -- negative cost is FORCE (recorded beyond the limit, as debt) of its magnitude.
  local limit, period, burst, cost = x1, x2, x3, x4
  local force = cost < 0
  if force then cost = -cost end
--@decide t
--@decide f
--@decide w
  end
--@decide s
end

-- The KeyType each op reads and writes (the gcra family shares it).
local function type_of(op)
--@type_of
  return 1
end

-- The error of a call whose key could not be read (load's -1 or -3); nothing was written.
local function unread(st)
  if st == -3 then return redis.error_reply('${NOT_SERVED}') end
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end

-- The first µs the same call is allowed is decision's first, else now + retry, or when the key
-- expires if sooner (then it is fresh, and a call that can ever be allowed is allowed on a fresh
-- key); refusedForUs is the µs before it. µs instants past 2^53 (year 2255) are not exact doubles:
-- no exact answer then.
-- A single-limit call's reply from its decision; has and sexp: the key's state before it.
local function answer(limited, limit, remaining, retry, reset, delay, first, has, sexp)
  if remaining == 'max' then remaining = MAXREM end
  if not limited then
    if delay then return reply(0, 0, limit, remaining, retry, reset, delay, -1) end
    return reply(0, 0, limit, remaining, retry, reset, -1)
  end
  local refused = -1
  if retry ~= -1 then
    if first == nil then first = (nowMs + retry) * 1000 end
    if has and (sexp + 1) * 1000 < first then first = (sexp + 1) * 1000 end
    if first < SAFE then refused = first - nowUs - 1 end
  end
  if delay then return reply(1, 1, limit, remaining, retry, reset, delay, refused) end
  return reply(1, 1, limit, remaining, retry, reset, refused)
end

-- What a call (its ARGV element: flags, clock, op, parameters) does on an absent key, as it does on
-- every absent key at the same instant: the state it writes (type, expiry, A, B, C: the shape of
-- `written`'s entries, so this table is one), then its value, its expiry (PXAT) and its reply as
-- strings; false when it does not write there (or is a refund, a sliding log, or needs BigInt).
local function on_absent(args)
  local op, x1, x2, x3, x4, x5, x6 = struct.unpack('<c1dddddd', args, 10)
  if string.byte(op) < 97 or op == 's' then return false end
  local limited, limit, remaining, retry, reset, delay, write, a, b, c, exp, first = decide(op, x1, x2, x3, x4, x5, x6, nil, false)
  if not write or limited == nil then return false end
  local t = type_of(op)
  return { t, exp, a, b, c, struct.pack('<BBdddd', MAGIC, t, exp, a, b, c), string.format('%.0f', exp),
    answer(limited, limit, remaining, retry, reset, delay, first, false, 0) }
end

-- One call: its ARGV element, its keys, whether all-or-nothing. A function, so a unit of several
-- calls (flag 4) runs it per call (the body is not indented for it, to keep its text as it was).
local function run(args, KEYS, all)
local n = #KEYS
if n == 1 then
  -- The single-limit call: no table but the reply.
  local op, x1, x2, x3, x4, x5, x6 = struct.unpack('<c1dddddd', args, 10)
  local key = KEYS[1]
  -- An uppercase op is REFUND of the units in the cost field.
  local refund = string.byte(op) < 97
  if refund then op = string.lower(op) end
  local t = type_of(op)
  unsure = false
  local st, sexp, sa, sb, sc, sv, slen = load(key, op == 's', t, not refund)
  if st == -2 then
    -- A block: refused until sexp, nothing changed (a refund neither). The limit is the call's own:
    -- x1 for CL.THROTTLE and GCRA, else what a peek at a fresh key reports.
    local waitMs, refused = sexp - nowMs, -1
    if sexp * 1000 < SAFE then refused = sexp * 1000 - nowUs - 1 end
    if op == 'c' or op == 'g' then
      local s = ceil(waitMs / 1000)
      return reply(1, 1, x1, 0, s, s, refused)
    end
    if op == 'r' then x6 = 0 else x4 = 0 end
    local _, limit = decide(op, x1, x2, x3, x4, x5, x6, key, false)
    return reply(1, 1, limit, 0, waitMs, waitMs, 0, refused)
  end
  if st < 0 then return unread(st) end
  local has = st == 1
  if refund then
    -- The refunds of rate-decision.ts's modules (tokenBucketRefund, ...): effect 0 nothing, 1 store
    -- na/nb/nc expiring at nexp, 2 delete (as full as a fresh key). Then the reply is a COST 0 peek
    -- on the new state, as locally.
    if has then
      local limit, period, units = x1, x2, x4
      if op == 'r' then units = x6 end
      local effect, na, nb, nc, nexp = 0, 0, 0, 0, 0
--@refund t
--@refund f
--@refund w
--@refund r
--@refund s
      end
      if effect == 2 then redis.call('DEL', key)
      elseif effect == 1 and op ~= 's' then
        redis.call('SET', key, struct.pack('<BBdddd', MAGIC, t, nexp, na, nb, nc), 'PXAT', string.format('%.0f', nexp))
      end
      if effect ~= 0 then
        forget(key)
        st, sexp, sa, sb, sc, sv, slen = load(key, op == 's', t)
        has = st == 1
      end
    end
    if op == 'r' then x6 = 0 else x4 = 0 end
  end
  local limited, limit, remaining, retry, reset, delay, write, a, b, c, exp, first, commit =
    decide(op, x1, x2, x3, x4, x5, x6, key, has, sa, sb, sc, sv, slen)
  if limited == nil then return redis.error_reply('${BACKEND_WIDE_ERROR}') end
  if write then
    if commit then
      commit()
      forget(key)
    elseif unsure then
      if not redis.call('SET', key, struct.pack('<BBdddd', MAGIC, t, exp, a, b, c), 'PXAT', string.format('%.0f', exp), 'NX') then return unread(-1) end
      remember(key, t, exp, a, b, c)
    else
      redis.call('SET', key, struct.pack('<BBdddd', MAGIC, t, exp, a, b, c), 'PXAT', string.format('%.0f', exp))
      remember(key, t, exp, a, b, c)
    end
  elseif unsure and redis.call('EXISTS', key) == 1 then return unread(-1) end
  return answer(limited, limit, remaining, retry, reset, delay, first, has, sexp)
end

-- Several limits (RL.ALL): every key is looked up, then every limit decided, then written. A
-- state and a decision are each one table made by a constructor around the call (sized once,
-- where assigning the values one by one would grow and rehash it several times).
local st, ds = {}, {}
for i = 1, n do
  local op = string.sub(args, 10 + 49 * (i - 1), 10 + 49 * (i - 1))
  local s = { load(KEYS[i], op == 's', type_of(op)) }
  if s[1] == -1 or s[1] == -3 then return unread(s[1]) end
  st[i] = s
end
local limited = false
for i = 1, n do
  local s = st[i]
  local op, x1, x2, x3, x4, x5, x6 = struct.unpack('<c1dddddd', args, 10 + 49 * (i - 1))
  local d
  if s[1] == -2 then
    -- A block limits the whole call: refused until s[2], the limit a peek at a fresh key reports.
    if op == 'r' then x6 = 0 else x4 = 0 end
    d = { decide(op, x1, x2, x3, x4, x5, x6, KEYS[i], false) }
    d[1], d[3], d[4], d[5], d[6], d[7], d[12] = true, 0, s[2] - nowMs, s[2] - nowMs, 0, false, s[2] * 1000
  else
    d = { decide(op, x1, x2, x3, x4, x5, x6, KEYS[i], s[1] == 1, s[3], s[4], s[5], s[6], s[7]) }
  end
  if d[1] == nil then return redis.error_reply('${BACKEND_WIDE_ERROR}') end
  if d[1] then limited = true end
  ds[i] = d
end
local out = { 0 }
if limited then out[1] = 1 end
local k = 1
for i = 1, n do
  local s, d = st[i], ds[i]
  if d[7] and not (all and limited) then
    if d[13] then
      d[13]()
      forget(KEYS[i])
    else
      local t = type_of(string.sub(args, 10 + 49 * (i - 1), 10 + 49 * (i - 1)))
      redis.call('SET', KEYS[i], struct.pack('<BBdddd', MAGIC, t, d[11], d[8], d[9], d[10]), 'PXAT', string.format('%.0f', d[11]))
      remember(KEYS[i], t, d[11], d[8], d[9], d[10])
    end
  end
  local remaining, retry = d[3], d[4]
  if remaining == 'max' then remaining = MAXREM end
  local refused = -1
  if d[1] and retry ~= -1 then
    local first = d[12]
    if first == nil then first = (nowMs + retry) * 1000 end
    if s[1] == 1 and (s[2] + 1) * 1000 < first then first = (s[2] + 1) * 1000 end
    if first < SAFE then refused = first - nowUs - 1 end
  end
  if d[1] then out[k + 1] = 1 else out[k + 1] = 0 end
  out[k + 2] = d[2]
  out[k + 3] = remaining
  out[k + 4] = retry
  out[k + 5] = d[5]
  if d[6] then out[k + 6] = d[6]; k = k + 1 end
  out[k + 6] = refused
  k = k + 6
end
if reply ~= as_table then return reply(unpack(out)) end
return out
end

--@leases
if flags < 4 then return run(args, KEYS, all) end
if flags >= 8 then
  -- A batch (the calls of one sidecar's event-loop turn for this node, in order): no KEYS; after
  -- the header, each call's own ARGV element followed by its keys. Each call decides at its own
  -- debug clock when it carries one (DEBUG CLOCK may change between two commands of a turn), else
  -- at the backend's TIME, read once. The reply is one string: per call, the count n of its reply
  -- integers then the n integers, all little-endian doubles (i64::MAX as +inf); an error is a
  -- negative count (-1 WRONGTYPE, -2 NOT_SERVED, -3 BACKEND_WIDE_ERROR, -4 another). One string,
  -- where a table of replies is one RESP reply per integer for Redis to write and the sidecar to read.
  local formats = {}
  reply = function(...)
    local n = select('#', ...)
    local f = formats[n]
    if f == nil then
      f = '<' .. string.rep('d', n + 1)
      formats[n] = f
    end
    return struct.pack(f, n, ...)
  end
  MAXREM = math.huge
  local codes = { ['WRONGTYPE Operation against a key holding the wrong kind of value'] = -1, ['${NOT_SERVED}'] = -2, ['${BACKEND_WIDE_ERROR}'] = -3 }
  -- seen: the batch's keys so far. absent: on_absent of each distinct element so far. A batch's
  -- calls mostly share their element (one limit, no debug clock: the same bytes, hence the same
  -- Lua string) and mostly name keys that are absent (a key in use is usually named again in the
  -- same batch, which reads it): a key's first call decides as on an absent key and writes only if
  -- it is (SET NX), one Redis call where reading first takes two, and that decision, its value and
  -- its reply are computed once per element, not per call. Present (or an empty string, or a key
  -- seen before in the batch): run decides it as usual.
  -- Where keys live longer than the gap between their calls (a fixed window within its window, a
  -- quota), the SET NX finds most of them present and is a wasted call before the read: once a
  -- batch's SET NX have failed more than twice beyond their successes, its next keys are read
  -- first. Either way the same decision is made; only the Redis calls that reach it differ.
  local seen, absent = {}, {}
  local nx_hits, nx_misses = 0, 0
  written = {}
  local replies, c, nargs, r, single = {}, 2, #ARGV, 0, {}
  while c <= nargs do
    local one = ARGV[c]
    local n = (#one - 9) / 49
    local out
    if string.byte(one, 1) >= 16 then
      -- A concurrency lease's call (lease-script.lua): one key.
      n = 1
      if string.byte(one, 1) % 4 >= 2 then nowUs = struct.unpack('<d', one, 2) else nowUs = timeUs end
      nowMs = floor(nowUs / 1000)
      seen[ARGV[c + 1]] = true
      out = lease(one, ARGV[c + 1])
    elseif n == 1 then
      local key = ARGV[c + 1]
      if not seen[key] and nx_misses <= nx_hits + 2 then
        seen[key] = true
        local known = absent[one]
        if known == nil then
          if string.byte(one, 1) % 4 >= 2 then nowUs = struct.unpack('<d', one, 2) else nowUs = timeUs end
          nowMs = floor(nowUs / 1000)
          known = on_absent(one)
          absent[one] = known
        end
        if known then
          -- pcall: the first access to the key, which a Cluster node may not serve (as load's GETRANGE).
          local set = redis.pcall('SET', key, known[6], 'PXAT', known[7], 'NX')
          if type(set) == 'table' then
            if set.ok == nil then out = unread(elsewhere(set))
            else
              out = known[8]
              written[key] = known
              nx_hits = nx_hits + 1
            end
          else nx_misses = nx_misses + 1 end
        end
      end
    end
    if out == nil then
      local f = string.byte(one, 1)
      if f % 4 >= 2 then nowUs = struct.unpack('<d', one, 2) else nowUs = timeUs end
      nowMs = floor(nowUs / 1000)
      local keys = single
      if n == 1 then single[1] = ARGV[c + 1]
      else
        keys = {}
        for j = 1, n do keys[j] = ARGV[c + j] end
      end
      out = run(one, keys, f % 2 == 1)
    end
    if type(out) == 'table' then out = struct.pack('<d', codes[out.err] or -4) end
    r = r + 1
    replies[r] = out
    c = c + n + 1
  end
  return table.concat(replies)
end
-- A unit (a transaction's calls, in order): ARGV[1] is the header (flags, clock), then one element
-- per call laid out as a call's own ARGV, whose keys follow each other in KEYS. The reply holds each
-- call's reply, or its error (WRONGTYPE): a call's error does not stop the calls after it.
local replies, at = {}, 0
for c = 2, #ARGV do
  local one = ARGV[c]
  local keys = {}
  for j = 1, (#one - 9) / 49 do keys[j] = KEYS[at + j] end
  at = at + #keys
  replies[c - 1] = run(one, keys, string.byte(one, 1) % 2 == 1)
end
return replies
