-- Asks to start one call through a gate shared by a fleet of processes.
-- KEYS[1]: the pace key (the earliest instant of the next start, in microseconds);
-- KEYS[2]: the fleet's adaptive rate (a hash: version v, rate r, state s);
-- KEYS[3]: the gate-wide backoff; KEYS[4..3+n]: the backoffs of the call's n scopes;
-- KEYS[4+n..3+n+m]: the paces of the m of its scopes with a rate (each the earliest instant
-- of the scope's next start, in microseconds); KEYS[4+n+m..]: the b budgets the call draws
-- from, told the gates or announced by the server, the gate-wide quota among them (see
-- budgets.lua, which comes before this script); the last key
-- but one: the instant until which what leases spent of those budgets for slots never
-- taken may still come back (see below); the last key: the fleet's live members (a sorted
-- set of the gates' ids, each scored with the instant it drops out).
-- ARGV[1]: the caller's microseconds between two starts, for this call's cost (0: the gate
-- does not pace calls);
-- ARGV[2]: the version of the fleet's rate the caller knows (-1: the gate's rate is fixed);
-- ARGV[3]: how long the fleet's rate outlives its last use, in milliseconds;
-- ARGV[4]: the call's cost in units;
-- ARGV[5]: how long, in microseconds, the call sent to learn an announced window's next
-- window may take to bring its announcement before the server is taken to announce no more;
-- ARGV[6]: how often, in microseconds, calls ask again while that call is out;
-- ARGV[7]: n, the number of the call's scopes; ARGV[8]: how far, in microseconds, a scope's
-- pace may put the call past its own slot and still reserve it; ARGV[9]: b; then, for each
-- scope pace key in turn, the scope's number among the call's scopes (from 1) and its
-- microseconds between two starts, for this call's cost; then, for each budget in turn, its
-- kind (f, s, r or q), its limit, its window in microseconds and the units the call spends;
-- then how many starts the caller asks for (more than one: it leases the others, see
-- below) and the longest, in microseconds, its starts may span; last, the caller's id if it
-- tells the fleet it is live (else ''), and how long, in microseconds, the fleet counts it
-- live from now.
-- Returns {1, wait, now, version, state, start, members, starts, interval}: start after `wait`
-- microseconds (at `start`), the slot is reserved; `state` is the fleet's rate if the
-- caller's version is not the latest, else ''; `members` is the fleet's live members if the
-- caller told it it is live, else -1; `starts` slots are reserved, each `interval`
-- microseconds (whole) after the one before, the first at `start`, each with the call's
-- units of every budget spent at it;
-- or {0, remaining, now, k}: backoff k (0: gate-wide, i: the call's i-th scope) holds it;
-- or {2, wait, now}: a budget has nothing for the call yet, or the call sent to learn an
-- announced window's next is out: ask again after `wait` (for a budget, no later than what
-- leases spent of it may come back);
-- or {3, wait, now, k}: the pace of the call's k-th scope has its next start after `wait`,
-- well after the fleet's rate and budgets would start the call: nothing is reserved.
-- `now` is this server's clock, at index 3 (from 1) of every reply, where the caller reads
-- it. Every instant is read from this server's clock, never from the callers'.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local scopes = tonumber(ARGV[7]) or (#KEYS - 5)
local budgets = tonumber(ARGV[9]) or 0
-- The last scope pace key, and where the budgets' arguments begin.
local last_pace = #KEYS - 2 - budgets
local lent_key = KEYS[#KEYS - 1]
local budget_args = 10 + 2 * (last_pace - 3 - scopes)
-- The caller is live until `lives` from now; the members whose time passed have dropped out.
local members = -1
if ARGV[#ARGV - 1] ~= '' then
  local key, lives = KEYS[#KEYS], tonumber(ARGV[#ARGV])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', whole(now))
  redis.call('ZADD', key, whole(now + lives), ARGV[#ARGV - 1])
  redis.call('PEXPIRE', key, math.ceil(lives / 1000))
  members = redis.call('ZCARD', key)
end
local held, which = 0, -1
for i = 3, 3 + scopes do
  local ends = tonumber(redis.call('GET', KEYS[i]))
  if ends and ends > now and ends > held then
    held, which = ends, i - 3
  end
end
if which >= 0 then
  return {0, held - now, now, which}
end

local function budget(k)
  local at = budget_args + 4 * (k - 1)
  return KEYS[last_pace + k], ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]),
    tonumber(ARGV[at + 3])
end
-- An announced window that reset lets one call of the fleet go to learn the next; while
-- that call is out, none other goes.
-- An open one spreads what is left until its reset: the call reserves its share's instant.
local cost = tonumber(ARGV[4])
local learns, earliest = {}, now
for k = 1, budgets do
  local key, kind, limit, per, units = budget(k)
  if kind == 'q' then
    local wait, learning = window_learning(key, now, tonumber(ARGV[5]), tonumber(ARGV[6]))
    if wait then
      return {2, wait, now}
    end
    if learning then
      learns[#learns + 1] = k
    else
      local room, reset = budget_room(key, kind, limit, per, units, now)
      if reset and room >= reset then
        return {2, math.floor(room - now), now}
      end
      earliest = math.max(earliest, room)
    end
  end
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
      interval = 1000000 * cost / rate
    end
    if version ~= tonumber(ARGV[2]) then
      state = fleet[3]
    end
  end
end
local start = earliest
if interval > 0 then
  start = math.max(tonumber(redis.call('GET', KEYS[1])) or now, start)
end
-- A scope whose own pace starts the call later holds only its calls: the call waits for
-- that out of its gate's line, with no slot of the fleet's rate kept for it meanwhile,
-- unless the scope's slot is at most `slack` past the call's own (a gate interval, or
-- ARGV[8]), where a round trip more would cost more than the slot moved.
local paced, paced_by = start, 0
for i = 4 + scopes, last_pace do
  local next = tonumber(redis.call('GET', KEYS[i]))
  if next and next > paced then
    paced, paced_by = next, tonumber(ARGV[10 + 2 * (i - 4 - scopes)])
  end
end
if paced - start > math.max(interval, tonumber(ARGV[8])) then
  return {3, math.floor(paced - now), now, paced_by}
end
start = paced
-- Each budget must have room for the call at `start`; if one has not, nothing is reserved,
-- and the call asks again when the last of them has.
local room = start
for k = 1, budgets do
  local key, kind, limit, per, units = budget(k)
  room = math.max(room, (budget_room(key, kind, limit, per, units, start)))
end
if room > start then
  -- What leases spent for slots their callers never take comes back once they expire:
  -- ask again then, rather than wait for the room the budgets have without it.
  local lent = tonumber(redis.call('GET', lent_key))
  if lent and lent > now then
    room = math.min(room, lent)
  end
  return {2, math.floor(room - now), now}
end
-- The call learns each window that reset; the others wait for its answer.
for _, k in ipairs(learns) do
  local key, _, _, _, units = budget(k)
  window_probe(key, now, units, tonumber(ARGV[5]))
end
-- Each budget spends the call's units at `start`.
for k = 1, budgets do
  local key, kind, limit, per, units = budget(k)
  budget_spend(key, kind, limit, per, units, start, now)
end
-- A call that the rate spaces may lease the slots after its own for the caller's next
-- calls of its kind (cost, draws and scopes), as many as it asks for, its span holds and
-- each budget has room for, slot by slot: the fleet's rate and budgets are kept as if each
-- slot had been asked for. The slots are as far apart as the slowest of the rate, each of
-- the call's scopes' paces and each announced window's spread (each slot its share of the
-- time left until the reset, which stays the same from slot to slot) would put them; each
-- takes one slot of the fleet's rate, the next ones, though it may be spent later (as a
-- slot its caller takes late is), so that a scope slower than the rate leaves the rate's
-- other slots to other calls. While an announced window is spent, each slot leaves a span
-- and a slot before its reset, so that a slot its caller takes late is still spent in the window it
-- was counted in (which also keeps them within what is left). The slots are whole
-- microseconds apart, where the caller finds each again.
local starts, rate_step = 1, math.ceil(interval)
local step = rate_step
if interval > 0 and #learns == 0 then
  local asked, span = tonumber(ARGV[#ARGV - 3]), tonumber(ARGV[#ARGV - 2])
  for i = 4 + scopes, last_pace do
    step = math.max(step, math.ceil(tonumber(ARGV[11 + 2 * (i - 4 - scopes)])))
  end
  -- The earliest reset of the windows spent (their spread read before the first slot).
  local reset
  for k = 1, budgets do
    local key, kind, _, _, units = budget(k)
    local left, ends = window_open(key, kind, start)
    if left then
      if units > 0 then
        step = math.max(step, math.ceil((ends - start) * units / (left + units)))
      end
      reset = math.min(reset or ends, ends)
    end
  end
  local most = math.max(1, math.min(asked, math.floor(span / step)))
  while starts < most do
    local at = start + step * starts
    if reset and at + step + span > reset then break end
    local fits = true
    for k = 1, budgets do
      local key, kind, limit, per, units = budget(k)
      if budget_room(key, kind, limit, per, units, at) > at then
        fits = false
        break
      end
    end
    if not fits then break end
    for k = 1, budgets do
      local key, kind, limit, per, units = budget(k)
      budget_spend(key, kind, limit, per, units, at, now)
    end
    starts = starts + 1
  end
end
if starts > 1 and budgets > 0 then
  -- The lease expires a span after its last slot (later, if its caller's starts run late),
  -- and its caller gives back what it did not take a round trip later: a span more.
  local span = tonumber(ARGV[#ARGV - 2])
  local back = start + step * starts + 2 * span
  local lent = tonumber(redis.call('GET', lent_key))
  if not lent or lent < back then
    redis.call('SET', lent_key, whole(back), 'PX', math.ceil((back - now) / 1000) + 1000)
  end
end
if interval > 0 then
  local after = start + rate_step * (starts - 1) + interval
  redis.call('SET', KEYS[1], whole(after), 'PX', math.ceil((after - now) / 1000) + 1000)
end
for i = 4 + scopes, last_pace do
  local after = start + step * (starts - 1) + tonumber(ARGV[11 + 2 * (i - 4 - scopes)])
  redis.call('SET', KEYS[i], whole(after), 'PX', math.ceil((after - now) / 1000) + 1000)
end
return {1, math.floor(start - now), now, version, state, tonumber(whole(start)), members,
  starts, step}
