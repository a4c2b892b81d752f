-- create_task(KEYS, a): store a new queued task, unless the id exists (create.lua's
-- KEYS 1-10; a: create.lua's ARGV by name, CreateArgs in redis/_script_args.py). Shared by
-- create.lua and resend.lua.
-- Returns: {'created'} | {'exists', taskJSON} | {'!conflict'} | {'!damaged', why}

-- next_seq(key): the next creation order, as integer text. On one shard (the key ends in
-- seq) a counter; on shard k of S (seq:<k>:<S>) the smallest number above the
-- shard's last one and the server's clock in microseconds that is k modulo S: unique
-- across the shards and in time order, so listings merge the shards by it. Text, since
-- Lua would write a number past 10^14 in exponent notation.
local function next_seq(key)
  local k, total = string.match(key, ':seq:(%d+):(%d+)$')
  if not k then
    return tostring(redis.call('INCR', key))
  end
  k, total = tonumber(k), tonumber(total)
  local clock = redis.call('TIME')
  local floor = math.max(tonumber(redis.call('GET', key) or '0') + 1,
    tonumber(clock[1]) * 1000000 + tonumber(clock[2]))
  local seq = string.format('%.0f', floor + (k - floor) % total)
  redis.call('SET', key, seq)
  return seq
end

local function create_task(KEYS, a)
  -- EXISTS first: a new id's record read (17 fields, all absent) costs Redis 19 k more.
  local existing = redis.call('EXISTS', KEYS[1]) == 1 and load_full(KEYS[1], KEYS[2])
  if existing then
    local why = damage(existing, KEYS[2])
    if why then
      return {'!damaged', why}
    end
    if a.exist_ok == '1' then
      return {'exists', render_task(existing, KEYS[2], true)}
    end
    return {'!conflict'}
  end
  -- A history left behind by a record that was evicted must not prefix the new one.
  redis.call('DEL', KEYS[2])
  local seq = next_seq(KEYS[5])
  local fields = {'id', a.task_id_json, 'st', 'queued', 'exp', a.deadline, 'att', '0',
    'max', a.max_attempts, 'prog', '0', 'ver', '0', 'seq', seq}
  if a.heartbeat_timeout_ms ~= '' then
    fields[#fields + 1] = 'hbt'; fields[#fields + 1] = a.heartbeat_timeout_ms
    fields[#fields + 1] = 'rdl'; fields[#fields + 1] = a.retry_on_stall
  end
  if a.group_id_json ~= '' then
    fields[#fields + 1] = 'gk'; fields[#fields + 1] = KEYS[6]
    fields[#fields + 1] = 'gid'; fields[#fields + 1] = a.group_id_json
    redis.call('HSETNX', KEYS[6], 'id', a.group_id_json)
    redis.call('HSETNX', KEYS[6], 'mk', KEYS[7])
    redis.call('HINCRBY', KEYS[6], 'members', '1')
    redis.call('HINCRBY', KEYS[6], 'queued', '1')
    redis.call('ZADD', KEYS[7], seq, a.task_id)
  end
  info_created(KEYS, a.task_id, seq, {c = a.created_ms, n = a.name, q = a.queue,
    pid = a.parent_id, rid = a.root_id, tc = a.trace, a = a.args, k = a.kwargs}, a.children_keep_ms, fields)
  for _, extra in ipairs(a.extra or {}) do
    fields[#fields + 1] = extra
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  index_change(KEYS[3], {n = a.name ~= '' and a.name or nil}, a.task_id,
    {q = seq, t = 'queued', c = a.created_ms})
  redis.call('ZADD', KEYS[4], a.deadline, a.task_id)
  if a.message ~= '' then
    local keep = tonumber(a.message_keep_ms)
    if keep then
      redis.call('SET', KEYS[10], a.message, 'PX', keep)
    else
      redis.call('SET', KEYS[10], a.message)
    end
  end
  announce(a.changes_channel, {id = a.task_id_json, st = 'queued', prog = 0, ver = 0,
    ver_text = '0', prog_text = '0', gid = a.group_id_json ~= '' and a.group_id_json or nil})
  return {'created'}
end
