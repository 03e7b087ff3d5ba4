--@decide
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
    if force then
      -- Counted past the limit (saturated at 2^52) until the window ends.
      local count2 = count + cost
      if count2 > 4503599627370496 then count2 = 4503599627370496 end
      return true, limit, 0, untilEnd, untilEnd, 0, true, ws, count2, 0, wend
    end
    if cost <= limit then
      -- The count is B until a window of this period starts after A: at untilEnd when A is one of
      -- this period's window starts, earlier when it was written with another period.
      return true, limit, spendable, untilEnd, reset, 0, false, nil, nil, nil, nil, (sa - fmod(sa, period) + period) * 1000
    end
    return true, limit, spendable, -1, reset, 0, false
--@refund
      elseif op == 'f' then
        local ws = nowMs - fmod(nowMs, period)
        if sa > ws then ws = sa end
        if sa == ws and sb ~= 0 then
          if units >= sb then effect = 2 else effect = 1; na = ws; nb = sb - units; nexp = ws + period end
        end
