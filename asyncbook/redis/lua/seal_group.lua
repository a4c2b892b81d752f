-- seal_group: declare how many members a group has; notify at once if they all ended.
-- KEYS: 1 the group's hash, 2 its members (sorted set), 3 group notifications (stream)
-- ARGV: 1 group id as JSON, 2 total, 3 now (JSON number text), 4 retention ms ('' keeps)
-- Returns: the group's hash as a flat list

redis.call('HSETNX', KEYS[1], 'id', ARGV[1])
redis.call('HSETNX', KEYS[1], 'mk', KEYS[2])
redis.call('HSET', KEYS[1], 'total', ARGV[2])
group_maybe_ended(KEYS[1], KEYS[2], KEYS[3], ARGV[3], tonumber(ARGV[4]))
return redis.call('HGETALL', KEYS[1])
