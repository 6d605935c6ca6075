-- Replaces the fleet's adaptive rate, if no other process replaced it since the caller read it.
-- KEYS[1]: the fleet's rate (a hash: version v, rate r, state s).
-- ARGV[1]: the version the caller's change is based on (0: none yet); ARGV[2]: the new rate in
-- calls per second; ARGV[3]: the new state; ARGV[4]: how long it outlives its last use, in ms.
-- Returns {1, version, now} when stored; {0, version, now, state} with the fleet's latest
-- when another process came first: the caller applies its change to that and tries again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fleet = redis.call('HMGET', KEYS[1], 'v', 's')
local version = tonumber(fleet[1]) or 0
if version ~= tonumber(ARGV[1]) then
  return {0, version, now, fleet[2] or ''}
end
redis.call('HSET', KEYS[1], 'v', version + 1, 'r', ARGV[2], 's', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, version + 1, now}
