-- workers: the workers seen since a time, with their counts and running tasks.
-- KEYS: 1 workers (sorted set: worker -> last seen ms), 2 the running tasks' index
-- ARGV: 1 the hash tag, 2 seen at or after (ms), 3 how many workers at most,
--       4 how many running tasks to look at, at most
-- Returns: {worker, last seen, {started, succeeded, failed}, {running ids}} per worker,
--          most recently seen first

local tag = ARGV[1]
local seen = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0,
  tonumber(ARGV[3]))
local running = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[4]) - 1)) do
  local worker = redis.call('HGET', tag .. ':t:' .. esc(id), 'w')
  if worker then
    running[worker] = running[worker] or {}
    table.insert(running[worker], id)
  end
end
local out = {}
for i = 1, #seen, 2 do
  local worker = seen[i]
  local counts = redis.call('HMGET', tag .. ':wc:' .. esc(worker), 'started', 'succeeded', 'failed')
  out[#out + 1] = {worker, seen[i + 1], counts, running[worker] or {}}
end
return out
