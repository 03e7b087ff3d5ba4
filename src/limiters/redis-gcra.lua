--@decide
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
