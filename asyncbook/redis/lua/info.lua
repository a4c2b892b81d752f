-- info: a task's console info (_info.lua).
-- KEYS: 1 task hash, 2 its companion hash, 3 its children (sorted set), 4 its kept
--       message (only its first bytes are read)
-- Returns: false when the task does not exist, else {fields, long, children, kept}: fields the
--          task hash's c n q pid rid gid w s e x att st ro ra rby rwhy; long the
--          companion's a k tb;
--          children the first children_listed ids the task started; kept 1 when its
--          message is kept (a retry can send it again), else 0 (none, or one left out)

-- ARGV: InfoArgs (redis/_script_args.py)
local children_listed = tonumber(ARGV[1])

local fields = redis.call('HMGET', KEYS[1], 'c', 'n', 'q', 'pid', 'rid', 'gid', 'w', 's', 'e',
  'x', 'att', 'st', 'ro', 'ra', 'rby', 'rwhy')
if not fields[12] then
  return false
end
local long = redis.call('HMGET', KEYS[2], 'a', 'k', 'tb')
local children = redis.call('ZRANGE', KEYS[3], 0, children_listed - 1)
-- Kept: the key holds a message, not the note of one left out (_kept.omission: it starts
-- OMITTED, which no kept message does); only its first bytes are read.
local OMITTED = '{"v": 1, "omitted'
local head = redis.call('GETRANGE', KEYS[4], 0, #OMITTED - 1)
local kept = (head ~= '' and head ~= OMITTED) and 1 or 0
return {fields, long, children, kept}
