-- create: store a new queued task, unless the id exists.
-- KEYS: 1 task hash, 2 history list, 3 queued index, 4 deadlines, 5 sequence,
--       6 its group's hash, 7 its group's members (both unused without a group),
--       8 its info hash, 9 task names, 10 its name's queued index (unused without a
--       name), 11 its parent's children (unused without a parent): see _info.lua
-- Returns: {'created'} | {'exists', taskJSON} | {'!conflict'} | {'!damaged', why}

-- ARGV: CreateArgs (_scripts.py)
local task_id = ARGV[1]
local task_id_json = ARGV[2]
local deadline = ARGV[3]              -- JSON number text
local max_attempts = ARGV[4]
local exist_ok = ARGV[5]              -- 1/0
local changes_channel = ARGV[6]
local heartbeat_timeout_ms = ARGV[7]  -- '' for none
local retry_on_stall = ARGV[8]        -- retry a stalled attempt (1/0)
local group_id_json = ARGV[9]         -- '' for none
local created_ms = ARGV[10]           -- ms text; then the publisher's info, '' where not given
local name = ARGV[11]
local queue = ARGV[12]
local parent_id = ARGV[13]
local root_id = ARGV[14]
local args = ARGV[15]
local kwargs = ARGV[16]
local children_keep_ms = ARGV[17]     -- how long a parent's list of children is kept ('' ever)

local existing = load_full(KEYS[1], KEYS[2])
if existing then
  local why = damage(existing, KEYS[2])
  if why then
    return {'!damaged', why}
  end
  if exist_ok == '1' then
    return {'exists', render_task(existing, KEYS[2], true)}
  end
  return {'!conflict'}
end
-- A history left behind by a record that was evicted must not prefix the new one.
redis.call('DEL', KEYS[2])
local seq = redis.call('INCR', KEYS[5])
local fields = {'id', task_id_json, 'st', 'queued', 'exp', deadline, 'att', '0',
  'max', max_attempts, 'prog', '0', 'ver', '0', 'seq', tostring(seq)}
if heartbeat_timeout_ms ~= '' then
  fields[#fields + 1] = 'hbt'; fields[#fields + 1] = heartbeat_timeout_ms
  fields[#fields + 1] = 'rdl'; fields[#fields + 1] = retry_on_stall
end
if group_id_json ~= '' then
  fields[#fields + 1] = 'gk'; fields[#fields + 1] = KEYS[6]
  fields[#fields + 1] = 'gid'; fields[#fields + 1] = group_id_json
  redis.call('HSETNX', KEYS[6], 'id', group_id_json)
  redis.call('HSETNX', KEYS[6], 'mk', KEYS[7])
  redis.call('HINCRBY', KEYS[6], 'members', '1')
  redis.call('HINCRBY', KEYS[6], 'queued', '1')
  redis.call('ZADD', KEYS[7], seq, task_id)
end
info_created(KEYS, task_id, seq, {c = created_ms, n = name, q = queue, pid = parent_id,
  rid = root_id, a = args, k = kwargs}, children_keep_ms, fields)
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('ZADD', KEYS[3], seq, task_id)
redis.call('ZADD', KEYS[4], deadline, task_id)
announce(changes_channel, {id = task_id_json, st = 'queued', prog = 0, ver = 0, ver_text = '0',
  prog_text = '0', gid = group_id_json ~= '' and group_id_json or nil})
return {'created'}
