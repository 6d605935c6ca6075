-- Settles what a call of a fleet cost of the budgets told the gates against what it started
-- with (see budgets.lua, which comes before this script), as gate/dimensions/told.rs does in
-- one process: what it cost more is spent at its end, as a start of that much; what it cost
-- less is given back to what it spent from (an announced window settles as window_settle
-- says).
-- KEYS[1..b]: the budgets' keys.
-- ARGV[1]: the call's start as start.lua reserved it, in microseconds of this server's clock
-- (-1: not known, and nothing is given back); then, for each budget in turn, its kind (f, s,
-- r or q), its limit, its window in microseconds and the units the call started with; then,
-- for each budget in turn, the units it cost.
-- Returns {1, 0, now}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local sent, budgets = tonumber(ARGV[1]), #KEYS
for k = 1, budgets do
  local at = 2 + 4 * (k - 1)
  local kind, limit, per = ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  local estimated, actual = tonumber(ARGV[at + 3]), tonumber(ARGV[1 + 4 * budgets + k])
  if kind == 'q' then
    -- A call's start not known: what it cost more is charged to the window open now.
    local from = sent >= 0 and sent or (actual > estimated and now)
    if from then
      window_settle(KEYS[k], actual - estimated, from, now)
    end
  elseif actual > estimated then
    budget_spend(KEYS[k], kind, limit, per, actual - estimated, now, now)
  elseif actual < estimated and sent >= 0 then
    budget_give_back(KEYS[k], kind, limit, per, estimated, actual, sent, now)
  end
end
return {1, 0, now}
