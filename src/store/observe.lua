-- Takes in the quota a server announced to one process of a fleet, by the rules gate/budget.rs
-- follows in one process, so that the fleet spends one budget.
-- KEYS[1]: the quota (a hash: units left l, reset e in microseconds of this server's clock,
-- when an announcement last set what is left o, the last start s and its cost c; while a
-- call learns the next window, its start p and cost pc).
-- ARGV[1]: the units the fleet may spend (what the server said is left, less the reserve and
-- the announcing process's other calls that went out);
-- ARGV[2]: the microseconds until the server's window resets (0: it resets now);
-- ARGV[3]: announcements whose resets are closer than this many microseconds are of one
-- window;
-- ARGV[4]: how long, in milliseconds, the quota is kept after its reset;
-- ARGV[5]: the units of the announcing process's calls that wait for this store to let them
-- go. Their starts ran before this script: the fleet's quota spent those it let go, and it
-- lets none go while the call sent to learn a window is out, so only a window the fleet knew
-- nothing of is taken less them.
-- Returns {changed, 0, now}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local left, resets_in = tonumber(ARGV[1]), tonumber(ARGV[2])
local quota = redis.call('HMGET', KEYS[1], 'l', 'e', 'p', 'pc')
local reset, probe = tonumber(quota[2]), tonumber(quota[3])
if resets_in <= 0 then
  -- "Resets now" says nothing of the next window; if the call sent to learn it brought
  -- this, another may go.
  if probe then
    redis.call('HDEL', KEYS[1], 'p', 'pc')
    redis.call('HSET', KEYS[1], 'e', whole(now))
    -- Kept as long after this reset as any, not only as long as the probe's answer was
    -- awaited: else the fleet forgets the quota, and lets every call go, while each process
    -- still sends one call to learn the next window.
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
    return {1, 0, now}
  end
  return {0, 0, now}
end
local ends = now + resets_in
local kept = tonumber(ARGV[4])
if probe or not reset or reset <= now then
  -- A new window; the call sent to learn it is its first start.
  if not probe then
    left = math.max(0, left - tonumber(ARGV[5]))
  end
  new_window(KEYS[1], left, ends, now, kept)
  if probe then
    redis.call('HSET', KEYS[1], 's', whole(probe), 'c', quota[4])
  end
  return {1, 0, now}
end
return window_word(KEYS[1], tonumber(quota[1]), reset, left, ends, now, tonumber(ARGV[3]), kept)
