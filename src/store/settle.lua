-- Settles with the fleet's paces what a call really cost against what it started with (its
-- budgets, the announced quota among them, settle by settle_budgets.lua).
-- KEYS[1]: the pace key; KEYS[2..]: the pace keys of the call's scopes with a rate.
-- ARGV[1]: the units it cost more (> 0);
-- ARGV[2]: the microseconds between two starts per unit, if the gate paces calls (else 0);
-- ARGV[3..]: the microseconds between two starts per unit of each scope's pace, in turn.
-- What it cost more pushes the fleet's next start back (and each of its scopes' next
-- start). What it cost less stays spent: other starts were spaced by it.
-- Returns {1, 0, now}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function whole(x) return string.format('%.0f', x) end
local units = tonumber(ARGV[1])
local function push(key, per_unit)
  local next = math.max(tonumber(redis.call('GET', key)) or now, now) + units * per_unit
  redis.call('SET', key, whole(next), 'PX', math.ceil((next - now) / 1000) + 1000)
end
if tonumber(ARGV[2]) > 0 then
  push(KEYS[1], tonumber(ARGV[2]))
end
for i = 2, #KEYS do
  push(KEYS[i], tonumber(ARGV[i + 1]))
end
return {1, 0, now}
