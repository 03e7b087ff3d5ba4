--@decide
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
    -- A forced charge is counted (saturated at 2^52) and the wait is for one unit on the new state.
    local w, wc, wcur = false, cost, current
    if force then
      w = true
      wcur = current + cost
      if wcur > 4503599627370496 then wcur = 4503599627370496 end
      wc = 1
      spendable = 0
      reset = ws + 2 * period - nowMs
    elseif cost > limit then return true, limit, spendable, -1, reset, 0, false end
    local retry
    local room = limit - wcur - wc
    if room >= 0 and previous > 0 then
      local needed = period - floor_div(room * period, previous)
      if needed < period then retry = ws + needed - nowMs end
    end
    if retry == nil then
      local nextElapsed = 0
      if wcur ~= 0 then nextElapsed = math.max(0, period - floor_div((limit - wc) * period, wcur)) end
      retry = ws + period + nextElapsed - nowMs
    end
    if w then return true, limit, 0, retry, reset, 0, true, ws, wcur, previous, ws + 2 * period end
    return true, limit, spendable, retry, reset, 0, false
--@refund
      elseif op == 'w' then
        local atMs = nowMs
        if sa > nowMs then atMs = sa end
        local ws = atMs - fmod(atMs, period)
        if sa == ws and sb ~= 0 then
          if units < sb then effect = 1; na = ws; nb = sb - units; nc = sc; nexp = ws + 2 * period
          elseif sc == 0 then effect = 2
          else effect = 1; na = ws - period; nb = sc; nexp = ws + period end
        end
