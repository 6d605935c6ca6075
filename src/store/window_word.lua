-- Prelude of observe_budget.lua: how a word a server said of a window (the units left until
-- its reset) is taken into what the fleet knows of it.
-- A window is a hash: units left l, reset e in microseconds of this server's clock, and when
-- a word last set what is left o (with more fields of budgets.lua's).

-- Instants run to 16 digits, past what Lua writes of a number by itself.
local function whole(x) return string.format('%.0f', x) end

-- Makes the window at `key` one the fleet knew nothing of: `left` until `ends`, said at
-- `now`; kept `kept` milliseconds past its reset.
local function new_window(key, left, ends, now, kept)
  redis.call('DEL', key)
  redis.call('HSET', key, 'l', whole(left), 'e', whole(ends), 'o', whole(now))
  redis.call('PEXPIRE', key, math.ceil((ends - now) / 1000) + kept)
end

-- Takes in a word of `left` units until `ends`, said at `now`, of the window at `key` that
-- the fleet knows to hold `known` until `reset`: an older window's word (its reset more than
-- `slack` before the known one) is ignored; of the same window, only a lower count or an
-- earlier reset is taken. Returns {changed, 0, now}.
local function window_word(key, known, reset, left, ends, now, slack, kept)
  if ends + slack < reset then
    return {0, 0, now}
  end
  known = known or left
  if left >= known and ends >= reset then
    return {0, 0, now}
  end
  reset = math.min(reset, ends)
  redis.call('HSET', key, 'l', whole(math.min(known, left)), 'e', whole(reset))
  if left < known then
    redis.call('HSET', key, 'o', whole(now))
  end
  redis.call('PEXPIRE', key, math.ceil((reset - now) / 1000) + kept)
  return {1, 0, now}
end

