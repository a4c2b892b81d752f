-- seal_group: declare how many members a group has; notify at once if they all ended.
-- KEYS: 1 the group's hash, 2 its members (sorted set), 3 group notifications (stream)
-- Returns: the group's hash as a flat list

-- ARGV: SealGroupArgs (redis/_script_args.py)
local group_id_json = ARGV[1]
local total = ARGV[2]
local now_ms = ARGV[3]        -- JSON number text
local retention_ms = ARGV[4]  -- '' keeps
local sharded = ARGV[5]       -- 1/0: the group check (_groups.py) notifies, not the scripts

redis.call('HSETNX', KEYS[1], 'id', group_id_json)
redis.call('HSETNX', KEYS[1], 'mk', KEYS[2])
redis.call('HSET', KEYS[1], 'total', total)
if sharded == '1' then
  redis.call('HSET', KEYS[1], 'sh', '1')
end
group_maybe_ended(KEYS[1], KEYS[2], KEYS[3], now_ms, tonumber(retention_ms))
return redis.call('HGETALL', KEYS[1])
