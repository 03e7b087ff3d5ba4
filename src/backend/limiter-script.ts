/**
 * The limiter decisions as one Lua script run by a real Redis (docs/backend.md, "How state is
 * stored"): each limiter call of the backend mode is one EVALSHA of LIMITER_SCRIPT, atomic on the
 * Redis side, with the keys of the call in KEYS.
 *
 * The script is an operation-by-operation transcription of src/limiters/ (CL.THROTTLE, Redis's GCRA
 * and the six RL.* algorithms; helpers inlined where a call per use cost Redis CPU) and of the lookup / WRONGTYPE / decide / commit steps of
 * src/commands/throttle.ts and src/commands/ratelimit.ts. Redis's Lua 5.1 computes with doubles, as
 * the TypeScript does, so the same operations give the same numbers; where the two languages differ
 * the script says so (`%` is floored in Lua: math.fmod is used, as JS's `%` truncates; numbers come
 * in as doubles and go out to Redis with '%.0f', never tostring's 14 digits). The differential property test
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
  | { kind: 'rl'; type: KeyType; limit: number; periodMs: number; burst: number; gcra: CellParams; cost: number; /** REFUND n (≥ 1) instead of a cost; absent or 0: a decision. */ refund?: number };

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

/**
 * The most entries one sliding log may hold on the backend (its value at most 1 MiB of entries): an
 * RL.SLIDINGLOG limit above it is refused before anything is sent (a log never holds more entries
 * than its limit), and a stored log claiming more is not cellgate's (WRONGTYPE), so no call ever
 * copies more than this many entries inside Redis.
 */
export const MAX_BACKEND_SLIDING_LOG_LIMIT = 65_536;

/** The error for an RL.SLIDINGLOG limit above MAX_BACKEND_SLIDING_LOG_LIMIT. */
export const BACKEND_LOG_LIMIT_ERROR = `ERR RL.SLIDINGLOG limit above ${MAX_BACKEND_SLIDING_LOG_LIMIT} is not supported with a backend`;

/**
 * The value layout (docs/backend.md): byte 1 the format tag, byte 2 the KeyType, then little-endian
 * doubles: absolute expiry (ms), A, B, C; a sliding log appends its entries as (ms, running total).
 *
 * ARGV (limiterScriptArgv) is one binary string: a flags byte (1: all-or-nothing, 2: the debug clock
 * is given), the debug clock in µs as a little-endian double, then per limit 49 bytes: the op code
 * and six little-endian doubles. An RL.* op code in uppercase (single-limit calls only) is a
 * `REFUND n`, n in the cost's place. One element, as each costs the sidecar's client CPU to send, and
 * binary, as one struct.unpack is cheaper in Redis than parsing and tonumber of decimal strings.
 *
 * The reply is flat: the call's limited flag, then per limit its reply integers (6 or 7 for rl) and
 * refusedForUs.
 *
 * Cost: the body runs on every EVALSHA, so every function defined in it is a new closure per call
 * and every table an allocation. Only the code of the op being run executes: the decision of each
 * op is inline in one if/elseif chain, a helper is defined inside the branch that needs it, a
 * decision is locals (returned as multiple values), and the common single-limit call writes and
 * replies without any table but the reply's.
 */
const LUA = String.raw`
local MAGIC = 198
local HEADER = 34
local SAFE = 9007199254740992
local MAX_LOG = ${MAX_BACKEND_SLIDING_LOG_LIMIT}
local fmod, floor, ceil = math.fmod, math.floor, math.ceil

local args = ARGV[1]
local flags, nowUs = struct.unpack('<Bd', args)
local all = flags % 2 == 1
if flags < 2 then
  local t = redis.call('TIME')
  nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nowMs = floor(nowUs / 1000)

-- The key's state: 0 when absent or expired at nowMs, -1 when it is not a cellgate value (or not of
-- type want), else 1 and exp, A, B, C, the value (nil for a long sliding log: only its start is
-- read) and the value's length. A sliding log of more than 8 entries is read by its header, then
-- entry by entry as the binary searches need them: a call reads O(log n) of it, never the whole log.
local function load(key, log, want)
  local v, len, hdr
  if not log then
    -- One byte past the 34 a value of this kind has: a longer value (a sliding log, a foreign
    -- string of any size) is told apart without copying it into Lua; another Redis type errors.
    v = redis.pcall('GETRANGE', key, 0, HEADER)
    if type(v) == 'table' then return -1 end
    if v == '' then
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
    if type(v) == 'table' then return -1 end
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
  if magic ~= MAGIC or t < 1 or t > 6 then return -1 end
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
  if t ~= want then return -1 end
  return 1, exp, a, b, c, v, len
end

-- One limit's decision (a transcription of src/limiters/), as locals: limited, limit, remaining,
-- retry, reset, delay, write, then the stored A, B, C and expiry (ms) when it writes, first (the
-- first µs at which the same call is allowed when the decision knows it better than now + retry),
-- and commit (a function doing the write, for the sliding log; nil: SET of the header). nil when
-- the call needs redis-gcra.ts's BigInt path.
local function decide(op, x1, x2, x3, x4, x5, x6, key, has, sa, sb, sc, sv, slen)
  if op == 'c' or op == 'r' then
    -- cellThrottle: (µs, ns) pairs, as cell-throttle.ts, the pair operations inline (ns in [0, 1000)
    -- after each: a borrow or a carry of one). limit x1, interval x2/x3, tolerance x4/x5.
    local limit, iUs, iNs, tUs, tNs, q = x1, x2, x3, x4, x5, x6
    local tatUs, tatNs = nowUs, 0
    if has then tatUs = sa; tatNs = sb end
    local limited, retry, write, first = false, -1, false, nil
    local newUs, newNs
    local ttlUs, ttlNs
    if q > limit then
      limited = true
      ttlUs, ttlNs = tatUs - nowUs, tatNs
      if ttlNs < 0 then ttlUs = ttlUs - 1; ttlNs = ttlNs + 1000 end
    else
      -- mul(interval, q)
      local thousands = floor(q / 1000)
      local unitsNs = iNs * (q - thousands * 1000)
      local incUs, incNs = iUs * q + iNs * thousands + floor(unitsNs / 1000), fmod(unitsNs, 1000)
      if tatUs > nowUs or (tatUs == nowUs and tatNs > 0) then newUs = tatUs + incUs; newNs = tatNs + incNs
      else newUs = nowUs + incUs; newNs = incNs end
      if newNs >= 1000 then newUs = newUs + 1; newNs = newNs - 1000 end
      -- allow = new - tolerance; diff = now - allow
      local allowUs, allowNs = newUs - tUs, newNs - tNs
      if allowNs < 0 then allowUs = allowUs - 1; allowNs = allowNs + 1000 end
      local diffUs, diffNs = nowUs - allowUs, -allowNs
      if diffNs < 0 then diffUs = diffUs - 1; diffNs = diffNs + 1000 end
      if diffUs < 0 then
        limited = true
        if incUs < tUs or (incUs == tUs and incNs <= tNs) then
          if op == 'c' then
            -- cell_seconds(0 - diff)
            local waitUs, waitNs = -diffUs, -diffNs
            if waitNs < 0 then waitUs = waitUs - 1; waitNs = waitNs + 1000 end
            if waitUs < 0 and waitNs > 0 then waitUs = waitUs + 1 end
            local w = waitUs / 1e6
            if w < 0 then retry = ceil(w) else retry = floor(w) end
            local m = waitUs / 1000
            if m < 0 then m = ceil(m) else m = floor(m) end
            if fmod(m, 1000) > 0 then retry = retry + 1 end
          end
          -- Allowed once now >= allow (the TAT is ahead, so allow does not move): its ceiling in µs.
          first = allowUs
          if allowNs > 0 then first = allowUs + 1 end
        end
        ttlUs, ttlNs = tatUs - nowUs, tatNs
      else
        write = true
        ttlUs, ttlNs = newUs - nowUs, newNs
      end
      if ttlNs < 0 then ttlUs = ttlUs - 1; ttlNs = ttlNs + 1000 end
    end
    if op == 'c' then
      local whole = ttlUs
      if whole < 0 and ttlNs > 0 then whole = whole + 1 end
      local exp
      if write then
        local m = whole / 1000
        if m < 0 then m = ceil(m) else m = floor(m) end
        exp = nowMs + m
      end
      local remaining = 0
      local nextUs, nextNs = tUs - ttlUs, tNs - ttlNs
      if nextNs < 0 then nextUs = nextUs - 1; nextNs = nextNs + 1000 end
      local probeUs, probeNs = nextUs + iUs, nextNs + iNs
      if probeNs >= 1000 then probeUs = probeUs + 1; probeNs = probeNs - 1000 end
      if probeUs > 0 or (probeUs == 0 and probeNs > 0) then
        local nextWhole = nextUs
        if nextUs < 0 and nextNs > 0 then nextWhole = nextUs + 1 end
        if iUs == 0 then
          if nextWhole > 0 then remaining = 'max' end
        else
          remaining = nextWhole / iUs
          if remaining < 0 then remaining = ceil(remaining) else remaining = floor(remaining) end
          if remaining < 0 then remaining = 0 end
        end
      end
      -- cell_seconds(ttl)
      local reset = whole / 1e6
      if reset < 0 then reset = ceil(reset) else reset = floor(reset) end
      local m = whole / 1000
      if m < 0 then m = ceil(m) else m = floor(m) end
      if fmod(m, 1000) > 0 then reset = reset + 1 end
      return limited, limit, remaining, retry, reset, nil, write, newUs, newNs, 0, exp, first, nil
    end
    -- gcraMsDecide: millisecond fields over the same decision; COST 0 never writes.
    local function mul(us, ns, n)
      local thousands = floor(n / 1000)
      local unitsNs = ns * (n - thousands * 1000)
      return us * n + ns * thousands + floor(unitsNs / 1000), fmod(unitsNs, 1000)
    end
    local function ceil_div(a, b)
      local q = ceil(a / b)
      if q * b < a then q = q + 1 elseif q > 0 and (q - 1) * b >= a then q = q - 1 end
      return q
    end
    local cost = q
    limited = cost > 0 and limited
    write = cost > 0 and write
    retry = -1
    local rfirst = nil
    if limited and cost <= limit then
      local bUs, bNs = nowUs, 0
      if tatUs > nowUs or (tatUs == nowUs and tatNs > 0) then bUs = tatUs; bNs = tatNs end
      local mUs, mNs = mul(iUs, iNs, cost)
      local us = bUs - nowUs + mUs - tUs
      local ns = bNs + mNs - tNs
      while ns >= 1000 do ns = ns - 1000; us = us + 1 end
      while ns < 0 do ns = ns + 1000; us = us - 1 end
      if us < 0 or (us == 0 and ns == 0) then retry = 0 else
        if ns > 0 then retry = ceil_div(us + 1, 1000) else retry = ceil_div(us, 1000) end
      end
      rfirst = first
    end
    local aUs, aNs = tatUs, tatNs
    if write then aUs = newUs; aNs = newNs end
    local rUs, rNs = aUs - nowUs, aNs
    local reset
    if rUs < 0 or (rUs == 0 and rNs == 0) then reset = 0 else
      if rNs > 0 then reset = ceil_div(rUs + 1, 1000) else reset = ceil_div(rUs, 1000) end
    end
    -- spendable(p, ttl): whole units spendable when the TAT is ttl ahead.
    local sUs, sNs = rUs, rNs
    if sUs < 0 then sUs = 0; sNs = 0 end
    local xUs, xNs = tUs - sUs, tNs - sNs
    if xNs < 0 then xNs = xNs + 1000; xUs = xUs - 1 end
    local n = 0
    if xUs >= 0 then
      n = math.min(limit, math.max(0, floor((xUs * 1000 + xNs) / (iUs * 1000 + iNs))))
      local mu, mn = mul(iUs, iNs, n)
      while n > 0 and not (mu < xUs or (mu == xUs and mn <= xNs)) do
        n = n - 1
        mu, mn = mul(iUs, iNs, n)
      end
      while n < limit do
        mu, mn = mul(iUs, iNs, n + 1)
        if not (mu < xUs or (mu == xUs and mn <= xNs)) then break end
        n = n + 1
      end
    end
    if write then return limited, limit, n, retry, reset, 0, true, newUs, newNs, 0, nowMs + reset, rfirst, nil end
    return limited, limit, n, retry, reset, 0, false, nil, nil, nil, nil, rfirst, nil
  elseif op == 'g' then
    -- Redis's GCRA (redis-gcra.ts, the double path). limit x1, emission x2, variance x3, increment x4.
    local limit, e, v, inc = x1, x2, x3, x4
    local now = nowMs * 1000
    local tat = now
    if has then
      if sc ~= 0 then return nil end
      tat = sa
    end
    local base = tat
    if now > tat then base = now end
    local newTat = base + inc
    -- Beyond 2^53 the doubles would round where redis-gcra.ts switches to BigInt.
    if newTat > 9007199254740991 or tat < -9007199254740991 then return nil end
    local diff = now - (newTat - v)
    local limited, retry, write, first, ttl = false, -1, false, nil, nil
    if diff < 0 then
      limited = true
      if inc <= v then
        retry = ceil(-diff / 1000000) + 0
        -- Allowed once the ms-truncated now reaches newTat - v (tat is ahead, so it does not move).
        first = ceil((newTat - v) / 1000) * 1000
      end
      ttl = tat - now
    else
      write = true
      ttl = newTat - now
    end
    local nx = v - ttl
    local remaining = 0
    if nx > -e then
      remaining = nx / e
      if remaining < 0 then remaining = ceil(remaining) else remaining = floor(remaining) end
    end
    local reset = ceil(ttl / 1000000) + 0
    if write then return false, limit, remaining, -1, reset, nil, true, newTat, 0, 0, floor(newTat / 1000), nil, nil end
    return limited, limit, remaining, retry, reset, nil, false, nil, nil, nil, nil, first, nil
  end
  -- The RL.* rate limiters (rate-decision.ts): limit x1, period x2 (ms), burst x3, cost x4.
  local limit, period, burst, cost = x1, x2, x3, x4
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
  if op == 't' or op == 'l' then
    local capacity = burst * period
    local atMs = nowMs
    if has and sa > nowMs then atMs = sa end
    local ahead = atMs - nowMs
    local deficit = 0
    -- drainedDeficit
    if has and sb ~= 0 then
      local elapsed = 0
      if atMs > sa then elapsed = atMs - sa end
      if elapsed < ceil_div(sb, limit) then deficit = sb - elapsed * limit end
    end
    local reset = 0
    if deficit > 0 then reset = ahead + ceil_div(deficit, limit) end
    local spendable = 0
    if cost == 0 or cost > burst or deficit + cost * period > capacity then
      if deficit < capacity then spendable = floor_div(capacity - deficit, period) end
    end
    if cost == 0 then return false, burst, spendable, -1, reset, 0, false end
    local needed = deficit + cost * period
    if cost <= burst and needed <= capacity then
      local exp = atMs + ceil_div(needed, limit)
      local delay = 0
      if op == 'l' and has then delay = ahead + ceil_div(deficit, limit) end
      return false, burst, floor_div(capacity - needed, period), -1, exp - nowMs, delay, true, atMs, needed, 0, exp
    end
    local retry = -1
    if cost <= burst then retry = ahead + ceil_div(needed - capacity, limit) end
    return true, burst, spendable, retry, reset, 0, false
  elseif op == 'f' then
    local ws = nowMs - fmod(nowMs, period)
    if has and sa > ws then ws = sa end
    local count = 0
    if has and sa == ws then count = sb end
    local wend = ws + period
    local untilEnd = wend - nowMs
    local spendable = 0
    if count < limit then spendable = limit - count end
    local reset = 0
    if count > 0 then reset = untilEnd end
    if cost == 0 then return false, limit, spendable, -1, reset, 0, false end
    if count + cost <= limit then
      return false, limit, limit - count - cost, -1, untilEnd, 0, true, ws, count + cost, 0, wend
    end
    if cost <= limit then
      -- The count is B until a window of this period starts after A: at untilEnd when A is one of
      -- this period's window starts, earlier when it was written with another period.
      return true, limit, spendable, untilEnd, reset, 0, false, nil, nil, nil, nil, (sa - fmod(sa, period) + period) * 1000
    end
    return true, limit, spendable, -1, reset, 0, false
  elseif op == 'w' then
    local atMs = nowMs
    if has and sa > nowMs then atMs = sa end
    local ws = atMs - fmod(atMs, period)
    local current, previous = 0, 0
    if has then
      if sa == ws then current = sb; previous = sc
      elseif sa + period == ws then previous = sb end
    end
    local elapsed = atMs - ws
    local budget = limit * period - previous * (period - elapsed)
    local q
    if budget > 0 then q = floor_div(budget, period) else q = -ceil_div(-budget, period) end
    local spendable = q - current
    if spendable < 0 then spendable = 0 end
    local reset = 0
    if current > 0 then reset = ws + 2 * period - nowMs elseif previous > 0 then reset = ws + period - nowMs end
    if cost == 0 then return false, limit, spendable, -1, reset, 0, false end
    if cost <= spendable then
      return false, limit, spendable - cost, -1, ws + 2 * period - nowMs, 0, true, ws, current + cost, previous, ws + 2 * period
    end
    if cost > limit then return true, limit, spendable, -1, reset, 0, false end
    local room = limit - current - cost
    if room >= 0 and previous > 0 then
      local needed = period - floor_div(room * period, previous)
      if needed < period then return true, limit, spendable, ws + needed - nowMs, reset, 0, false end
    end
    local nextElapsed = 0
    if current ~= 0 then nextElapsed = math.max(0, period - floor_div((limit - cost) * period, current)) end
    return true, limit, spendable, ws + period + nextElapsed - nowMs, reset, 0, false
  end
  -- The sliding log: after the header, entries of 16 bytes (ms, running total), oldest first; the
  -- first A of them slid out (dropped lazily, see commit), the B after them are the log. Entry k
  -- below is the k-th of those B; the units in entries 0..k are total(k) - offset, with
  -- offset = total(B-1) - C.
  local cache
  local function entry_pos(k) return HEADER + 1 + 16 * (sa + k) end
  -- Entry k as (ms, running total); a long log's entries are read once each, as needed.
  local function entry(k)
    if sv then return struct.unpack('<dd', sv, HEADER + 1 + 16 * (sa + k)) end
    if not cache then cache = {} end
    local e = cache[k]
    if not e then
      local p = HEADER + 16 * (sa + k)
      e = redis.call('GETRANGE', key, p, p + 15)
      cache[k] = e
    end
    return struct.unpack('<dd', e)
  end
  local function log_ms(k) local ms = entry(k); return ms end
  local function log_total(k) local _, total = entry(k); return total end
  local n, offset = 0, 0
  if has then n = sb; offset = log_total(sb - 1) - sc end
  local expiredEntries, expiredUnits = 0, 0
  local atMs = nowMs
  local newest = nil
  if n > 0 then
    newest = log_ms(n - 1)
    if newest > atMs then atMs = newest end
    -- count_expired: the entries at or before atMs - period.
    local cutoff = atMs - period
    if log_ms(0) <= cutoff then
      local lo, step, hi = 1, 1, 1
      while hi < n and log_ms(hi) <= cutoff do
        lo = hi + 1
        step = step * 2
        hi = math.min(n, lo + step - 1)
      end
      while lo < hi do
        local mid = floor((lo + hi) / 2)
        if log_ms(mid) <= cutoff then lo = mid + 1 else hi = mid end
      end
      expiredEntries = lo
    end
    if expiredEntries > 0 then expiredUnits = log_total(expiredEntries - 1) - offset end
  end
  local live = 0
  if n > 0 then live = sc - expiredUnits end
  local spendable = math.max(0, limit - live)
  local reset = 0
  if live > 0 then reset = newest + period - nowMs end
  if cost == 0 then return false, limit, spendable, -1, reset, 0, false end
  if cost > spendable then
    if cost > limit then return true, limit, spendable, -1, reset, 0, false end
    -- first_reaching: the first entry from expiredEntries whose units reach the target.
    local target = expiredUnits + live + cost - limit
    local from = expiredEntries
    local k = from
    if log_total(from) - offset < target then
      local lo, step = from + 1, 1
      local hi = math.min(n - 1, lo)
      while hi < n - 1 and log_total(hi) - offset < target do
        lo = hi + 1
        step = step * 2
        hi = math.min(n - 1, lo + step - 1)
      end
      while lo < hi do
        local mid = floor((lo + hi) / 2)
        if log_total(mid) - offset >= target then hi = mid else lo = mid + 1 end
      end
      k = lo
    end
    return true, limit, spendable, log_ms(k) + period - nowMs, reset, 0, false
  end
  local exp = atMs + period
  local when, first, units = atMs, expiredEntries, live
  -- Stores the log after the allowed call (slidingLogRecord): drops what slid out, merges or
  -- appends the call's entry. In place (APPEND / SETRANGE of a few bytes) while the dropped prefix
  -- is shorter than the log; else the log is rewritten without it, which each entry pays for once
  -- when it slides out: O(1) amortized, as the local ring.
  local function commit()
    local nlive = n - first
    local merge = nlive > 0 and log_ms(n - 1) == when
    local after = nlive + 1
    if merge then after = nlive end
    local newestTotal = 0
    if nlive > 0 then newestTotal = log_total(n - 1) end
    -- Keep the totals exact integers: past 2^52 count them from the oldest live entry again.
    local restart = newestTotal + cost > 4503599627370496
    local total = units + cost
    if has and not sv and nlive > 0 and not restart and sa + first < after then
      if merge then
        redis.call('SETRANGE', key, HEADER + 16 * (sa + n - 1) + 8, struct.pack('<d', newestTotal + cost))
      else
        redis.call('APPEND', key, struct.pack('<dd', when, newestTotal + cost))
      end
      redis.call('SETRANGE', key, 0, struct.pack('<BBdddd', MAGIC, 5, exp, sa + first, after, total))
      redis.call('PEXPIREAT', key, string.format('%.0f', exp))
      return
    end
    local body = ''
    if nlive > 0 then
      local from = entry_pos(first)
      if sv then body = string.sub(sv, from, from + 16 * nlive - 1)
      else body = redis.call('GETRANGE', key, from - 1, from + 16 * nlive - 2) end
      if restart then
        local base = newestTotal - units
        local parts = {}
        for k = 0, nlive - 1 do
          local ms, t = struct.unpack('<dd', body, 1 + 16 * k)
          parts[k + 1] = struct.pack('<dd', ms, t - base)
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
    redis.call('SET', key, struct.pack('<BBdddd', MAGIC, 5, exp, 0, after, total) .. body, 'PXAT', string.format('%.0f', exp))
  end
  return false, limit, spendable - cost, -1, exp - nowMs, 0, true, nil, nil, nil, exp, nil, commit
end

-- The KeyType each op reads and writes (the gcra family shares it).
local function type_of(op)
  if op == 't' then return 2 elseif op == 'l' then return 3 elseif op == 'f' then return 4
  elseif op == 's' then return 5 elseif op == 'w' then return 6 end
  return 1
end

-- The first µs the same call is allowed is decision's first, else now + retry, or when the key
-- expires if sooner (then it is fresh, and a call that can ever be allowed is allowed on a fresh
-- key); refusedForUs is the µs before it. µs instants past 2^53 (year 2255) are not exact doubles:
-- no exact answer then.
local n = #KEYS
if n == 1 then
  -- The single-limit call: no table but the reply.
  local op, x1, x2, x3, x4, x5, x6 = struct.unpack('<c1dddddd', args, 10)
  local key = KEYS[1]
  -- An uppercase op is REFUND of the units in the cost field.
  local refund = string.byte(op) < 97
  if refund then op = string.lower(op) end
  local t = type_of(op)
  local st, sexp, sa, sb, sc, sv, slen = load(key, op == 's', t)
  if st < 0 then return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value') end
  local has = st == 1
  if refund then
    -- The refunds of rate-decision.ts's modules (tokenBucketRefund, ...): effect 0 nothing, 1 store
    -- na/nb/nc expiring at nexp, 2 delete (as full as a fresh key). Then the reply is a COST 0 peek
    -- on the new state, as locally.
    if has then
      local limit, period, units = x1, x2, x4
      if op == 'r' then units = x6 end
      local function ceil_div(a, b)
        local q = ceil(a / b)
        if q * b < a then q = q + 1 elseif q > 0 and (q - 1) * b >= a then q = q - 1 end
        return q
      end
      local effect, na, nb, nc, nexp = 0, 0, 0, 0, 0
      if op == 't' or op == 'l' then
        local atMs = nowMs
        if sa > nowMs then atMs = sa end
        local deficit = 0
        if sb ~= 0 then
          local elapsed = 0
          if atMs > sa then elapsed = atMs - sa end
          if elapsed < ceil_div(sb, limit) then deficit = sb - elapsed * limit end
        end
        if units >= ceil_div(deficit, period) then effect = 2
        else
          effect = 1; na = atMs; nb = deficit - units * period; nexp = atMs + ceil_div(nb, limit)
        end
      elseif op == 'f' then
        local ws = nowMs - fmod(nowMs, period)
        if sa > ws then ws = sa end
        if sa == ws and sb ~= 0 then
          if units >= sb then effect = 2 else effect = 1; na = ws; nb = sb - units; nexp = ws + period end
        end
      elseif op == 'w' then
        local atMs = nowMs
        if sa > nowMs then atMs = sa end
        local ws = atMs - fmod(atMs, period)
        if sa == ws and sb ~= 0 then
          if units < sb then effect = 1; na = ws; nb = sb - units; nc = sc; nexp = ws + 2 * period
          elseif sc == 0 then effect = 2
          else effect = 1; na = ws - period; nb = sc; nexp = ws + period end
        end
      elseif op == 'r' then
        local iUs, iNs = x2, x3
        local aheadUs = sa - nowUs
        if aheadUs > 0 or (aheadUs == 0 and sb > 0) then
          if units * (iUs + iNs / 1000) > aheadUs + 1 + iUs + 1 then effect = 2
          else
            local thousands = floor(units / 1000)
            local unitsNs = iNs * (units - thousands * 1000)
            local us = sa - (iUs * units + iNs * thousands + floor(unitsNs / 1000))
            local ns = sb - fmod(unitsNs, 1000)
            if ns < 0 then ns = ns + 1000; us = us - 1 end
            if us < nowUs or (us == nowUs and ns == 0) then effect = 2
            else
              effect = 1; na = us; nb = ns
              local r = us - nowUs
              if ns > 0 then r = r + 1 end
              nexp = nowMs + ceil_div(r, 1000)
            end
          end
        end
      else
        -- The sliding log (header A entries slid out, then B entries (ms, running total)): the newest
        -- units are dropped, the log rewritten from its first live entry. Read whole (at most
        -- MAX_LOG entries): a refund is O(limit) here.
        local v = sv
        if not v then v = redis.call('GET', key) end
        local function ent(k) return struct.unpack('<dd', v, HEADER + 1 + 16 * (sa + k)) end
        local _, newestTotal = ent(sb - 1)
        local offset = newestTotal - sc
        local atMs = nowMs
        local newestMs = ent(sb - 1)
        if newestMs > atMs then atMs = newestMs end
        local lo, hi = 0, sb
        while lo < hi do
          local mid = floor((lo + hi) / 2)
          if ent(mid) <= atMs - period then lo = mid + 1 else hi = mid end
        end
        local first = lo
        local expiredUnits = 0
        if first > 0 then local _, total = ent(first - 1); expiredUnits = total - offset end
        local live = sc - expiredUnits
        if live > 0 and units >= live then effect = 2
        elseif live > 0 then
          local target = expiredUnits + live - units
          lo, hi = first, sb - 1
          while lo < hi do
            local mid = floor((lo + hi) / 2)
            local _, total = ent(mid)
            if total - offset >= target then hi = mid else lo = mid + 1 end
          end
          local kMs = ent(lo)
          nexp = kMs + period
          local body = string.sub(v, HEADER + 1 + 16 * (sa + first), HEADER + 16 * (sa + lo)) .. struct.pack('<dd', kMs, target + offset)
          redis.call('SET', key, struct.pack('<BBdddd', MAGIC, 5, nexp, 0, lo - first + 1, live - units) .. body, 'PXAT', string.format('%.0f', nexp))
          effect = 1
        end
      end
      if effect == 2 then redis.call('DEL', key)
      elseif effect == 1 and op ~= 's' then
        redis.call('SET', key, struct.pack('<BBdddd', MAGIC, t, nexp, na, nb, nc), 'PXAT', string.format('%.0f', nexp))
      end
      if effect ~= 0 then
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
    if commit then commit()
    else redis.call('SET', key, struct.pack('<BBdddd', MAGIC, t, exp, a, b, c), 'PXAT', string.format('%.0f', exp)) end
  end
  if remaining == 'max' then remaining = '9223372036854775807' end
  if not limited then
    if delay then return { 0, 0, limit, remaining, retry, reset, delay, -1 } end
    return { 0, 0, limit, remaining, retry, reset, -1 }
  end
  local refused = -1
  if retry ~= -1 then
    if first == nil then first = (nowMs + retry) * 1000 end
    if has and (sexp + 1) * 1000 < first then first = (sexp + 1) * 1000 end
    if first < SAFE then refused = first - nowUs - 1 end
  end
  if delay then return { 1, 1, limit, remaining, retry, reset, delay, refused } end
  return { 1, 1, limit, remaining, retry, reset, refused }
end

-- Several limits (RL.ALL): every key is looked up, then every limit decided, then written. A
-- state and a decision are each one table made by a constructor around the call (sized once,
-- where assigning the values one by one would grow and rehash it several times).
local st, ds = {}, {}
for i = 1, n do
  local op = string.sub(args, 10 + 49 * (i - 1), 10 + 49 * (i - 1))
  local s = { load(KEYS[i], op == 's', type_of(op)) }
  if s[1] < 0 then return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value') end
  st[i] = s
end
local limited = false
for i = 1, n do
  local s = st[i]
  local op, x1, x2, x3, x4, x5, x6 = struct.unpack('<c1dddddd', args, 10 + 49 * (i - 1))
  local d = { decide(op, x1, x2, x3, x4, x5, x6, KEYS[i], s[1] == 1, s[3], s[4], s[5], s[6], s[7]) }
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
    if d[13] then d[13]()
    else
      local op = string.sub(args, 10 + 49 * (i - 1), 10 + 49 * (i - 1))
      redis.call('SET', KEYS[i], struct.pack('<BBdddd', MAGIC, type_of(op), d[11], d[8], d[9], d[10]), 'PXAT', string.format('%.0f', d[11]))
    end
  end
  local remaining, retry = d[3], d[4]
  if remaining == 'max' then remaining = '9223372036854775807' end
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

/** Bytes per limit in the script's ARGV: the op code and six doubles. */
const LIMIT_BYTES = 49;

function put(out: Buffer, at: number, op: string, x1: number, x2: number, x3: number, x4: number, x5: number, x6: number): void {
  out[at] = op.charCodeAt(0);
  out.writeDoubleLE(x1, at + 1);
  out.writeDoubleLE(x2, at + 9);
  out.writeDoubleLE(x3, at + 17);
  out.writeDoubleLE(x4, at + 25);
  out.writeDoubleLE(x5, at + 33);
  out.writeDoubleLE(x6, at + 41);
}

/**
 * ARGV for LIMITER_SCRIPT (one binary element, laid out as the script's header says); KEYS are the
 * limits' backend keys (prefix + key bytes), in the same order.
 * nowUs: the frozen debug clock in µs when DEBUG CLOCK is in effect, else null (the script reads TIME).
 * allOrNothing: RL.ALL (nothing is written unless every limit allows).
 * Returns { error } (the reply text without '-') when the call cannot be computed exactly by the script.
 */
export function limiterScriptArgv(limits: readonly ScriptLimit[], allOrNothing: boolean, nowUs: number | null): Buffer[] | { error: string } {
  const out = Buffer.allocUnsafe(9 + LIMIT_BYTES * limits.length);
  out[0] = (allOrNothing ? 1 : 0) | (nowUs === null ? 0 : 2);
  out.writeDoubleLE(nowUs ?? 0, 1);
  let at = 9;
  for (const l of limits) {
    if (l.kind === 'cl.throttle') {
      const p = l.params;
      put(out, at, 'c', p.limit, p.intervalUs, p.intervalNs, p.toleranceUs, p.toleranceNs, l.quantity);
    } else if (l.kind === 'gcra') {
      const p = l.params;
      if (p.wide !== null || !(p.limit <= Number.MAX_SAFE_INTEGER)) return { error: BACKEND_WIDE_ERROR };
      put(out, at, 'g', p.limit, p.emissionUs, p.varianceUs, p.incrementUs, 0, 0);
    } else if (l.type === KeyType.Gcra) {
      const p = l.gcra;
      const refund = l.refund ?? 0;
      put(out, at, refund > 0 ? 'R' : 'r', p.limit, p.intervalUs, p.intervalNs, p.toleranceUs, p.toleranceNs, refund > 0 ? refund : l.cost);
    } else {
      if (l.type === KeyType.SlidingLog && l.limit > MAX_BACKEND_SLIDING_LOG_LIMIT) return { error: BACKEND_LOG_LIMIT_ERROR };
      const refund = l.refund ?? 0;
      // A refund (single-limit calls only) is the op in uppercase, with the units where the cost goes.
      const op = RL_OPS[l.type];
      put(out, at, refund > 0 ? op.toUpperCase() : op, l.limit, l.periodMs, l.burst, refund > 0 ? refund : l.cost, 0, 0);
    }
    at += LIMIT_BYTES;
  }
  return [out];
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

/**
 * Decodes the script's reply as ioredis returns it: flat, the call's limited flag, then per limit
 * its reply integers (5, or 6 for rl) and refusedForUs.
 */
export function parseLimiterReply(reply: unknown, limits: readonly ScriptLimit[]): ScriptOutcome {
  if (!Array.isArray(reply)) throw new TypeError('limiter script: unexpected reply shape');
  const out: LimitOutcome[] = [];
  let at = 1;
  for (let i = 0; i < limits.length; i++) {
    const width = limits[i].kind === 'rl' ? 6 : 5;
    if (reply.length < at + width + 1) throw new TypeError('limiter script: unexpected reply shape');
    const values: number[] = new Array(width);
    for (let k = 0; k < width; k++) values[k] = toInteger(reply[at + k]);
    out.push({ values, refusedForUs: toInteger(reply[at + width]) });
    at += width + 1;
  }
  if (reply.length !== at) throw new TypeError('limiter script: unexpected reply shape');
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
  if (len - 34) % 16 ~= 0 or a < 0 or b < 1 or b > ${MAX_BACKEND_SLIDING_LOG_LIMIT} or a + b ~= (len - 34) / 16 then return redis.status_reply('string') end
elseif len ~= 34 then
  return redis.status_reply('string')
end
if nowMs > exp then return redis.status_reply('none') end
return redis.status_reply(name)
`;
