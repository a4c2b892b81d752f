-- stats: the per-minute stats hashes of one task name (or of every name) over a window
-- ending now, read in one call (_info.lua writes them).
-- KEYS: the hour hashes of the name (or of every name), one per hour from hour ARGV[3]
--       on: the caller sends the hours its own clock puts around the window
-- ARGV: 1 the window (ms), 2 now (ms; '' for the server's clock), 3 the first hour of KEYS
-- Returns: {now, first hour, {flat HGETALL of each hour from the first to now's}}
--          | {'!keys', now}: KEYS miss hours of the window (nothing was read)

local now = tonumber(ARGV[2]) or server_ms()
local first_minute = math.floor(now / 60000) - math.floor(tonumber(ARGV[1]) / 60000) + 1
local first_hour = math.floor(first_minute / 60)
local last_hour = math.floor(now / 3600000)
local given = tonumber(ARGV[3])
if first_hour < given or last_hour >= given + #KEYS then
  return {'!keys', string.format('%.0f', now)}
end
local hours = {}
for hour = first_hour, last_hour do
  hours[#hours + 1] = redis.call('HGETALL', KEYS[hour - given + 1])
end
return {string.format('%.0f', now), string.format('%.0f', first_hour), hours}
