--@decide
  if op == 'c' or op == 'r' then
    -- cellThrottle: (µs, ns) pairs, as cell-throttle.ts, the pair operations inline (ns in [0, 1000)
    -- after each: a borrow or a carry of one). limit x1, interval x2/x3, tolerance x4/x5.
    local limit, iUs, iNs, tUs, tNs, q = x1, x2, x3, x4, x5, x6
    -- RL.GCRA's FORCE is its cost negated.
    local force = q < 0
    if force then q = -q end
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
    local cost = q
    limited = cost > 0 and limited
    write = cost > 0 and write
    if force and limited then
      -- forcedTat (gcra-ms.ts): the TAT moves by T*cost from max(now, TAT), its lead capped at
      -- tolerance + 100 years; the wait is until one unit fits (TAT' + T - tolerance).
      local maxTol = 3153600000000000
      local bUs, bNs = nowUs, 0
      if tatUs > nowUs or (tatUs == nowUs and tatNs > 0) then bUs = tatUs; bNs = tatNs end
      local capUs = nowUs + tUs + maxTol
      local us, ns = capUs, 0
      if not (cost * (iUs + iNs / 1000) > maxTol + tUs + 1) then
        local mUs, mNs = mul(iUs, iNs, cost)
        us = bUs + mUs; ns = bNs + mNs
        if ns >= 1000 then ns = ns - 1000; us = us + 1 end
        if us >= capUs then us = capUs; ns = 0 end
      end
      local fReset, fRetry = 0, 0
      if not (us - nowUs < 0 or (us == nowUs and ns == 0)) then
        if ns > 0 then fReset = ceil_div(us - nowUs + 1, 1000) else fReset = ceil_div(us - nowUs, 1000) end
      end
      local wUs, wNs = us - nowUs + iUs - tUs, ns + iNs - tNs
      while wNs >= 1000 do wNs = wNs - 1000; wUs = wUs + 1 end
      while wNs < 0 do wNs = wNs + 1000; wUs = wUs - 1 end
      if not (wUs < 0 or (wUs == 0 and wNs == 0)) then
        if wNs > 0 then fRetry = ceil_div(wUs + 1, 1000) else fRetry = ceil_div(wUs, 1000) end
      end
      return true, limit, 0, fRetry, fReset, 0, true, us, ns, 0, nowMs + fReset, nil, nil
    end
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
