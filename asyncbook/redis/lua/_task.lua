-- Shared helpers, prepended to every script that reads or writes a task.
-- A task is two keys. Its hash holds short fields only, so Redis keeps it compact
-- (listpack): id (JSON string), st, exp (deadline, JSON number text), att, max, prog,
-- ver, seq (creation order), err (JSON string, when set), and for the extensions hbt
-- (heartbeat timeout ms), rdl (1: a stalled attempt is retried), cur (the last progress
-- cursor, a checkpoint), gk and gid (its group's hash key and id as JSON, in a group),
-- the console's info fields (_info.lua), and the markers of callback ids derived from
-- its id (Shard.marker). Its history list holds, at index N-1, the JSON of the
-- event that produced version N. resultRef and resultHash
-- are not stored twice: a succeeded task's last event is its succeed event.

-- A record of names in ARGV from ARGV[first] on (names: its fields in order, as the
-- record of redis/_script_args.py names them): {name = value, ...}.
local function fields_at(ARGV, first, names)
  local out = {}
  for i, name in ipairs(names) do
    out[name] = ARGV[first + i - 1]
  end
  return out
end

local TERMINAL = {succeeded = true, failed = true, expired = true, cancelled = true}
local STATE_SLOT = {queued = 1, running = 2, succeeded = 3, failed = 4, expired = 5, cancelled = 6}

local function load_task(key)
  local f = redis.call('HMGET', key, 'id', 'st', 'exp', 'att', 'max', 'prog', 'ver', 'seq', 'err',
    'hbt', 'rdl', 'gk', 'gid', 'n', 's', 'w', 'i')
  if not f[1] then
    return nil
  end
  for i = 2, 8 do
    if not f[i] then
      return {id = f[1], damaged = 'its hash lacks fields'}
    end
  end
  return {
    id = f[1], st = f[2], exp = f[3], att = tonumber(f[4]), max = tonumber(f[5]),
    prog = tonumber(f[6]), ver = tonumber(f[7]), seq = f[8], err = f[9],
    hbt = tonumber(f[10]), rdl = f[11], gk = f[12], gid = f[13], n = f[14], s = f[15], w = f[16],
    i = f[17],
  }
end

-- Why a loaded record cannot be used, or nil: a hash without its fields, or a history
-- that lost entries (eviction, a stray DEL). Scripts answer {'!damaged', why} for it
-- instead of failing on a decode, so one damaged task never fails a batch.
local function damage(t, history_key)
  if t.damaged then
    return t.damaged
  end
  if t.ver > 0 then
    local held = redis.call('LLEN', history_key)
    if held ~= t.ver then
      return 'its history holds ' .. held .. ' of ' .. t.ver .. ' entries'
    end
  end
  return nil
end

-- t, or nil and the answer for a task that does not exist ({'!unknown'}) or whose record
-- is damaged ({'!damaged', why}).
local function usable(t, history_key)
  local why = t and damage(t, history_key)
  if not t or why then
    return nil, t and {'!damaged', why} or {'!unknown'}
  end
  return t
end

-- The task with every event of its history in t.events.
local function load_full(key, history_key)
  local t = load_task(key)
  if t and t.damaged then
    return t
  elseif t and t.ver > 0 then
    t.events = redis.call('LRANGE', history_key, 0, -1)
  elseif t then
    t.events = {}
  end
  return t
end

-- The decoded succeed event of a succeeded task (its last history entry): from t.events
-- when loaded, else with one LINDEX.
local function result_of(t, history_key)
  local last = t.events and t.events[t.ver] or redis.call('LINDEX', history_key, -1)
  return cjson.decode(last)
end

local function entries_json(events, first_version)
  local out = {}
  for i, event in ipairs(events) do
    out[i] = '{"version":' .. (first_version + i - 1) .. ',"event":' .. event .. '}'
  end
  return out
end

local function render_task(t, history_key, with_history)
  local parts = {
    '{"id":', t.id, ',"state":"', t.st, '","expiresAtMs":', t.exp,
    ',"attempts":', tostring(t.att), ',"maxAttempts":', tostring(t.max),
    ',"progress":', tostring(t.prog), ',"version":', tostring(t.ver),
  }
  if t.st == 'succeeded' then
    local result = result_of(t, history_key)
    parts[#parts + 1] = ',"resultRef":' .. cjson.encode(result.resultRef)
    parts[#parts + 1] = ',"resultHash":' .. cjson.encode(result.resultHash)
  end
  if t.err then parts[#parts + 1] = ',"error":'; parts[#parts + 1] = t.err end
  parts[#parts + 1] = ',"history":['
  if with_history and t.ver > 0 then
    local events = t.events or redis.call('LRANGE', history_key, 0, -1)
    parts[#parts + 1] = table.concat(entries_json(events, 1), ',')
  end
  parts[#parts + 1] = ']}'
  return table.concat(parts)
end

-- The task t as parts, appended to reply (the client renders them, task_of_parts in
-- _replies.py, so the script builds no JSON): its id (JSON), state, deadline (JSON
-- number text), attempts, max attempts, progress, version (integers), error (JSON, or
-- ''), its succeed event's JSON when it succeeded and no history follows (else ''),
-- then with_history its history's events in order.
local function task_parts(reply, t, history_key, with_history)
  local n = #reply
  reply[n + 1], reply[n + 2], reply[n + 3] = t.id, t.st, t.exp
  reply[n + 4], reply[n + 5], reply[n + 6], reply[n + 7] = t.att, t.max, t.prog, t.ver
  reply[n + 8], reply[n + 9] = t.err or '', ''
  if with_history and t.ver > 0 then
    local events = t.events or redis.call('LRANGE', history_key, 0, -1)
    for i = 1, #events do
      reply[n + 9 + i] = events[i]
    end
  elseif t.st == 'succeeded' then
    reply[n + 9] = t.events and t.events[t.ver] or redis.call('LINDEX', history_key, -1)
  end
  return reply
end

local function server_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- Where the outbox may be trimmed to (a stream id for XADD or XTRIM MINID): entries
-- older than oldest_ms go, but never one a consumer group has not read or not
-- acknowledged yet (exists: the caller knows the stream exists).
local function outbox_cut(outbox, oldest_ms, exists)
  local cut_ms, cut_seq = oldest_ms, 0
  if exists or redis.call('EXISTS', outbox) == 1 then
    for _, group in ipairs(redis.call('XINFO', 'GROUPS', outbox)) do
      local info = {}
      for i = 1, #group, 2 do
        info[group[i]] = group[i + 1]
      end
      local keep
      if tonumber(info['pending']) > 0 then
        keep = redis.call('XPENDING', outbox, info['name'])[2]
      else
        keep = info['last-delivered-id']
      end
      local ms, seq = string.match(keep, '^(%d+)%-(%d+)$')
      ms, seq = tonumber(ms), tonumber(seq)
      if tonumber(info['pending']) == 0 then
        seq = seq + 1  -- the last delivered entry was acknowledged; what follows is unread
      end
      if ms < cut_ms or (ms == cut_ms and seq < cut_seq) then
        cut_ms, cut_seq = ms, seq
      end
    end
  end
  return string.format('%.0f-%.0f', cut_ms, cut_seq)
end

-- A group's hash: id (JSON), total (once declared), members, a count per state, prog (the
-- sum of its members' progress), mk (its members' sorted set), notified, sh (sealed in a
-- namespace of several shards: its home shard counts only its own members, so the
-- client's group check, _groups.py, writes the notification, never a script). A
-- member's hash keeps its key (gk) and id (gid); scripts get both keys from KEYS (see
-- _info.lua).
local GROUP_ENDS = {'succeeded', 'failed', 'expired', 'cancelled'}

-- When a declared group's last member has ended: one group notification, then retention.
local function group_maybe_ended(gk, members, stream, at_text, retention)
  local g = redis.call('HMGET', gk, 'id', 'total', 'notified',
    'succeeded', 'failed', 'expired', 'cancelled', 'sh')
  local total = tonumber(g[2])
  if not g[1] or not total or g[3] or g[8] then
    return
  end
  local ended = 0
  for i = 4, 7 do
    ended = ended + (tonumber(g[i]) or 0)
  end
  if ended < total then
    return
  end
  redis.call('HSET', gk, 'notified', '1')
  local fields = {'groupId', g[1], 'atMs', at_text, 'total', tostring(total)}
  for i, state in ipairs(GROUP_ENDS) do
    fields[#fields + 1] = state
    fields[#fields + 1] = g[i + 3] or '0'
  end
  if retention then
    local cut = outbox_cut(stream, math.max(server_ms() - retention, 0))
    redis.call('XADD', stream, 'MINID', cut, '*', unpack(fields))
    redis.call('PEXPIRE', gk, retention)
    redis.call('PEXPIRE', members, retention)
  else
    redis.call('XADD', stream, '*', unpack(fields))
  end
end

-- A change on the changes channel; a cancel also on <channel>:cancelled, which workers
-- follow (they need nothing else, and every other change would wake them).
local function announce(channel, t)
  local group = t.gid and (',"groupId":' .. t.gid) or ''
  local message = '{"taskId":' .. t.id .. ',"version":' .. (t.ver_text or tostring(t.ver))
    .. ',"state":"' .. t.st .. '","progress":' .. (t.prog_text or tostring(t.prog)) .. group .. '}'
  redis.call('PUBLISH', channel, message)
  if t.st == 'cancelled' then
    redis.call('PUBLISH', channel .. ':cancelled', message)
  end
end

-- One audit entry (a: AuditArgs of redis/_script_args.py as a record; outcome: the
-- book's answer; retried_as: a resend's new task, or nil)
-- appended to the namespace's log (a stream capped near log_cap entries; the entry's id
-- is the server's clock, its field e the entry without atMs) and to the task's own list
-- (its latest task_cap entries, kept as long as the task's record is).
local function write_audit(task_key, list_key, log_key, task_id, a, outcome, retried_as)
  local reason = a.reason_given == '1' and cjson.encode(a.reason) or 'null'
  local body = '"actor":' .. cjson.encode(a.actor) .. ',"action":' .. cjson.encode(a.action)
    .. ',"taskId":' .. cjson.encode(task_id) .. ',"reason":' .. reason
    .. ',"outcome":' .. cjson.encode(outcome)
  if retried_as then  -- a resend's entry: the new task's id
    body = body .. ',"retriedAs":' .. cjson.encode(retried_as)
  end
  body = body .. '}'
  local id = redis.call('XADD', log_key, 'MAXLEN', '~', a.log_cap, '*', 'e', '{' .. body)
  redis.call('RPUSH', list_key, '{"atMs":' .. string.match(id, '^(%d+)') .. ',' .. body)
  redis.call('LTRIM', list_key, -tonumber(a.task_cap), -1)
  local ttl = redis.call('PTTL', task_key)
  if ttl > 0 then
    redis.call('PEXPIRE', list_key, ttl)
  else
    redis.call('PERSIST', list_key)
  end
end
