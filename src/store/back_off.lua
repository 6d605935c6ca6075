-- Starts or extends a backoff shared by a fleet of processes; never shortens one.
-- KEYS[1]: the backoff key (its value: when it ends, in microseconds of this server's clock;
-- it expires then); KEYS[2], for a gate-wide backoff: the pace key, moved past the backoff so
-- that calls resume at the pace rather than in a burst.
-- ARGV[1]: the backoff's length in microseconds, from now.
-- Returns {left, now}: the microseconds left of the backoff in force, and this server's clock.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ends = now + tonumber(ARGV[1])
local old = tonumber(redis.call('GET', KEYS[1]))
if old and old >= ends then
  return {old - now, now}
end
if ends <= now then
  return {0, now}
end
local ttl = math.ceil((ends - now) / 1000)
redis.call('SET', KEYS[1], string.format('%.0f', ends), 'PX', ttl)
if KEYS[2] then
  local tat = tonumber(redis.call('GET', KEYS[2])) or now
  if tat < ends then
    redis.call('SET', KEYS[2], string.format('%.0f', ends), 'PX', ttl + 1000)
  end
end
return {ends - now, now}
