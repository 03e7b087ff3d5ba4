--@decide
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
  -- first_reaching: the first entry from `from` whose units reach the target.
  local function first_reaching(from, target)
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
    return k
  end
  local limited, retry, remaining = false, -1, spendable - cost
  local first, units, kept = expiredEntries, live, live + cost
  if cost > spendable then
    if not force then
      if cost > limit then return true, limit, spendable, -1, reset, 0, false end
      return true, limit, spendable, log_ms(first_reaching(expiredEntries, expiredUnits + live + cost - limit)) + period - nowMs, reset, 0, false
    end
    -- FORCE: logged anyway; only the newest `limit` units are kept (sliding-log.ts), and the wait is
    -- until the oldest kept entry has slid out (the new one when the cost alone fills the log).
    limited, remaining, retry, kept = true, 0, atMs + period - nowMs, limit
    if cost >= limit then
      cost = limit
      first = n
      units = 0
    else
      first = first_reaching(expiredEntries, expiredUnits + live + cost + 1 - limit)
      retry = log_ms(first) + period - nowMs
      units = sc
      if first > 0 then units = sc - (log_total(first - 1) - offset) end
    end
  end
  local exp = atMs + period
  local when = atMs
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
    local total = kept
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
  return limited, limit, remaining, retry, exp - nowMs, 0, true, nil, nil, nil, exp, nil, commit
--@refund
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
