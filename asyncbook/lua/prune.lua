-- prune: drop ended tasks past their retention from the listing indexes.
-- KEYS: 1 ended, 2 all index, 3..5 terminal state indexes (succeeded, failed, expired)
-- ARGV: 1 retention ms, 2 how many at most
-- Returns: how many tasks were dropped

local now = redis.call('TIME')
local cutoff = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
  redis.call('ZREM', KEYS[1], id)
end
return #ids
