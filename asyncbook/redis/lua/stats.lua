-- stats: the per-minute stats hashes of one task name (or of every name) over a window
-- ending now, read in one call (_info.lua writes them).
-- KEYS: 1 the task names (not read: it routes the call to the book's slot on a Cluster;
--       the hashes, one per hour of the window, are named from the tag)
-- ARGV: 1 the hash tag, 2 the task name ('' for every name), 3 the window (ms),
--       4 now (ms; '' for the server's clock)
-- Returns: {now, first hour, {flat HGETALL of each hour from the first to now's}}

local now = tonumber(ARGV[4]) or server_ms()
local first_minute = math.floor(now / 60000) - math.floor(tonumber(ARGV[3]) / 60000) + 1
local first_hour = math.floor(first_minute / 60)
local last_hour = math.floor(now / 3600000)
local hours = {}
for hour = first_hour, last_hour do
  local key
  if ARGV[2] == '' then
    key = ARGV[1] .. ':sa:' .. string.format('%.0f', hour)
  else
    key = ARGV[1] .. ':s:' .. string.format('%.0f', hour) .. ':' .. esc(ARGV[2])
  end
  hours[#hours + 1] = redis.call('HGETALL', key)
end
return {string.format('%.0f', now), string.format('%.0f', first_hour), hours}
