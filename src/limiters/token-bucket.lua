--@decide
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
    if force then
      -- Recorded as debt (saturated at 2^52 scaled units); until one unit fits again.
      local owed = needed
      if owed > 4503599627370496 then owed = 4503599627370496 end
      local exp = atMs + ceil_div(owed, limit)
      return true, burst, 0, ahead + ceil_div(owed + period - capacity, limit), exp - nowMs, 0, true, atMs, owed, 0, exp
    end
    local retry = -1
    if cost <= burst then retry = ahead + ceil_div(needed - capacity, limit) end
    return true, burst, spendable, retry, reset, 0, false
--@refund
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
