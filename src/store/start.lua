-- Asks to start one call through a gate shared by a fleet of processes.
-- KEYS[1]: the pace key (the earliest instant of the next start, in microseconds);
-- KEYS[2]: the fleet's adaptive rate (a hash: version v, rate r, state s);
-- KEYS[3]: the gate-wide backoff; KEYS[4..]: the backoffs of the call's scopes.
-- ARGV[1]: the caller's microseconds between two starts (0: the gate does not pace calls);
-- ARGV[2]: the version of the fleet's rate the caller knows (-1: the gate's rate is fixed);
-- ARGV[3]: how long the fleet's rate outlives its last use, in milliseconds.
-- Returns {1, wait, now, version, state}: start after `wait` microseconds, the slot is
-- reserved; `state` is the fleet's rate if the caller's version is not the latest, else '';
-- or {0, remaining, now, k}: backoff k (0: gate-wide, i: the call's i-th scope) holds it.
-- `now` is this server's clock, at index 3 (from 1) of either reply, where the caller reads
-- it. Every instant is read from this server's clock, never from the callers'.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local held, which = 0, -1
for i = 3, #KEYS do
  local ends = tonumber(redis.call('GET', KEYS[i]))
  if ends and ends > now and ends > held then
    held, which = ends, i - 3
  end
end
if which >= 0 then
  return {0, held - now, now, which}
end
local interval = tonumber(ARGV[1])
local version, state = 0, ''
if tonumber(ARGV[2]) >= 0 then
  local fleet = redis.call('HMGET', KEYS[2], 'v', 'r', 's')
  version = tonumber(fleet[1]) or 0
  if version > 0 then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
    local rate = tonumber(fleet[2])
    if rate and rate > 0 then
      interval = 1000000 / rate
    end
    if version ~= tonumber(ARGV[2]) then
      state = fleet[3]
    end
  end
end
if interval <= 0 then
  return {1, 0, now, version, state}
end
local start = math.max(tonumber(redis.call('GET', KEYS[1])) or now, now)
local after = start + interval
redis.call('SET', KEYS[1], string.format('%.0f', after), 'PX', math.ceil((after - now) / 1000) + 1000)
return {1, start - now, now, version, state}
