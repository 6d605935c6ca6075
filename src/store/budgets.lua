-- The budgets told the gates (gate/dimensions/told.rs), as the fleet keeps them: a prelude
-- of start.lua and charge.lua, which the store sends each after it. A fixed window is a hash
-- of its start s and the units u started in it, windows running back to back from the
-- fleet's first start; a sliding one, a sorted set of its starts, each member
-- `start:units:asked`, scored by its start; a bucket, the instant it is full again. Instants
-- are in microseconds of this server's clock.

-- Instants run to 16 digits, past what Lua writes of a number by itself.
local function whole(x) return string.format('%.0f', x) end

local function units_of(member) return tonumber(string.match(member, '^[^:]*:([^:]*)')) end

-- The earliest instant from `at` on at which the budget at `key` (of `kind`, `limit` units
-- per `per`) has room for `units`.
local function budget_room(key, kind, limit, per, units, at)
  -- A call larger than the whole budget starts alone, when the budget is empty.
  units = math.min(units, limit)
  local room = at
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
  if kind == 'f' then
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
    redis.call('ZADD', key, whole(at), whole(at) .. ':' .. whole(units) .. ':' .. whole(now))
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    keep(tonumber(newest[2]) + per)
  else
    local full = math.max(tonumber(redis.call('GET', key)) or at, at)
      + math.ceil(per * units / limit)
    redis.call('SET', key, whole(full))
    keep(full)
  end
end

