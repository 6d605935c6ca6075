-- The budgets told the gates (gate/dimensions/told.rs), as the fleet keeps them: a prelude of
-- start.lua, settle_budgets.lua and observe_budget.lua, which the store sends each after it. A
-- fixed window is a hash of its start s and the units u started in it, windows running back to
-- back from the fleet's first start; a sliding one, a sorted set of its starts, each member
-- `start:units:asked` (and `.n` after it, where an alike member is there already), scored by
-- its start; a bucket, the instant it is full again. A server's announced budgets are kept
-- here too (observe_budget.lua sets them): a bucket as a told one, at a key of its own; a
-- window (kind q), the gate-wide quota among them, as a hash of the units left l until its
-- reset e, when an announcement last set them o, the least the server said of it w and when
-- that was first read wr, and the last start s and its units c: spent
-- by the rules gate/budget.rs keeps in one process, spread evenly until the reset, past which
-- nothing is known; one call of the fleet then goes to learn the next window (its start p and
-- units pc), and none other until its answer. Instants are in microseconds of this server's
-- clock.

-- Instants run to 16 digits, past what Lua writes of a number by itself.
local function whole(x) return string.format('%.0f', x) end

local function units_of(member) return tonumber(string.match(member, '^[^:]*:([^:]*)')) end

-- Adds to the sliding window at `key` the `units` a call started with at `at`, asked at
-- `asked`: a member of its own, even beside another call's of the same instant, units and
-- asking (which would otherwise be one member, and count once).
local function sliding_add(key, at, units, asked)
  local base = whole(at) .. ':' .. whole(units) .. ':' .. asked
  local member, n = base, 0
  while redis.call('ZADD', key, 'NX', whole(at), member) == 0 do
    n = n + 1
    member = base .. '.' .. n
  end
end

-- The earliest instant from `at` on for the next start from an announced window of `left`
-- units until `reset`, whose last start, at `last`, spent `spent`: after the last start, its
-- share of the time left until the reset (start.lua spends the gate's quota so too).
local function spread_from(at, reset, left, last, spent)
  return math.max(at, last + (reset - last) * spent / (left + spent))
end

-- Of the announced window at `key` at `now`: how long a call waits while the call sent to
-- learn the next window is out (its answer awaited `within` microseconds, asked for again
-- every `poll`), and whether this call is the one to learn it (the window reset). A server
-- whose answer did not come by then is taken to announce no more: the window is forgotten.
local function window_learning(key, now, within, poll)
  local window = redis.call('HMGET', key, 'e', 'p')
  local reset, probe = tonumber(window[1]), tonumber(window[2])
  if probe then
    if now < probe + within then
      return math.min(poll, probe + within - now), false
    end
    redis.call('DEL', key)
    return nil, false
  end
  return nil, reset ~= nil and reset <= now
end

-- A call of `units` asked at `now` learns the next window of the window at `key`: kept
-- while its answer may come (`within` microseconds, and a second more).
local function window_probe(key, now, units, within)
  redis.call('HSET', key, 'p', whole(now), 'pc', whole(units))
  redis.call('PEXPIRE', key, math.ceil(within / 1000) + 1000)
end

-- What is left of the budget at `key`, of `kind`, and its reset, if it is an announced
-- window still open at `at`.
local function window_open(key, kind, at)
  if kind ~= 'q' then return nil end
  local window = redis.call('HMGET', key, 'l', 'e')
  local left, reset = tonumber(window[1]), tonumber(window[2])
  if left and reset and at < reset then return left, reset end
  return nil
end

-- The earliest instant from `at` on at which the budget at `key` (of `kind`, `limit` units
-- per `per`) has room for `units`; of an announced window open at `at`, its reset too.
local function budget_room(key, kind, limit, per, units, at)
  local room = at
  if kind == 'q' then
    local window = redis.call('HMGET', key, 'l', 'e', 's', 'c')
    local left, reset = tonumber(window[1]), tonumber(window[2])
    if left and reset and at < reset then
      local last, spent = tonumber(window[3]), tonumber(window[4])
      if left < units then
        room = reset
      elseif last and spent then
        room = spread_from(at, reset, left, last, spent)
      end
      return room, reset
    end
    return room
  end
  -- A call larger than the whole budget starts alone, when the budget is empty.
  units = math.min(units, limit)
  if kind == 'f' then
    local window = redis.call('HMGET', key, 's', 'u')
    local first, used = tonumber(window[1]), tonumber(window[2]) or 0
    if first and at < first + per and used + units > limit then
      room = first + per
    end
  elseif kind == 's' then
    -- The oldest starts leave first: those gone by `at`, then as many more as the call
    -- needs room for.
    local starts = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    local left = 0
    for i = 1, #starts, 2 do left = left + units_of(starts[i]) end
    for i = 1, #starts, 2 do
      local leaves = tonumber(starts[i + 1]) + per
      if leaves > at and left + units <= limit then break end
      left = left - units_of(starts[i])
      room = math.max(room, leaves)
    end
  else
    -- Room for `units` once the bucket lacks no more than `limit - units`.
    local full = tonumber(redis.call('GET', key))
    if full then
      room = math.max(room, full - math.floor(per * (limit - units) / limit))
    end
  end
  return room
end

-- Spends `units` of the budget at `key` at `at`, asked at `now`; the budget is kept until a
-- minute after nothing of it is left.
local function budget_spend(key, kind, limit, per, units, at, now)
  local function keep(until_)
    redis.call('PEXPIRE', key, math.ceil((until_ - now) / 1000) + 60000)
  end
  if kind == 'q' then
    -- Within the window only: past its reset, the next window's announcement counts it.
    local window = redis.call('HMGET', key, 'l', 'e')
    local left, reset = tonumber(window[1]), tonumber(window[2])
    if left and reset and at < reset then
      redis.call('HSET', key, 'l', whole(math.max(0, left - units)), 's', whole(at), 'c',
        whole(units))
    end
  elseif kind == 'f' then
    local window = redis.call('HMGET', key, 's', 'u')
    local first, used = tonumber(window[1]), tonumber(window[2]) or 0
    if not first then
      first, used = at, 0
    elseif at >= first + per then
      first, used = first + math.floor((at - first) / per) * per, 0
    end
    redis.call('HSET', key, 's', whole(first), 'u', whole(used + units))
    keep(first + per)
  elseif kind == 's' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', whole(now - per))
    sliding_add(key, at, units, whole(now))
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    keep(tonumber(newest[2]) + per)
  else
    local full = math.max(tonumber(redis.call('GET', key)) or at, at)
      + math.ceil(per * units / limit)
    redis.call('SET', key, whole(full))
    keep(full)
  end
end

-- Settles with the announced window at `key` a call started at `sent` that cost `more` units
-- more (or less, if negative) than it spent, at `now`: in the window it spent from, if that
-- one still runs and no announcement has set what is left since (the server's word then
-- counts the call at its real cost); if no call of the fleet started after it, the spread
-- until the reset counts its real cost from its start on.
local function window_settle(key, more, sent, now)
  local window = redis.call('HMGET', key, 'l', 'e', 'o', 's', 'c')
  local left, reset, told = tonumber(window[1]), tonumber(window[2]), tonumber(window[3])
  if left and reset and now < reset and sent >= (told or now) then
    redis.call('HSET', key, 'l', whole(math.max(0, left - more)))
    local last, spent = tonumber(window[4]), tonumber(window[5])
    if last and spent and sent >= last then
      redis.call('HSET', key, 'c', whole(math.max(0, spent + more)))
    end
  end
end

-- Gives back to the budget at `key` (not an announced window: see window_settle) what a call
-- that started at `sent` with `estimated` units did not use of them (it used `actual`), at
-- `now`.
local function budget_give_back(key, kind, limit, per, estimated, actual, sent, now)
  local back = estimated - actual
  if kind == 'f' then
    -- To the window it spent from, if that one still runs.
    local window = redis.call('HMGET', key, 's', 'u')
    local first, used = tonumber(window[1]), tonumber(window[2])
    if first and used and sent >= first and now < first + per then
      redis.call('HSET', key, 'u', whole(math.max(0, used - back)))
    end
  elseif kind == 's' then
    -- From the starts of that instant, which leave together: the call's own, or what others
    -- of the instant spent (which is as good).
    local starts = redis.call('ZRANGE', key, whole(sent), whole(sent), 'BYSCORE')
    if #starts > 0 then
      redis.call('ZREMRANGEBYSCORE', key, whole(sent), whole(sent))
      for _, member in ipairs(starts) do
        local start, units, asked = string.match(member, '^([^:]*):([^:]*):(.*)$')
        local taken = math.min(back, tonumber(units))
        back = back - taken
        units = tonumber(units) - taken
        if units > 0 then
          sliding_add(key, tonumber(start), units, string.match(asked, '^[^.]*'))
        end
      end
    end
  else
    -- A server that counted only what the call used may have found its bucket full since,
    -- refilling nothing while it was: what the refill since the start exceeds `actual` is
    -- not given back. Never past full.
    local refilled = math.ceil((now - sent) * limit / per)
    back = math.max(0, back - math.max(0, refilled - actual))
    local full = tonumber(redis.call('GET', key))
    if full and back > 0 then
      full = math.max(full - math.floor(per * back / limit), now)
      redis.call('SET', key, whole(full), 'PX', math.ceil((full - now) / 1000) + 60000)
    end
  end
end

-- Of an announced window, a word a server said of it, taken into what the fleet knows.

-- Makes the window at `key` one the fleet knew nothing of: `left` until `ends`, the server
-- having said `said`, read at `now`; kept `kept` milliseconds past its reset.
local function new_window(key, left, said, ends, now, kept)
  redis.call('DEL', key)
  redis.call('HSET', key, 'l', whole(left), 'e', whole(ends), 'o', whole(now), 'w', whole(said),
    'wr', whole(now))
  redis.call('PEXPIRE', key, math.ceil((ends - now) / 1000) + kept)
end

-- Takes in a word of `left` units until `ends` (the server having said `said`), read at
-- `now`, of the window at `key` that the fleet knows to hold `known` until `reset`, the least
-- the server said of it `least`: an older window's word (its reset more than `slack` before
-- the known one) is ignored; of the same window, only a lower count or an earlier reset is
-- taken. Returns {changed, 0, now}.
local function window_word(key, window, word, now, slack, kept)
  local known, reset, least = window[1], window[2], window[3]
  local left, said, ends = word[1], word[2], word[3]
  if ends + slack < reset then
    return {0, 0, now}
  end
  if not least or said < least then
    redis.call('HSET', key, 'w', whole(said), 'wr', whole(now))
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

