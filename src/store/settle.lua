-- Settles what a call of a fleet really cost against what it started with.
-- KEYS[1]: the quota the server announced (see observe.lua); KEYS[2]: the pace key;
-- KEYS[3..]: the pace keys of the call's scopes with a rate.
-- ARGV[1]: the units it cost more (> 0) or less (< 0);
-- ARGV[2]: the microseconds between two starts per unit, if the gate paces calls (else 0);
-- ARGV[3]: when the call started, in microseconds of this server's clock;
-- ARGV[4..]: the microseconds between two starts per unit of each scope's pace, in turn.
-- What it cost more comes off the quota's window and pushes the fleet's next start back
-- (and each of its scopes' next start);
-- what it cost less is given back to the window, if the call spent from it and no
-- announcement has set what is left since (the server's word then counts the call at its
-- real cost already). If no call of the fleet started after it, the spread until the
-- reset counts its real cost from its start on. The pace keeps what it cost less: other
-- starts were spaced by it.
-- Returns {changed, 0, now}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function whole(x) return string.format('%.0f', x) end
local units, per_unit, sent = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local changed = 0
local quota = redis.call('HMGET', KEYS[1], 'l', 'e', 'o', 's', 'c')
local left, reset, told = tonumber(quota[1]), tonumber(quota[2]), tonumber(quota[3])
if left and reset and reset > now and sent >= (told or now) then
  redis.call('HSET', KEYS[1], 'l', whole(math.max(0, left - units)))
  local last, spent = tonumber(quota[4]), tonumber(quota[5])
  if last and spent and sent >= last then
    redis.call('HSET', KEYS[1], 'c', whole(math.max(0, spent + units)))
  end
  changed = 1
end
local function push(key, per_unit)
  local next = math.max(tonumber(redis.call('GET', key)) or now, now) + units * per_unit
  redis.call('SET', key, whole(next), 'PX', math.ceil((next - now) / 1000) + 1000)
  changed = 1
end
if units > 0 then
  if per_unit > 0 then
    push(KEYS[2], per_unit)
  end
  for i = 3, #KEYS do
    push(KEYS[i], tonumber(ARGV[i + 1]))
  end
end
return {changed, 0, now}
