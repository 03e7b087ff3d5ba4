/**
 * The limiter decisions as one Lua script run by a real Redis (docs/backend.md, "How state is
 * stored"): each limiter call of the backend mode is one EVALSHA of LIMITER_SCRIPT, atomic on the
 * Redis side, with the keys of the call in KEYS.
 *
 * The script is a line-by-line transcription of src/limiters/ (CL.THROTTLE, Redis's GCRA and the
 * six RL.* algorithms) and of the lookup / WRONGTYPE / decide / commit steps of
 * src/commands/throttle.ts and src/commands/ratelimit.ts. Redis's Lua 5.1 computes with doubles, as
 * the TypeScript does, so the same operations give the same numbers; where the two languages differ
 * the script says so (`%` is floored in Lua: math.fmod is used, as JS's `%` truncates; numbers go out
 * with '%.0f', never tostring's 14 digits). The differential property test
 * (test/backend/limiter-script.property.test.ts) replays random timelines on both and compares.
 *
 * Not transcribed: redis-gcra.ts's BigInt path (intervals beyond 2^51 µs, limits or TATs beyond 2^53).
 * limiterScriptArgv refuses such parameters up front, and the script refuses a stored TAT that would
 * need it; neither happens with TATs of this era and intervals below 71 years.
 */
import type { CellParams } from '../limiters/cell-throttle.js';
import type { GcraParams } from '../limiters/redis-gcra.js';
import { KeyType } from '../keyspace/keyspace.js';

/** One limit of a call, as the command parsed it (the same objects the local path passes to src/limiters). */
export type ScriptLimit =
  | { kind: 'cl.throttle'; params: CellParams; quantity: number }
  | { kind: 'gcra'; params: GcraParams }
  | { kind: 'rl'; type: KeyType; limit: number; periodMs: number; burst: number; gcra: CellParams; cost: number };

export interface LimitOutcome {
  /** The reply integers exactly as the local command writes them: 5 for cl.throttle/gcra, 6 for rl. */
  values: number[];
  /**
   * When this limit refused: the same call stays refused through decision instant + refusedForUs µs
   * (if nobody else spends) and is allowed 1 µs later. −1 when allowed, or when it can never be
   * allowed (the cost is above the capacity).
   */
  refusedForUs: number;
}

export interface ScriptOutcome {
  limited: boolean;
  limits: LimitOutcome[];
}

/** The error for parameters only redis-gcra.ts's BigInt path computes exactly. */
export const BACKEND_WIDE_ERROR = 'ERR GCRA values beyond 2^53 are not supported with a backend';

/** ARGV fields per limit: an op code and six numbers. */
const FIELDS = 7;

/**
 * The value layout (docs/backend.md): byte 1 the format tag, byte 2 the KeyType, then little-endian
 * doubles: absolute expiry (ms), A, B, C; a sliding log appends its entries as (ms, running total).
 */
const LUA = String.raw`
local MAGIC = 198
local HEADER = 34
local WHOLE = HEADER + 16 * 8
local MAX_SCALED = 4503599627370496
local SAFE = 9007199254740992
local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local WIDE = '${BACKEND_WIDE_ERROR}'

local nowUs
if ARGV[1] ~= '' then
  nowUs = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nowMs = math.floor(nowUs / 1000)

-- JS helpers. Math.trunc; JS's % (truncating) is C's fmod, exact for doubles.
local function trunc(x) if x < 0 then return math.ceil(x) end return math.floor(x) end
local fmod = math.fmod
local function ceil_div(a, b)
  local q = math.ceil(a / b)
  if q * b < a then q = q + 1 elseif q > 0 and (q - 1) * b >= a then q = q - 1 end
  return q
end
local function floor_div(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function isint(x) return x == x and x == math.floor(x) and x <= SAFE and x >= -SAFE end

-- The key's state, or nil when absent or expired at nowMs; false when it is not a cellgate value.
-- A value of at most WHOLE bytes is read at once; a longer one (a sliding log of more than 8
-- entries) by its header, then entry by entry as the binary searches need them: a call reads
-- O(log n) of it, never the whole log.
local function load(key, op)
  local v, len, hdr
  if op ~= 's' then
    v = redis.pcall('GET', key)
    if type(v) == 'table' then return false end
    if not v then return nil end
    len = #v
    hdr = v
  else
    len = redis.pcall('STRLEN', key)
    if type(len) == 'table' then return false end
    if len == 0 then
      if redis.call('EXISTS', key) == 1 then return false end
      return nil
    end
    if len <= WHOLE then v = redis.call('GET', key); hdr = v else hdr = redis.call('GETRANGE', key, 0, HEADER - 1) end
  end
  if len < HEADER or string.byte(hdr, 1) ~= MAGIC then return false end
  local t = string.byte(hdr, 2)
  if t < 1 or t > 6 then return false end
  local exp, a, b, c = struct.unpack('<dddd', hdr, 3)
  if not (isint(exp) and isint(a) and isint(b) and isint(c)) then return false end
  if t == 5 then
    if (len - HEADER) % 16 ~= 0 or a < 0 or b < 1 or a + b ~= (len - HEADER) / 16 then return false end
  elseif len ~= HEADER then
    return false
  end
  if nowMs > exp then return nil end
  return { t = t, exp = exp, a = a, b = b, c = c, v = v, key = key, cache = {} }
end

-- (us, ns) pairs, as cell-throttle.ts.
local function mul(us, ns, n)
  local thousands = math.floor(n / 1000)
  local units = n - thousands * 1000
  local unitsNs = ns * units
  return us * n + ns * thousands + math.floor(unitsNs / 1000), fmod(unitsNs, 1000)
end
local function add(aUs, aNs, bUs, bNs)
  local ns = aNs + bNs
  local carry = 0
  if ns >= 1000 then carry = 1 end
  return aUs + bUs + carry, ns - carry * 1000
end
local function sub(aUs, aNs, bUs, bNs)
  local ns = aNs - bNs
  local borrow = 0
  if ns < 0 then borrow = 1 end
  return aUs - bUs - borrow, ns + borrow * 1000
end
local function trunc_us(us, ns) if us < 0 and ns > 0 then return us + 1 end return us end
local function cell_seconds(us, ns)
  local total = trunc_us(us, ns)
  local secs = trunc(total / 1e6)
  local msPart = fmod(trunc(total / 1000), 1000)
  if msPart > 0 then return secs + 1 end
  return secs
end

-- cellThrottle. p = { limit, iUs, iNs, tUs, tNs }. Also returns first: the first µs at which the
-- same call is allowed (nil if never or allowed now).
local function cell_throttle(p, q, has, tatUs, tatNs)
  if not has then tatUs = nowUs; tatNs = 0 end
  local d = { limit = p.limit, retry = -1, write = false }
  local ttlUs, ttlNs
  if q > p.limit then
    d.limited = true
    ttlUs, ttlNs = sub(tatUs, tatNs, nowUs, 0)
  else
    local incUs, incNs = mul(p.iUs, p.iNs, q)
    local newUs, newNs
    if tatUs > nowUs or (tatUs == nowUs and tatNs > 0) then newUs, newNs = add(tatUs, tatNs, incUs, incNs)
    else newUs, newNs = add(nowUs, 0, incUs, incNs) end
    local allowUs, allowNs = sub(newUs, newNs, p.tUs, p.tNs)
    local diffUs, diffNs = sub(nowUs, 0, allowUs, allowNs)
    if diffUs < 0 then
      d.limited = true
      if incUs < p.tUs or (incUs == p.tUs and incNs <= p.tNs) then
        local waitUs, waitNs = sub(0, 0, diffUs, diffNs)
        d.retry = cell_seconds(waitUs, waitNs)
        -- Allowed once now >= allow (the TAT is ahead, so allow does not move): its ceiling in µs.
        d.first = allowUs
        if allowNs > 0 then d.first = allowUs + 1 end
      end
      ttlUs, ttlNs = sub(tatUs, tatNs, nowUs, 0)
    else
      d.limited = false
      ttlUs, ttlNs = sub(newUs, newNs, nowUs, 0)
      d.write = true
      d.a = newUs
      d.b = newNs
      d.c = 0
      d.exp = math.floor(nowUs / 1000) + trunc(trunc_us(ttlUs, ttlNs) / 1000)
    end
  end
  local nextUs, nextNs = sub(p.tUs, p.tNs, ttlUs, ttlNs)
  local probeUs, probeNs = add(nextUs, nextNs, p.iUs, p.iNs)
  if probeUs > 0 or (probeUs == 0 and probeNs > 0) then
    local nextWhole = trunc_us(nextUs, nextNs)
    if p.iUs == 0 then
      if nextWhole > 0 then d.remaining = 'max' else d.remaining = 0 end
    else
      d.remaining = trunc(nextWhole / p.iUs)
      if d.remaining < 0 then d.remaining = 0 end
    end
  else
    d.remaining = 0
  end
  d.reset = cell_seconds(ttlUs, ttlNs)
  return d
end

-- Redis's GCRA (redis-gcra.ts, the double path). p = { limit, e, v, inc }.
local function ceil_seconds(us) return math.ceil(us / 1000000) + 0 end
local function redis_gcra(p, s)
  local now = math.floor(nowUs / 1000) * 1000
  local tat = now
  if s then
    if s.c ~= 0 then return nil end
    tat = s.a
  end
  local base = tat
  if now > tat then base = now end
  local newTat = base + p.inc
  -- Beyond 2^53 the doubles would round where redis-gcra.ts switches to BigInt.
  if newTat > 9007199254740991 or tat < -9007199254740991 then return nil end
  local d = { limit = p.limit, retry = -1, write = false }
  local diff = now - (newTat - p.v)
  local ttl
  if diff < 0 then
    d.limited = true
    if p.inc <= p.v then
      d.retry = ceil_seconds(-diff)
      -- Allowed once the ms-truncated now reaches newTat - v (tat is ahead, so it does not move).
      d.first = math.ceil((newTat - p.v) / 1000) * 1000
    end
    ttl = tat - now
  else
    d.limited = false
    ttl = newTat - now
    d.write = true
    d.a = newTat
    d.b = 0
    d.c = 0
    d.exp = math.floor(newTat / 1000)
  end
  local nx = p.v - ttl
  if nx > -p.e then d.remaining = trunc(nx / p.e) else d.remaining = 0 end
  d.reset = ceil_seconds(ttl)
  return d
end

-- rate-decision.ts's peekDecision.
local function peek(limit, remaining, reset)
  return { limited = false, limit = limit, remaining = remaining, retry = -1, reset = reset, delay = 0, write = false }
end

local function drained(deficit, since, now, limit)
  if deficit == 0 then return 0 end
  local elapsed = 0
  if now > since then elapsed = now - since end
  if elapsed >= ceil_div(deficit, limit) then return 0 end
  return deficit - elapsed * limit
end
local function spendable_units(capacity, deficit, period)
  if deficit < capacity then return floor_div(capacity - deficit, period) end
  return 0
end

local function token_bucket(limit, period, burst, cost, s)
  local capacity = burst * period
  local atMs = nowMs
  if s and s.a > nowMs then atMs = s.a end
  local ahead = atMs - nowMs
  local deficit = 0
  if s then deficit = drained(s.b, s.a, atMs, limit) end
  local reset = 0
  if deficit > 0 then reset = ahead + ceil_div(deficit, limit) end
  if cost == 0 then return peek(burst, spendable_units(capacity, deficit, period), reset) end
  local needed = deficit + cost * period
  if cost <= burst and needed <= capacity then
    local exp = atMs + ceil_div(needed, limit)
    return { limited = false, limit = burst, remaining = floor_div(capacity - needed, period), retry = -1,
      reset = exp - nowMs, delay = 0, write = true, a = atMs, b = needed, c = 0, exp = exp }
  end
  local retry = -1
  if cost <= burst then retry = ahead + ceil_div(needed - capacity, limit) end
  return { limited = true, limit = burst, remaining = spendable_units(capacity, deficit, period), retry = retry,
    reset = reset, delay = 0, write = false }
end

local function leaky_bucket(limit, period, burst, cost, s)
  local d = token_bucket(limit, period, burst, cost, s)
  if d.limited or cost == 0 or not s then return d end
  local atMs = nowMs
  if s.a > nowMs then atMs = s.a end
  d.delay = atMs - nowMs + ceil_div(drained(s.b, s.a, atMs, limit), limit)
  return d
end

local function fixed_window(limit, period, cost, s)
  local ws = nowMs - fmod(nowMs, period)
  if s and s.a > ws then ws = s.a end
  local count = 0
  if s and s.a == ws then count = s.b end
  local wend = ws + period
  local untilEnd = wend - nowMs
  local spendable = 0
  if count < limit then spendable = limit - count end
  local reset = 0
  if count > 0 then reset = untilEnd end
  if cost == 0 then return peek(limit, spendable, reset) end
  if count + cost <= limit then
    return { limited = false, limit = limit, remaining = limit - count - cost, retry = -1, reset = untilEnd,
      delay = 0, write = true, a = ws, b = count + cost, c = 0, exp = wend }
  end
  local d = { limited = true, limit = limit, remaining = spendable, retry = -1, reset = reset, delay = 0, write = false }
  if cost <= limit then
    d.retry = untilEnd
    -- The count is s.b until a window of this period starts after s.a: at untilEnd when s.a is one
    -- of this period's window starts, earlier when it was written with another period.
    d.first = (s.a - fmod(s.a, period) + period) * 1000
  end
  return d
end

local function sliding_window(limit, period, cost, s)
  local atMs = nowMs
  if s and s.a > nowMs then atMs = s.a end
  local ws = atMs - fmod(atMs, period)
  local current, previous = 0, 0
  if s then
    if s.a == ws then current = s.b; previous = s.c
    elseif s.a + period == ws then previous = s.b end
  end
  local elapsed = atMs - ws
  local budget = limit * period - previous * (period - elapsed)
  local q
  if budget > 0 then q = floor_div(budget, period) else q = -ceil_div(-budget, period) end
  local spendable = math.max(0, q - current)
  local reset = 0
  if current > 0 then reset = ws + 2 * period - nowMs elseif previous > 0 then reset = ws + period - nowMs end
  if cost == 0 then return peek(limit, spendable, reset) end
  if cost <= spendable then
    return { limited = false, limit = limit, remaining = spendable - cost, retry = -1, reset = ws + 2 * period - nowMs,
      delay = 0, write = true, a = ws, b = current + cost, c = previous, exp = ws + 2 * period }
  end
  local d = { limited = true, limit = limit, remaining = spendable, retry = -1, reset = reset, delay = 0, write = false }
  if cost > limit then return d end
  local room = limit - current - cost
  if room >= 0 and previous > 0 then
    local needed = period - floor_div(room * period, previous)
    if needed < period then
      d.retry = ws + needed - nowMs
      return d
    end
  end
  local nextElapsed = 0
  if current ~= 0 then nextElapsed = math.max(0, period - floor_div((limit - cost) * period, current)) end
  d.retry = ws + period + nextElapsed - nowMs
  return d
end

-- The sliding log: after the header, entries of 16 bytes (ms, running total), oldest first; the
-- first A of them slid out (dropped lazily, see log_write), the B after them are the log. Entry k
-- below is the k-th of those B; the units in entries 0..k are total(k) - offset, with
-- offset = total(B-1) - C.
local function entry_pos(s, k) return HEADER + 1 + 16 * (s.a + k) end
local function log_entry(s, k)
  if s.v then return struct.unpack('<dd', s.v, entry_pos(s, k)) end
  local e = s.cache[k]
  if not e then
    local p = entry_pos(s, k) - 1
    e = redis.call('GETRANGE', s.key, p, p + 15)
    s.cache[k] = e
  end
  return struct.unpack('<dd', e)
end
local function log_ms(s, k) local ms = log_entry(s, k); return ms end
local function log_total(s, k) local _, total = log_entry(s, k); return total end
local function log_view(s)
  if not s then return 0, 0 end
  return s.b, log_total(s, s.b - 1) - s.c
end
local function count_expired(v, n, cutoff)
  if n == 0 or log_ms(v, 0) > cutoff then return 0 end
  local lo, step, hi = 1, 1, 1
  while hi < n and log_ms(v, hi) <= cutoff do
    lo = hi + 1
    step = step * 2
    hi = math.min(n, lo + step - 1)
  end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if log_ms(v, mid) <= cutoff then lo = mid + 1 else hi = mid end
  end
  return lo
end
local function first_reaching(v, offset, from, n, target)
  if log_total(v, from) - offset >= target then return from end
  local lo, step = from + 1, 1
  local hi = math.min(n - 1, lo)
  while hi < n - 1 and log_total(v, hi) - offset < target do
    lo = hi + 1
    step = step * 2
    hi = math.min(n - 1, lo + step - 1)
  end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if log_total(v, mid) - offset >= target then hi = mid else lo = mid + 1 end
  end
  return lo
end

local function sliding_log(limit, period, cost, s)
  local n, offset = log_view(s)
  local v = s
  local expiredEntries, expiredUnits = 0, 0
  local atMs = nowMs
  local newest = nil
  if n > 0 then
    newest = log_ms(v, n - 1)
    if newest > atMs then atMs = newest end
    expiredEntries = count_expired(v, n, atMs - period)
    if expiredEntries > 0 then expiredUnits = log_total(v, expiredEntries - 1) - offset end
  end
  local live = 0
  if n > 0 then live = s.c - expiredUnits end
  local spendable = math.max(0, limit - live)
  local reset = 0
  if live > 0 then reset = newest + period - nowMs end
  if cost == 0 then return peek(limit, spendable, reset) end
  if cost <= spendable then
    return { limited = false, limit = limit, remaining = spendable - cost, retry = -1, reset = atMs + period - nowMs,
      delay = 0, write = true, exp = atMs + period, when = atMs, firstLive = expiredEntries, units = live }
  end
  local d = { limited = true, limit = limit, remaining = spendable, retry = -1, reset = reset, delay = 0, write = false }
  if cost <= limit then
    local k = first_reaching(v, offset, expiredEntries, n, expiredUnits + live + cost - limit)
    d.retry = log_ms(v, k) + period - nowMs
  end
  return d
end

local function header(t, d) return struct.pack('<BBdddd', MAGIC, t, d.exp, d.a, d.b, d.c) end
local function pxat(ms) return string.format('%.0f', ms) end

-- Stores a sliding log after an allowed call (slidingLogRecord): drops what slid out, merges or
-- appends the call's entry. In place (APPEND / SETRANGE of a few bytes) while the dropped prefix is
-- shorter than the log; else the log is rewritten without it, which each entry pays for once when
-- it slides out: O(1) amortized, as the local ring.
local function log_write(key, s, d, cost)
  local n = 0
  if s then n = s.b end
  local first, units, when = d.firstLive, d.units, d.when
  local live = n - first
  local merge = live > 0 and log_ms(s, n - 1) == when
  local after = live + 1
  if merge then after = live end
  local newestTotal = 0
  if live > 0 then newestTotal = log_total(s, n - 1) end
  -- Keep the totals exact integers: past 2^52 count them from the oldest live entry again.
  local restart = newestTotal + cost > MAX_SCALED
  d.b = after
  d.c = units + cost
  if s and not s.v and live > 0 and not restart and s.a + first < after then
    d.a = s.a + first
    if merge then
      redis.call('SETRANGE', key, HEADER + 16 * (s.a + n - 1) + 8, struct.pack('<d', newestTotal + cost))
    else
      redis.call('APPEND', key, struct.pack('<dd', when, newestTotal + cost))
    end
    redis.call('SETRANGE', key, 0, header(5, d))
    redis.call('PEXPIREAT', key, pxat(d.exp))
    return
  end
  local body = ''
  if live > 0 then
    local from = entry_pos(s, first)
    if s.v then body = string.sub(s.v, from, from + 16 * live - 1)
    else body = redis.call('GETRANGE', key, from - 1, from + 16 * live - 2) end
    if restart then
      local base = newestTotal - units
      local parts = {}
      for k = 0, live - 1 do
        local ms, total = struct.unpack('<dd', body, 1 + 16 * k)
        parts[k + 1] = struct.pack('<dd', ms, total - base)
      end
      body = table.concat(parts)
      newestTotal = units
    end
  end
  if merge then
    body = string.sub(body, 1, #body - 8) .. struct.pack('<d', newestTotal + cost)
  else
    body = body .. struct.pack('<dd', when, newestTotal + cost)
  end
  d.a = 0
  redis.call('SET', key, header(5, d) .. body, 'PXAT', pxat(d.exp))
end

local function reply(d, six)
  local r = { 0, d.limit, d.remaining, d.retry, d.reset }
  if d.limited then r[1] = 1 end
  if r[3] == 'max' then r[3] = '9223372036854775807' end
  if six then r[6] = d.delay end
  return r
end

local all = ARGV[2] == '1'
local n = #KEYS
local states = {}
local types = {}
for i = 1, n do
  local base = 3 + (i - 1) * ${FIELDS}
  local op = ARGV[base]
  local t = 1
  if op == 't' then t = 2 elseif op == 'l' then t = 3 elseif op == 'f' then t = 4 elseif op == 's' then t = 5 elseif op == 'w' then t = 6 end
  local s = load(KEYS[i], op)
  if s == false or (s and s.t ~= t) then return redis.error_reply(WRONGTYPE) end
  states[i] = s
  types[i] = t
end

local decisions = {}
local limited = false
for i = 1, n do
  local base = 3 + (i - 1) * ${FIELDS}
  local op = ARGV[base]
  local x1, x2, x3, x4, x5, x6 = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]),
    tonumber(ARGV[base + 4]), tonumber(ARGV[base + 5]), tonumber(ARGV[base + 6])
  local s = states[i]
  local d
  if op == 'c' or op == 'r' then
    local p = { limit = x1, iUs = x2, iNs = x3, tUs = x4, tNs = x5 }
    local tatUs, tatNs = 0, 0
    if s then tatUs = s.a; tatNs = s.b end
    d = cell_throttle(p, x6, s ~= nil, tatUs, tatNs)
    if op == 'r' then
      -- gcraMsDecide: millisecond fields over the same decision; COST 0 never writes.
      local cost = x6
      if not s then tatUs = nowUs; tatNs = 0 end
      local c = d
      d = { limit = p.limit, delay = 0, limited = cost > 0 and c.limited, write = cost > 0 and c.write, retry = -1 }
      if d.limited and cost <= p.limit then
        local bUs, bNs = nowUs, 0
        if tatUs > nowUs or (tatUs == nowUs and tatNs > 0) then bUs = tatUs; bNs = tatNs end
        local mUs, mNs = mul(p.iUs, p.iNs, cost)
        local us = bUs - nowUs + mUs - p.tUs
        local ns = bNs + mNs - p.tNs
        while ns >= 1000 do ns = ns - 1000; us = us + 1 end
        while ns < 0 do ns = ns + 1000; us = us - 1 end
        if us < 0 or (us == 0 and ns == 0) then d.retry = 0 else
          if ns > 0 then d.retry = ceil_div(us + 1, 1000) else d.retry = ceil_div(us, 1000) end
        end
        d.first = c.first
      end
      local aUs, aNs = tatUs, tatNs
      if d.write then aUs = c.a; aNs = c.b end
      local rUs, rNs = aUs - nowUs, aNs
      if rUs < 0 or (rUs == 0 and rNs == 0) then d.reset = 0 else
        if rNs > 0 then d.reset = ceil_div(rUs + 1, 1000) else d.reset = ceil_div(rUs, 1000) end
      end
      -- spendable(p, ttl): whole units spendable when the TAT is ttl ahead.
      local tUs, tNs = rUs, rNs
      if tUs < 0 then tUs = 0; tNs = 0 end
      local xUs, xNs = p.tUs - tUs, p.tNs - tNs
      if xNs < 0 then xNs = xNs + 1000; xUs = xUs - 1 end
      local q = 0
      if xUs >= 0 then
        q = math.min(p.limit, math.max(0, math.floor((xUs * 1000 + xNs) / (p.iUs * 1000 + p.iNs))))
        local function fits(k)
          local mu, mn = mul(p.iUs, p.iNs, k)
          return mu < xUs or (mu == xUs and mn <= xNs)
        end
        while q > 0 and not fits(q) do q = q - 1 end
        while q < p.limit and fits(q + 1) do q = q + 1 end
      end
      d.remaining = q
      if d.write then
        d.a = c.a
        d.b = c.b
        d.c = 0
        d.exp = math.floor(nowUs / 1000) + d.reset
      end
    end
  elseif op == 'g' then
    d = redis_gcra({ limit = x1, e = x2, v = x3, inc = x4 }, s)
    if not d then return redis.error_reply(WIDE) end
  elseif op == 't' then d = token_bucket(x1, x2, x3, x4, s)
  elseif op == 'l' then d = leaky_bucket(x1, x2, x3, x4, s)
  elseif op == 'f' then d = fixed_window(x1, x2, x4, s)
  elseif op == 'w' then d = sliding_window(x1, x2, x4, s)
  else d = sliding_log(x1, x2, x4, s) end
  d.cost = x4
  if op == 'c' or op == 'r' then d.cost = x6 end
  if d.limited then limited = true end
  decisions[i] = d
end

local out = { 0 }
if limited then out[1] = 1 end
for i = 1, n do
  local d = decisions[i]
  local op = ARGV[3 + (i - 1) * ${FIELDS}]
  if d.write and not (all and limited) then
    if op == 's' then log_write(KEYS[i], states[i], d, d.cost)
    else redis.call('SET', KEYS[i], header(types[i], d), 'PXAT', pxat(d.exp)) end
  end
  local r = reply(d, op ~= 'c' and op ~= 'g')
  -- The first µs the same call is allowed: from the decision, or when the key expires (then it is
  -- fresh, and a call that can ever be allowed is allowed on a fresh key).
  local refused = -1
  if d.limited and d.retry ~= -1 then
    local first = d.first
    if first == nil then first = (nowMs + d.retry) * 1000 end
    local s = states[i]
    if s then
      local gone = (s.exp + 1) * 1000
      if first == nil or gone < first then first = gone end
    end
    -- µs instants past 2^53 (year 2255) are not exact doubles: no exact answer then.
    if first ~= nil and first < SAFE then refused = first - nowUs - 1 end
  end
  r[#r + 1] = refused
  out[#out + 1] = r
end
return out
`;

/** The Lua source (one script for every algorithm and for RL.ALL). */
export const LIMITER_SCRIPT: string = LUA;

/** ARGV op code per RL.* key type. */
const RL_OPS: Record<number, string> = {
  [KeyType.TokenBucket]: 't',
  [KeyType.LeakyBucket]: 'l',
  [KeyType.FixedWindow]: 'f',
  [KeyType.SlidingLog]: 's',
  [KeyType.SlidingWindow]: 'w',
  [KeyType.Gcra]: 'r',
};

/** A number as Lua's tonumber reads it back to the same double (String() never loses digits). */
function num(n: number): string {
  return String(n);
}

function cellFields(op: string, p: CellParams, n: number): string[] {
  return [op, num(p.limit), num(p.intervalUs), num(p.intervalNs), num(p.toleranceUs), num(p.toleranceNs), num(n)];
}

/**
 * ARGV for LIMITER_SCRIPT; KEYS are the limits' backend keys (prefix + key bytes), in the same order.
 * nowUs: the frozen debug clock in µs when DEBUG CLOCK is in effect, else null (the script reads TIME).
 * allOrNothing: RL.ALL (nothing is written unless every limit allows).
 * Returns { error } (the reply text without '-') when the call cannot be computed exactly by the script.
 */
export function limiterScriptArgv(limits: readonly ScriptLimit[], allOrNothing: boolean, nowUs: number | null): string[] | { error: string } {
  const argv: string[] = [nowUs === null ? '' : num(nowUs), allOrNothing ? '1' : '0'];
  for (const l of limits) {
    if (l.kind === 'cl.throttle') {
      argv.push(...cellFields('c', l.params, l.quantity));
    } else if (l.kind === 'gcra') {
      const p = l.params;
      if (p.wide !== null || !(p.limit <= Number.MAX_SAFE_INTEGER)) return { error: BACKEND_WIDE_ERROR };
      argv.push('g', num(p.limit), num(p.emissionUs), num(p.varianceUs), num(p.incrementUs), '0', '0');
    } else if (l.type === KeyType.Gcra) {
      argv.push(...cellFields('r', l.gcra, l.cost));
    } else {
      argv.push(RL_OPS[l.type], num(l.limit), num(l.periodMs), num(l.burst), num(l.cost), '0', '0');
    }
  }
  return argv;
}

function toInteger(x: unknown): number {
  if (typeof x === 'number') return x;
  // remaining saturated to i64::MAX (CL.THROTTLE with an interval below 1 µs): as the local decision.
  if (typeof x === 'string' || Buffer.isBuffer(x)) {
    const s = x.toString();
    return s === '9223372036854775807' ? Number.MAX_VALUE : Number(s);
  }
  throw new TypeError(`limiter script: unexpected reply element ${String(x)}`);
}

/** Decodes the script's reply as ioredis returns it. */
export function parseLimiterReply(reply: unknown, limits: readonly ScriptLimit[]): ScriptOutcome {
  if (!Array.isArray(reply) || reply.length !== limits.length + 1) throw new TypeError('limiter script: unexpected reply shape');
  const out: LimitOutcome[] = [];
  for (let i = 0; i < limits.length; i++) {
    const row = reply[i + 1] as unknown;
    const width = limits[i].kind === 'rl' ? 6 : 5;
    if (!Array.isArray(row) || row.length !== width + 1) throw new TypeError('limiter script: unexpected reply shape');
    const values: number[] = new Array(width);
    for (let k = 0; k < width; k++) values[k] = toInteger(row[k]);
    out.push({ values, refusedForUs: toInteger(row[width]) });
  }
  return { limited: reply[0] === 1, limits: out };
}

/**
 * TYPE of one backend key (KEYS[1]; ARGV[1] the debug clock in µs or ''): the local type name,
 * 'none' when absent or expired by the stored expiry, or Redis's own TYPE for a key that is not a
 * cellgate value. A status reply, as TYPE's.
 */
export const TYPE_SCRIPT: string = String.raw`
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
local names = { 'gcra', 'tokenbucket', 'leakybucket', 'fixedwindow', 'slidinglog', 'slidingwindow' }
if len < 34 or string.byte(v, 1) ~= 198 then return redis.status_reply('string') end
local name = names[string.byte(v, 2)]
if name == nil then return redis.status_reply('string') end
local exp, a, b, c = struct.unpack('<dddd', v, 3)
local function isint(x) return x == x and x == math.floor(x) and math.abs(x) <= 9007199254740992 end
if not (isint(exp) and isint(a) and isint(b) and isint(c)) then return redis.status_reply('string') end
if name == 'slidinglog' then
  if (len - 34) % 16 ~= 0 or a < 0 or b < 1 or a + b ~= (len - 34) / 16 then return redis.status_reply('string') end
elseif len ~= 34 then
  return redis.status_reply('string')
end
if nowMs > exp then return redis.status_reply('none') end
return redis.status_reply(name)
`;
