-- Charges what calls of a fleet cost beyond their estimates to the budgets told the gates
-- (see budgets.lua, which comes before this script), as gate/dimensions/told.rs does in one
-- process: at the call's end, as a start of what it cost more.
-- KEYS[1..b]: the budgets' keys.
-- ARGV: for each budget in turn, its kind (f, s or r), its limit, its window in
-- microseconds and the units charged.
-- Returns {1, 0, now}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for k = 1, #KEYS do
  local at = 1 + 4 * (k - 1)
  budget_spend(KEYS[k], ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]),
    tonumber(ARGV[at + 3]), now, now)
end
return {1, 0, now}
