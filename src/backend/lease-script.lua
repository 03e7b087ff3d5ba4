-- Concurrency leases (RL.ACQUIRE, RL.RELEASE, RL.RENEW), decided in a batch beside the rate limits.
-- A call's element: flags (16 + 2 with a debug clock), the clock (µs), the op ('A', 'R', 'N'), limit
-- and lease_ms as doubles, then the id (the sidecar makes one for an ACQUIRE without ID); its one key
-- follows. The value: the usual 34-byte header (format, type ${LEASE_TYPE}, expiry = the latest
-- lease's end, the lease count, 0, 0), then per lease its end (ms, double), its id's length (a byte)
-- and the id. Live while now < end. Fewer Redis calls than a sorted set: an ACQUIRE on an absent
-- key is one SET NX, a RELEASE of a key's only lease one GETDEL, anything else one read and one write.
local LEASE_TYPE = ${LEASE_TYPE}
local WRONG = 'WRONGTYPE Operation against a key holding the wrong kind of value'

-- The key's leases as two arrays (ends, ids), live ones only, and the block's end for a block (RL.BLOCK);
-- nil for a value that is not a lease value (or is malformed).
local function lease_parse(v)
  local len = #v
  if len < HEADER or string.byte(v, 1) ~= MAGIC then return nil end
  local t = string.byte(v, 2)
  local _, _, exp, n = struct.unpack('<BBdd', v)
  if t == ${BLOCK_TYPE} and len == HEADER then return nil, nil, exp end
  if t ~= LEASE_TYPE or n ~= floor(n) or n < 0 or n > ${MAX_LEASE_LIMIT} then return nil end
  local ends, ids, k, at = {}, {}, 0, HEADER + 1
  for _ = 1, n do
    if at + 9 > len + 1 then return nil end
    local e, l = struct.unpack('<dB', v, at)
    if at + 9 + l > len + 1 then return nil end
    if nowMs < e then
      k = k + 1
      ends[k] = e
      ids[k] = string.sub(v, at + 9, at + 8 + l)
    end
    at = at + 9 + l
  end
  if at ~= len + 1 then return nil end
  return ends, ids
end

-- Writes the leases (or deletes the key when none is left); returns the latest end.
local function lease_store(key, ends, ids)
  local n = #ends
  if n == 0 then
    redis.call('DEL', key)
    return nowMs
  end
  local last = ends[1]
  for i = 2, n do if ends[i] > last then last = ends[i] end end
  local parts = { struct.pack('<BBdddd', MAGIC, LEASE_TYPE, last, n, 0, 0) }
  for i = 1, n do parts[i + 1] = struct.pack('<dB', ends[i], #ids[i]) .. ids[i] end
  redis.call('SET', key, table.concat(parts), 'PXAT', string.format('%.0f', last))
  return last
end

-- A value read by GETDEL that must stay: put back as it was (a cellgate value's header holds its expiry).
local function restore(key, v)
  if #v >= HEADER and string.byte(v, 1) == MAGIC then
    local exp = struct.unpack('<d', v, 3)
    if exp == exp and exp > nowMs then redis.call('SET', key, v, 'PXAT', string.format('%.0f', exp)) end
  else
    redis.call('SET', key, v)
  end
end

-- What a batch's grants on absent keys share (their calls mostly carry the same limit and lease_ms and
-- decide at the batch's one TIME): the value's header and PXAT of the last lease end, and the reply
-- of the last limit and lease_ms, each made once rather than per call. A release's replies likewise.
local fresh_at, fresh_len, fresh_head, fresh_px = nil, nil, nil, nil
local grant_limit, grant_ms, grant_reply = nil, nil, nil
local released, not_released = nil, nil

local function lease(one, key)
  local op = string.byte(one, 10)
  local limit, leaseMs = struct.unpack('<dd', one, 11)
  local id = string.sub(one, 27)
  -- Assigning nil to a key a table lacks inserts it: only a key written is forgotten.
  if written ~= nil and written[key] ~= nil then written[key] = nil end
  if op == 65 then
    local fresh = nowMs + leaseMs
    if fresh ~= fresh_at or #id ~= fresh_len then
      fresh_at, fresh_len = fresh, #id
      fresh_head = struct.pack('<BBdddddB', MAGIC, LEASE_TYPE, fresh, 1, 0, 0, fresh, #id)
      fresh_px = string.format('%.0f', fresh)
    end
    -- An absent key: one SET NX writes the lease.
    local set = redis.pcall('SET', key, fresh_head .. id, 'PXAT', fresh_px, 'NX')
    if type(set) == 'table' then
      if set.ok ~= nil then
        if limit ~= grant_limit or leaseMs ~= grant_ms or reply == as_table then
          grant_limit, grant_ms, grant_reply = limit, leaseMs, reply(0, limit, limit - 1, -1, leaseMs)
        end
        return grant_reply
      end
      return unread(elsewhere(set))
    end
    local v = redis.pcall('GET', key)
    if type(v) == 'table' then return unread(elsewhere(v)) end
    if not v then
      -- Expired between the two calls (the same instant for the script: Redis expired it lazily).
      redis.call('SET', key, struct.pack('<BBdddddB', MAGIC, LEASE_TYPE, fresh, 1, 0, 0, fresh, #id) .. id, 'PXAT', string.format('%.0f', fresh))
      return reply(0, limit, limit - 1, -1, leaseMs)
    end
    local ends, ids, block = lease_parse(v)
    if block then
      local left = block - nowMs
      if left < 1 then left = 1 end
      return reply(1, limit, 0, left, left)
    end
    if not ends then return redis.error_reply(WRONG) end
    local n, mine = #ends, nil
    for i = 1, n do if ids[i] == id then mine = i end end
    if mine == nil and n >= limit then
      local first, last = ends[1], ends[1]
      for i = 2, n do
        if ends[i] < first then first = ends[i] end
        if ends[i] > last then last = ends[i] end
      end
      return reply(1, limit, 0, first - nowMs, last - nowMs)
    end
    if mine == nil then
      n = n + 1
      ids[n] = id
      mine = n
    end
    ends[mine] = fresh
    local last = lease_store(key, ends, ids)
    local remaining = limit - n
    if remaining < 0 then remaining = 0 end
    return reply(0, limit, remaining, -1, last - nowMs)
  end
  -- RELEASE: GETDEL, then the other leases written back; RENEW: GET, then the leases with its new end.
  local v
  local release = op == 82
  if release then v = redis.pcall('GETDEL', key) else v = redis.pcall('GET', key) end
  if type(v) == 'table' then return unread(elsewhere(v)) end
  if released == nil or reply == as_table then released, not_released = reply(1), reply(0) end
  if not v then return not_released end
  -- The common RELEASE: the key's only lease, this one (the GETDEL deleted it), read without tables
  -- (the id compared in place: no copy of it out of the value).
  if release and #v == HEADER + 9 + #id and string.byte(v, 1) == MAGIC and string.byte(v, 2) == LEASE_TYPE
    and string.byte(v, HEADER + 9) == #id and string.find(v, id, HEADER + 10, true) == HEADER + 10
    and struct.unpack('<d', v, 11) == 1 then
    if nowMs < struct.unpack('<d', v, HEADER + 1) then return released end
    return not_released
  end
  local ends, ids, block = lease_parse(v)
  if not ends then
    if release then restore(key, v) end
    if block then return not_released end
    return redis.error_reply(WRONG)
  end
  local n, mine = #ends, nil
  for i = 1, n do if ids[i] == id then mine = i end end
  if release then
    if mine ~= nil then
      ends[mine] = ends[n]
      ids[mine] = ids[n]
      ends[n] = nil
      ids[n] = nil
    end
    if #ends > 0 then lease_store(key, ends, ids) end
  elseif mine ~= nil then
    ends[mine] = nowMs + leaseMs
    lease_store(key, ends, ids)
  end
  if mine == nil then return not_released end
  return released
end
