-- apply_event(KEYS, ARGV): one event on one task, as apply.lua documents its KEYS and
-- ARGV; shared by apply.lua and scripts that apply several events in one call. With
-- ARGV[15] = 'c' (compact) an answer carries the task's state and error instead of its
-- JSON: {reason, flags, state, errorJSON or ''}.

local function apply_event(KEYS, ARGV)
  local with_history = ARGV[15] == '1'
  local compact = ARGV[15] == 'c'
  local t = with_history and load_full(KEYS[1], KEYS[2]) or load_task(KEYS[1])
  if not t then
    return {'!unknown'}
  end
  local why = damage(t, KEYS[2])
  if why then
    return {'!damaged', why}
  end
  if ARGV[2] == '1' and redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('HINCRBY', KEYS[12], 'duplicate-callback', 1)
    if compact then
      return {'duplicate-callback', '0101', t.st, t.err or ''}
    end
    return {'duplicate-callback', '0101', render_task(t, KEYS[2], with_history)}
  end
  if ARGV[3] ~= '1' then
    return {'!shape'}
  end

  local kind, at_text, event_json = ARGV[4], ARGV[5], ARGV[6]
  if kind == 'deadline' then
    kind, at_text = 'expire', t.exp
  end
  local at = tonumber(at_text)
  if not at or at < 0 then
    return {'!invalid', 'event.atMs', 'event.atMs must be a non-negative number'}
  end
  if ARGV[16] == '1' then
    -- The sweep's stall fail (its atMs is the sweep's now): only if still overdue then.
    local stall_at = redis.call('ZSCORE', KEYS[13], ARGV[1])
    if t.st ~= 'running' or not stall_at or tonumber(stall_at) > at then
      return {'!fresh'}
    end
  end

  local reason, changed, duplicate, notify = nil, false, false, false
  local old_state, old_prog, entry = t.st, t.prog, nil  -- entry: the recorded event's JSON

  local function unchanged(why, dup)
    reason, duplicate = why, dup or false
  end
  local function advance(json, patch)
    t.ver = t.ver + 1
    entry = json
    if t.events then t.events[t.ver] = json end
    for field, value in pairs(patch) do
      t[field] = value
    end
    changed = true
  end
  local function expire_task()
    if TERMINAL[t.st] then
      if t.st == 'expired' then unchanged('duplicate-expire', true) else unchanged('terminal-conflict') end
      return
    end
    advance('{"type":"expire","atMs":' .. t.exp .. '}', {st = 'expired'})
    reason, notify = 'expired', true
  end

  if TERMINAL[t.st] then
    if kind == 'succeed' and t.st == 'succeeded' and result_of(t, KEYS[2]).resultHash == ARGV[9] then
      unchanged('duplicate-result', true)
    elseif kind == 'expire' and t.st == 'expired' then
      unchanged('duplicate-expire', true)
    elseif kind == 'cancel' and t.st == 'cancelled' then
      unchanged('duplicate-cancel', true)
    else
      unchanged('terminal-conflict')
    end
  elseif kind == 'expire' or at >= tonumber(t.exp) then
    expire_task()
  elseif kind == 'cancel' then
    advance(event_json, {st = 'cancelled', err = ARGV[12]})
    reason, notify = 'cancelled', true
  elseif kind == 'start' then
    if t.st == 'running' then
      unchanged('already-running', true)
    elseif t.st ~= 'queued' or t.att >= t.max then
      unchanged('not-startable')
    else
      advance(event_json, {st = 'running', att = t.att + 1, prog = 0})
      reason = 'started'
    end
  elseif kind == 'progress' then
    if t.st ~= 'running' then
      unchanged('not-running')
    else
      local p = tonumber(ARGV[7])
      if not p or p < 0 or p ~= math.floor(p) then
        return {'!invalid', 'progress', 'progress must be an integer >= 0'}
      end
      if p > 100 then
        return {'!invalid', 'progress', 'progress must not exceed 100'}
      end
      if p < t.prog then
        unchanged('stale-progress')
      elseif p == t.prog then
        unchanged('duplicate-progress', true)
      else
        advance(event_json, {prog = p})
        reason = 'progress'
      end
    end
  elseif t.st ~= 'running' then
    unchanged('not-running')
  elseif kind == 'succeed' then
    if ARGV[10] == '1' then
      return {'!invalid', 'resultRef', 'resultRef must not be empty'}
    end
    if ARGV[11] == '1' then
      return {'!invalid', 'resultHash', 'resultHash must not be empty'}
    end
    advance(event_json, {st = 'succeeded', prog = 100})
    reason, notify = 'succeeded', true
  elseif ARGV[8] == '1' and t.att < t.max then
    advance(event_json, {st = 'queued', prog = 0, err = ARGV[12]})
    reason = 'requeued'
  else
    advance(event_json, {st = 'failed', err = ARGV[12]})
    reason, notify = 'failed', true
  end

  local retention = tonumber(ARGV[13])
  if changed then
    local fields = {'st', t.st, 'att', tostring(t.att), 'prog', tostring(t.prog), 'ver', tostring(t.ver)}
    if t.err then fields[#fields + 1] = 'err'; fields[#fields + 1] = t.err end
    redis.call('HSET', KEYS[1], unpack(fields))
    redis.call('RPUSH', KEYS[2], entry)
    if t.st ~= old_state then
      redis.call('ZREM', KEYS[5 + STATE_SLOT[old_state]], ARGV[1])
      redis.call('ZADD', KEYS[5 + STATE_SLOT[t.st]], t.seq, ARGV[1])
    end
    if TERMINAL[t.st] then
      redis.call('ZREM', KEYS[4], ARGV[1])
      if retention then
        redis.call('PEXPIRE', KEYS[1], retention)
        redis.call('PEXPIRE', KEYS[2], retention)
      end
    end
    announce(ARGV[14], t)
    if kind == 'progress' then
      redis.call('HSET', KEYS[1], 'cur', ARGV[17])
    end
  end
  if t.gk and changed then
    if t.st ~= old_state then
      redis.call('HINCRBY', t.gk, old_state, -1)
      redis.call('HINCRBY', t.gk, t.st, 1)
    end
    if t.prog ~= old_prog then
      redis.call('HINCRBY', t.gk, 'prog', t.prog - old_prog)
    end
    if TERMINAL[t.st] then
      group_maybe_ended(t.gk, KEYS[14], at_text, retention)
    end
  end
  if t.hbt then
    -- A change, a start or a progress report is also a heartbeat (no version bump).
    if t.st == 'running' and (changed or kind == 'start' or kind == 'progress') then
      redis.call('ZADD', KEYS[13], server_ms() + t.hbt, ARGV[1])
    elseif t.st ~= 'running' and old_state == 'running' then
      redis.call('ZREM', KEYS[13], ARGV[1])
    end
  end
  if ARGV[2] == '1' then
    if retention then
      -- Kept until the task's record goes: it ends by its deadline at the latest, which
      -- is (exp - at) from now on the task's own clock.
      redis.call('SET', KEYS[3], '1', 'PX', retention + math.max(0, math.ceil(tonumber(t.exp) - at)))
    else
      redis.call('SET', KEYS[3], '1')
    end
  end
  if notify then
    local fields = {'taskId', ARGV[1], 'state', t.st, 'atMs', at_text}
    if retention then
      local cut = outbox_cut(KEYS[5], math.max(server_ms() - retention, 0))
      redis.call('XADD', KEYS[5], 'MINID', cut, '*', unpack(fields))
    else
      redis.call('XADD', KEYS[5], '*', unpack(fields))
    end
  end
  redis.call('HINCRBY', KEYS[12], reason, 1)
  local flags = (changed and '1' or '0') .. (duplicate and '1' or '0') .. (notify and '1' or '0') .. '0'
  if compact then
    return {reason, flags, t.st, t.err or ''}
  end
  return {reason, flags, render_task(t, KEYS[2], with_history)}
end

-- apply_events(KEYS, ARGV, at): the events of a script that RedisBook.apply_in_script
-- calls (KEYS: task hash, history, the caller's key, apply.lua's KEYS 4..14, then one
-- callback marker per event; ARGV[at]: the number of events, then apply.lua's 17 ARGV
-- slots per event), each applied by apply_event, in order. Returns their compact answers,
-- or nil when the book does not hold the task (then nothing was written).
local function apply_events(KEYS, ARGV, at)
  local answers = {}
  local keys = {KEYS[1], KEYS[2], ''}
  for i = 4, 14 do
    keys[i] = KEYS[i]
  end
  for n = 1, tonumber(ARGV[at]) do
    keys[3] = KEYS[14 + n]
    local args = {}
    local first = at + (n - 1) * 17
    for i = 1, 17 do
      args[i] = ARGV[first + i]
    end
    args[15] = 'c'
    answers[n] = apply_event(keys, args)
    if answers[n][1] == '!unknown' then
      return nil  -- the first event met no task, and wrote nothing
    end
  end
  return answers
end
