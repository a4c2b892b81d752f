-- apply_event(KEYS, ARGV, c): one event on one task, as apply.lua documents its KEYS and
-- ARGV, c its info block (info_block, _info.lua); shared by apply.lua and scripts that
-- apply several events in one call. With
-- ARGV[15] = 'c' (compact) an answer carries the task's state and error instead of its
-- JSON: {reason, flags, state, errorJSON or ''}.

-- A task that just ended: off the deadlines, and its record kept for retention ms.
local function ended(KEYS, task_id, retention)
  redis.call('ZREM', KEYS[4], task_id)
  if retention then
    redis.call('PEXPIRE', KEYS[1], retention)
    redis.call('PEXPIRE', KEYS[2], retention)
  end
end

-- One notification in the outbox (trimmed to retention, see outbox_cut).
local function notify_outbox(outbox, task_id, st, at_text, retention)
  local fields = {'taskId', task_id, 'state', st, 'atMs', at_text}
  if retention then
    local cut = outbox_cut(outbox, math.max(server_ms() - retention, 0))
    redis.call('XADD', outbox, 'MINID', cut, '*', unpack(fields))
  else
    redis.call('XADD', outbox, '*', unpack(fields))
  end
end

-- What info_missing needs of one event (type, atMs, the worker a start names).
local function event_facts(A)
  return {A[4], tonumber(A[5]), A[4] == 'start' and worker_of(A[6]) or nil}
end

local function apply_event(KEYS, ARGV, c)
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
  local missing = info_missing(c, t, {event_facts(ARGV)})
  if missing then
    return missing
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
  local ended_at = t.st == 'expired' and t.exp or at_text
  local worker = reason == 'started' and worker_of(entry) or nil
  if changed then
    local fields = {'st', t.st, 'att', tostring(t.att), 'prog', tostring(t.prog), 'ver', tostring(t.ver)}
    if t.err then fields[#fields + 1] = 'err'; fields[#fields + 1] = t.err end
    if reason == 'started' then started_fields(fields, at_text, worker) end
    if TERMINAL[t.st] then fields[#fields + 1] = 'e'; fields[#fields + 1] = ended_at end
    redis.call('HSET', KEYS[1], unpack(fields))
    redis.call('RPUSH', KEYS[2], entry)
    if t.st ~= old_state then
      redis.call('ZREM', KEYS[5 + STATE_SLOT[old_state]], ARGV[1])
      redis.call('ZADD', KEYS[5 + STATE_SLOT[t.st]], t.seq, ARGV[1])
    end
    info_moved(c, t, old_state, t.st, ARGV[1])
    if reason == 'started' then
      info_started(c, t, ARGV[1], at_text, worker)
    elseif kind == 'fail' then
      info_failure(c, KEYS[1], t, ARGV[18])
    end
    if TERMINAL[t.st] then
      ended(KEYS, ARGV[1], retention)
      info_ended(c, t, old_state, ended_at, retention)
    end
    announce(ARGV[14], t)
    if kind == 'progress' then
      redis.call('HSET', KEYS[1], 'cur', ARGV[17])
    end
  end
  if t.gk and changed then
    if t.st ~= old_state then
      redis.call('HINCRBY', c.group, old_state, -1)
      redis.call('HINCRBY', c.group, t.st, 1)
    end
    if t.prog ~= old_prog then
      redis.call('HINCRBY', c.group, 'prog', t.prog - old_prog)
    end
    if TERMINAL[t.st] then
      group_maybe_ended(c.group, c.members, KEYS[14], at_text, retention)
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
    notify_outbox(KEYS[5], ARGV[1], t.st, at_text, retention)
  end
  redis.call('HINCRBY', KEYS[12], reason, 1)
  local flags = (changed and '1' or '0') .. (duplicate and '1' or '0') .. (notify and '1' or '0') .. '0'
  if compact then
    return {reason, flags, t.st, t.err or ''}
  end
  return {reason, flags, render_task(t, KEYS[2], with_history)}
end

-- apply_events(KEYS, ARGV, at): the events of a script that RedisBook.apply_in_script
-- calls (KEYS: task hash, history, the caller's key, apply.lua's KEYS 4..14, one
-- callback marker per event, then the info block; ARGV[at]: the number of events,
-- apply.lua's 18 ARGV slots per event, then the info block's), each applied by
-- apply_event, in order. Returns their compact answers, or nil when the book does not
-- hold the task, or nil and the '!facts' answer when the block lacks facts (then
-- nothing was written).
-- An execution's start and end, applied together: the same writes as apply_event's for
-- each in turn, less those the end undoes (the running index, the stall clock) and with
-- one HSET and one RPUSH. Only for the common case (a queued task outside a group, both
-- callbacks new, both events well-formed and before the deadline); nil otherwise, having
-- written nothing, and apply_event applies them one by one.
local function start_and_end(KEYS, A, B, c, t)
  if A[4] ~= 'start' or (B[4] ~= 'succeed' and B[4] ~= 'fail') then
    return nil
  end
  local given = A[2] == '1' and B[2] == '1' and A[3] == '1' and B[3] == '1'
  if not given or A[16] ~= '0' or B[16] ~= '0' then
    return nil
  end
  if B[4] == 'succeed' and (B[10] == '1' or B[11] == '1') then
    return nil
  end
  if not t or t.damaged or t.gk or t.st ~= 'queued' or t.att >= t.max then
    return nil
  end
  local exp, at1, at2 = tonumber(t.exp), tonumber(A[5]), tonumber(B[5])
  if not at1 or not at2 or at1 < 0 or at2 < 0 or at1 >= exp or at2 >= exp then
    return nil
  end
  if redis.call('EXISTS', A.marker, B.marker) > 0 or damage(t, KEYS[2]) then
    return nil
  end
  local start_err = t.err
  local started = {id = t.id, st = 'running', prog = 0, ver = t.ver + 1}
  t.att, t.ver = t.att + 1, t.ver + 2
  local reason, notify = nil, false
  if B[4] == 'succeed' then
    t.st, t.prog, reason, notify = 'succeeded', 100, 'succeeded', true
  elseif B[8] == '1' and t.att < t.max then
    t.st, t.prog, t.err, reason = 'queued', 0, B[12], 'requeued'
  else
    t.st, t.prog, t.err, reason, notify = 'failed', 0, B[12], 'failed', true
  end
  local worker = worker_of(A[6])
  local fields = {'st', t.st, 'att', tostring(t.att), 'prog', tostring(t.prog), 'ver', tostring(t.ver)}
  if t.err then fields[#fields + 1] = 'err'; fields[#fields + 1] = t.err end
  started_fields(fields, A[5], worker)
  if TERMINAL[t.st] then fields[#fields + 1] = 'e'; fields[#fields + 1] = B[5] end
  redis.call('HSET', KEYS[1], unpack(fields))
  redis.call('RPUSH', KEYS[2], A[6], B[6])
  local queued, running = KEYS[5 + STATE_SLOT.queued], KEYS[5 + STATE_SLOT.running]
  if t.st == 'queued' then
    redis.call('ZADD', queued, t.seq, A[1])
  else
    redis.call('ZREM', queued, A[1])
    redis.call('ZADD', KEYS[5 + STATE_SLOT[t.st]], t.seq, A[1])
  end
  redis.call('ZREM', running, A[1])
  local retention = tonumber(A[13])
  info_moved(c, t, 'queued', t.st, A[1])
  info_started(c, t, A[1], A[5], worker)
  if B[4] == 'fail' then
    info_failure(c, KEYS[1], t, B[18])
  end
  if TERMINAL[t.st] then
    ended(KEYS, A[1], retention)
    info_ended(c, t, 'running', B[5], retention)
  end
  announce(A[14], started)
  announce(A[14], t)
  if t.hbt then
    redis.call('ZREM', KEYS[13], A[1])
  end
  for _, e in ipairs({{A, at1}, {B, at2}}) do
    if retention then
      redis.call('SET', e[1].marker, '1', 'PX', retention + math.max(0, math.ceil(exp - e[2])))
    else
      redis.call('SET', e[1].marker, '1')
    end
  end
  if notify then
    notify_outbox(KEYS[5], A[1], t.st, B[5], retention)
  end
  redis.call('HINCRBY', KEYS[12], 'started', 1)
  redis.call('HINCRBY', KEYS[12], reason, 1)
  local flags = notify and '1010' or '1000'
  return {{'started', '1000', 'running', start_err or ''}, {reason, flags, t.st, t.err or ''}}
end

local function apply_events(KEYS, ARGV, at)
  local answers = {}
  local keys = {KEYS[1], KEYS[2], ''}
  for i = 4, 14 do
    keys[i] = KEYS[i]
  end
  local count = tonumber(ARGV[at])
  local events, facts = {}, {}
  for n = 1, count do
    local args = {marker = KEYS[14 + n]}
    for i = 1, 18 do
      args[i] = ARGV[at + (n - 1) * 18 + i]
    end
    args[15] = 'c'
    events[n], facts[n] = args, event_facts(args)
  end
  local c = info_block(KEYS, 15 + count, ARGV, at + 18 * count + 1)
  local t = load_task(KEYS[1])
  if t and not t.damaged then
    local missing = info_missing(c, t, facts)
    if missing then
      return nil, missing
    end
  end
  if count == 2 then
    local both = start_and_end(keys, events[1], events[2], c, t)
    if both then
      return both
    end
  end
  for n = 1, count do
    keys[3] = events[n].marker
    answers[n] = apply_event(keys, events[n], c)
    if answers[n][1] == '!unknown' then
      return nil  -- the first event met no task, and wrote nothing
    end
  end
  return answers
end
