-- stats: the per-minute stats hashes of one task name (or of every name) over a window
-- ending now, read in one call (_info.lua writes them).
-- KEYS: the hour hashes of the name (or of every name), one per hour from keys_first_hour
--       on: the caller sends the hours its own clock puts around the window
-- Returns: {now, first hour, {flat HGETALL of each hour from the first to now's}}
--          | {'!keys', now}: KEYS miss hours of the window (nothing was read)

-- ARGV: StatsArgs (redis/_script_args.py)
local window_ms = tonumber(ARGV[1])
local now_ms = ARGV[2]                -- '' for the server's clock
local keys_first_hour = ARGV[3]       -- the hour of KEYS[1]

local now = tonumber(now_ms) or server_ms()
local first_minute = math.floor(now / 60000) - math.floor(window_ms / 60000) + 1
local first_hour = math.floor(first_minute / 60)
local last_hour = math.floor(now / 3600000)
local given = tonumber(keys_first_hour)
if first_hour < given or last_hour >= given + #KEYS then
  return {'!keys', string.format('%.0f', now)}
end
local hours = {}
for hour = first_hour, last_hour do
  hours[#hours + 1] = redis.call('HGETALL', KEYS[hour - given + 1])
end
return {string.format('%.0f', now), string.format('%.0f', first_hour), hours}
