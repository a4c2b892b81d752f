-- create: store a new queued task, unless the id exists.
-- KEYS: 1 task hash, 2 history list, 3 queued index, 4 deadlines, 5 sequence,
--       6 its group's hash, 7 its group's members (both unused without a group),
--       8 its info hash, 9 task names, 10 its name's queued index (unused without a
--       name), 11 its parent's children (unused without a parent): see _info.lua
-- ARGV: 1 task id, 2 task id as JSON, 3 deadline (JSON number text), 4 maxAttempts,
--       5 exist_ok (1/0), 6 changes channel, 7 heartbeat timeout ms ('' for none),
--       8 retry a stalled attempt (1/0), 9 group id as JSON ('' for none),
--       10 created (ms text), then the publisher's info, '' where not given (_info.lua),
--       11 the task's name, 12 queue, 13 parent id, 14 root id, 15 args, 16 kwargs,
--       17 how long a parent's list of children is kept (ms, '' for ever)
-- Returns: {'created'} | {'exists', taskJSON} | {'!conflict'} | {'!damaged', why}

local existing = load_full(KEYS[1], KEYS[2])
if existing then
  local why = damage(existing, KEYS[2])
  if why then
    return {'!damaged', why}
  end
  if ARGV[5] == '1' then
    return {'exists', render_task(existing, KEYS[2], true)}
  end
  return {'!conflict'}
end
-- A history left behind by a record that was evicted must not prefix the new one.
redis.call('DEL', KEYS[2])
local seq = redis.call('INCR', KEYS[5])
redis.call('HSET', KEYS[1], 'id', ARGV[2], 'st', 'queued', 'exp', ARGV[3], 'att', '0',
  'max', ARGV[4], 'prog', '0', 'ver', '0', 'seq', tostring(seq))
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[1], 'hbt', ARGV[7], 'rdl', ARGV[8])
end
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'gk', KEYS[6], 'gid', ARGV[9])
  redis.call('HSETNX', KEYS[6], 'id', ARGV[9])
  redis.call('HSETNX', KEYS[6], 'mk', KEYS[7])
  redis.call('HINCRBY', KEYS[6], 'members', 1)
  redis.call('HINCRBY', KEYS[6], 'queued', 1)
  redis.call('ZADD', KEYS[7], seq, ARGV[1])
end
info_created(KEYS, ARGV, seq)
redis.call('ZADD', KEYS[3], seq, ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
announce(ARGV[6], {id = ARGV[2], st = 'queued', prog = 0, ver = 0,
  gid = ARGV[9] ~= '' and ARGV[9] or nil})
return {'created'}
