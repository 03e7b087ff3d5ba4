-- cellgate.lua: nginx's `limit_req`, decided by cellgate, so every nginx in front of an application
-- shares one set of limits. Loaded by nginx.conf (access_by_lua_block / header_filter_by_lua_block);
-- README.md in this folder explains it.
--
-- Per request: one CL.THROTTLE over a keepalive pool of cosockets (one connection per worker in
-- practice, reused across requests), with a short timeout. Settings are nginx variables, set in
-- nginx.conf with `set`:
--   $cellgate_host, $cellgate_port        where cellgate listens
--   $cellgate_password                    AUTH on each new pooled connection ("" = none)
--   $cellgate_timeout_ms                  connect/send/read timeout (default 50)
--   $cellgate_key                         the client key (e.g. $binary_remote_addr)
--   $cellgate_max_burst, $cellgate_count, $cellgate_period, $cellgate_quantity
--                                         CL.THROTTLE's arguments: a burst of max_burst + 1, then
--                                         count per period seconds; quantity per request (default 1)
--   $cellgate_policy                      the policy name in the RateLimit fields ("default")
--   $cellgate_unavailable                 "allow" (fail open, the default) or "deny" (503) when
--                                         cellgate cannot be asked
--
-- Debian ships lua-resty-redis as `nginx.redis` (package lua-nginx-redis); elsewhere it is
-- `resty.redis`.
local ok_redis, redis = pcall(require, "nginx.redis")
if not ok_redis then redis = require "resty.redis" end

local _M = {}

local POOL_IDLE_MS = 60000
local POOL_SIZE = 32

local function num(value, default)
  local n = tonumber(value)
  if n == nil then return default end
  return n
end

-- A problem+json body (RFC 9457). Every value in it is a number or a fixed string, so the string
-- needs no JSON encoder.
local function problem(status, title, detail)
  return string.format('{"type":"about:blank","status":%d,"title":"%s","detail":"%s"}\n', status, title, detail)
end

local function refuse(status, title, detail, retry_after)
  ngx.status = status
  ngx.header["Content-Type"] = "application/problem+json"
  if retry_after ~= nil then ngx.header["Retry-After"] = retry_after end
  ngx.print(problem(status, title, detail))
  return ngx.exit(ngx.HTTP_OK)
end

local function unavailable(why)
  local mode = ngx.var.cellgate_unavailable
  if mode == "deny" then
    ngx.log(ngx.ERR, "cellgate unavailable (", why, "): refusing the request (cellgate_unavailable deny)")
    return refuse(503, "Service Unavailable", "the rate limiter cannot be reached; try again shortly", 1)
  end
  ngx.log(ngx.WARN, "cellgate unavailable (", why, "): letting the request through (cellgate_unavailable allow)")
end

local function plural(n, word)
  if n == 1 then return "1 " .. word end
  return n .. " " .. word .. "s"
end

-- access_by_lua: asks cellgate, answers 429 (or 503) itself, or lets the request go on with the
-- RateLimit fields kept for header_filter.
function _M.access()
  local v = ngx.var
  local max_burst = num(v.cellgate_max_burst, 5)
  local count = num(v.cellgate_count, 5)
  local period = num(v.cellgate_period, 1)
  local quantity = num(v.cellgate_quantity, 1)
  local policy = v.cellgate_policy
  if policy == nil or policy == "" then policy = "default" end

  local red, err = redis:new()
  if not red then return unavailable(err) end
  red:set_timeout(num(v.cellgate_timeout_ms, 50))
  local ok
  ok, err = red:connect(v.cellgate_host or "127.0.0.1", num(v.cellgate_port, 6379), { pool = "cellgate", pool_size = POOL_SIZE })
  if not ok then return unavailable("connect: " .. tostring(err)) end
  local password = v.cellgate_password
  if password ~= nil and password ~= "" and red:get_reused_times() == 0 then
    ok, err = red:auth(password)
    if not ok then
      red:close()
      return unavailable("auth: " .. tostring(err))
    end
  end
  local res
  res, err = red["cl.throttle"](red, v.cellgate_key, max_burst, count, period, quantity)
  if res == nil then
    -- A socket error or timeout: the connection is in an unknown state, so it leaves the pool.
    red:close()
    return unavailable("CL.THROTTLE: " .. tostring(err))
  end
  red:set_keepalive(POOL_IDLE_MS, POOL_SIZE)
  if res == false or type(res) ~= "table" then
    -- An error reply (bad arguments in nginx.conf, say): a configuration problem, logged as such.
    return unavailable("CL.THROTTLE replied " .. tostring(err))
  end

  local limited, limit, remaining, retry_after, reset_after = res[1], res[2], res[3], res[4], res[5]
  -- RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers): the quota a client can
  -- spend at once (max_burst + 1) over the period; what is left and when it is all back, in seconds.
  local ctx = ngx.ctx
  ctx.cellgate_policy = string.format('"%s";q=%d;w=%d', policy, limit, period)
  ctx.cellgate_limit = string.format('"%s";r=%d;t=%d', policy, remaining, reset_after)
  if limited == 0 then return end

  ngx.header["RateLimit-Policy"] = ctx.cellgate_policy
  ngx.header["RateLimit"] = ctx.cellgate_limit
  local rule = string.format("limit is %s per %s (bursts of up to %d) for this client", plural(count, "request"), plural(period, "second"), limit)
  if retry_after < 0 then
    -- The request costs more than the whole burst: it can never pass, so there is no time to wait for.
    return refuse(429, "Too Many Requests", string.format("%s; this request costs %d, more than can ever be allowed at once", rule, quantity), nil)
  end
  if retry_after < 1 then retry_after = 1 end
  return refuse(429, "Too Many Requests", string.format("%s; retry in %s", rule, plural(retry_after, "second")), retry_after)
end

-- header_filter_by_lua: the RateLimit fields on the responses that were let through (the upstream's
-- own headers are in place by now, so these are not lost to proxy_pass).
function _M.header_filter()
  local ctx = ngx.ctx
  if ctx.cellgate_policy ~= nil then
    ngx.header["RateLimit-Policy"] = ctx.cellgate_policy
    ngx.header["RateLimit"] = ctx.cellgate_limit
  end
end

return _M
