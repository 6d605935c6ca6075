-- Takes in a budget a server announced of one dimension and policy, as one process of a fleet
-- reckons it after the announcement, so that the fleet spends one such budget (budgets.lua
-- keeps it: a bucket, kind r, or a window, kind q). Of a window the fleet tracks, an
-- announcement only ever lowers what the fleet may spend (the fleet's starts since are spent
-- from its reckoning already, and not all of them from the announcing process's; a bucket
-- refills, and a window resets, by itself), unless it shows that the window reset, by the
-- rule gate/budget.rs keeps in one process (ARGV[10], below).
-- The gate-wide quota is such a window, of units.
-- KEYS[1]: the budget.
-- ARGV[1]: its kind, r or q;
-- ARGV[2]: a bucket's limit; ARGV[3]: the microseconds it takes to refill it;
-- ARGV[4]: the units left, as the announcing process reckons them now;
-- ARGV[5]: the microseconds until a window resets (0: it resets now);
-- ARGV[6]: announcements whose resets are closer than this many microseconds are of one
-- window;
-- ARGV[7]: how long, in milliseconds, a budget is kept after it is full or reset;
-- ARGV[8]: the units of the announcing process's calls that wait for this store to let them
-- go (not taken off ARGV[4]). Their starts ran before this script: the window spent those
-- it let go, and it lets none go while the call sent to learn it is out, so only a window
-- the fleet knew nothing of is taken less them.
-- ARGV[9]: what the server said was left, before the process took anything off;
-- ARGV[10]: when the call it answered started, as start.lua put it (0: not known, so
-- before every read).
-- A window keeps the least the server said of it (w) and when that was first read here
-- (wr): an answer to a call started after then that says more is of a new window, however
-- late its rounded reset puts that (the server counted the call after it said less), and
-- is taken as a probe's answer is.
-- Returns {changed, 0, now}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key, kind, left = KEYS[1], ARGV[1], tonumber(ARGV[4])
local kept = tonumber(ARGV[7])
if kind == 'r' then
  local limit, per = tonumber(ARGV[2]), tonumber(ARGV[3])
  -- The instant the bucket is full again, were it `left` now.
  local said = now + math.ceil(per * (limit - math.min(left, limit)) / limit)
  -- Starts never put it further than a refill away; a bucket that is, was kept at another
  -- refill than the servers' resets now show, and takes this word.
  local full = tonumber(redis.call('GET', key))
  if full and full >= said and full <= now + per then
    return {0, 0, now}
  end
  redis.call('SET', key, whole(said), 'PX', math.ceil((said - now) / 1000) + kept)
  return {1, 0, now}
end
local resets_in = tonumber(ARGV[5])
local window = redis.call('HMGET', key, 'l', 'e', 'p', 'pc', 'w', 'wr')
local known, reset, probe = tonumber(window[1]), tonumber(window[2]), tonumber(window[3])
local said, dated = tonumber(ARGV[9]), tonumber(ARGV[10])
if resets_in <= 0 then
  -- "Resets now" says nothing of the next window; if the call sent to learn it brought
  -- this, another may go.
  if not probe then
    return {0, 0, now}
  end
  redis.call('HDEL', key, 'p', 'pc')
  redis.call('HSET', key, 'e', whole(now))
  -- Kept as long after this reset as any, not only as long as the probe's answer was
  -- awaited: else the fleet forgets the window, and lets every call go, while each process
  -- still sends one call to learn the next.
  redis.call('PEXPIRE', key, kept)
  return {1, 0, now}
end
local ends, slack = now + resets_in, tonumber(ARGV[6])
if probe or not reset or reset <= now then
  -- A new window; the call sent to learn it is its first start.
  if not probe then
    left = math.max(0, left - tonumber(ARGV[8]))
  end
  new_window(key, left, said, ends, now, kept)
  if probe then
    redis.call('HSET', key, 's', whole(probe), 'c', window[4])
  end
  return {1, 0, now}
end
local least, read = tonumber(window[5]), tonumber(window[6])
if ends + slack >= reset and least and read and dated >= read and said > least then
  -- The window reset since the server said `least`: this is the new one's word, of calls
  -- the process let go (the fleet spent them from the old window as it let them go).
  new_window(key, left, said, ends, now, kept)
  return {1, 0, now}
end
return window_word(key, {known, reset, least}, {left, said, ends}, now, slack, kept)
