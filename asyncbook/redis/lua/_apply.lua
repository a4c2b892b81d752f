-- apply_event(KEYS, e, c): one event on one task, as apply.lua documents its KEYS and
-- ARGV (e: its ARGV as a record, apply_args), c its info block (info_block,
-- _info.lua); shared by apply.lua and scripts that apply several events in one call.
-- With e.with_history = 'c' (compact) an answer carries the task's state and error
-- instead of its JSON: {reason, flags, state, errorJSON or ''}.
-- The machine's transitions are written once, in transition (the pure machine is
-- _machine.py); commit writes what one or more of them changed. apply_event applies one
-- event with them, start_and_end an execution's start and end.

-- apply.lua's ARGV from ARGV[at] on, one event's slots (ApplyArgs in redis/_script_args.py), in
-- order, as a record (marker: the event's callback marker, in KEYS); scripts that apply
-- several events repeat the slots per event.
local function apply_args(ARGV, at, marker)
  return {
    task_id = ARGV[at],
    callback_given = ARGV[at + 1],
    event_valid = ARGV[at + 2],
    type = ARGV[at + 3],
    at_ms = ARGV[at + 4],
    event_json = ARGV[at + 5],
    progress = ARGV[at + 6],
    retryable = ARGV[at + 7],
    result_hash = ARGV[at + 8],
    result_ref_blank = ARGV[at + 9],
    result_hash_blank = ARGV[at + 10],
    error_json = ARGV[at + 11],
    retention_ms = ARGV[at + 12],
    changes_channel = ARGV[at + 13],
    with_history = ARGV[at + 14],
    only_if_stalled = ARGV[at + 15],
    cursor = ARGV[at + 16],
    failure = ARGV[at + 17],
    marker = marker,
    worker = false,  -- a start's worker (event_facts)
  }
end
local APPLY_ARGC = 18  -- the slots apply_args reads

-- apply.lua's KEYS slots (K_CHANGES: the index's change stream, index.lua).
local K_TASK, K_HISTORY, K_MARKER, K_DEADLINES, K_OUTBOX = 1, 2, 3, 4, 5
local K_CHANGES, K_COUNTERS, K_STALLS, K_GROUP_OUTBOX = 6, 7, 8, 9
local APPLY_KEYC = 9

-- Whether event e's callback id was applied (e.callback_given: Shard.marker's
-- form, '0' none, 'taken'): its key e.marker, else its field of a task hash ('h': this
-- task's, task_key; 'x': the hash of the task its id derives from, named in the slot).
local function marker_seen(task_key, e)
  local g = e.callback_given
  if g == '0' or g == 'taken' then
    return g == 'taken'
  elseif redis.call('EXISTS', e.marker) == 1 then
    return true  -- also a marker written as a key before markers went into task hashes
  elseif string.sub(g, 1, 1) == 'h' then
    return redis.call('HEXISTS', task_key, string.sub(g, 2)) == 1
  elseif string.sub(g, 1, 1) == 'x' then
    local n = tonumber(string.sub(g, 2, 3))
    return redis.call('HEXISTS', string.sub(g, 4 + n), string.sub(g, 4, 3 + n)) == 1
  end
  return false
end

-- A script that applies one event record e to many tasks (expire_many) sets e.later
-- (later_writes): the writes below that only add up over its tasks (off the deadlines,
-- the counters, the outbox's trim) are made once, after the last task, by
-- write_later; the same keys and values once the script returns (the outbox's cut only
-- moves forward), fewer commands.
local function later_writes()
  return {ended = {}, reasons = {}, counts = {}, trim_id = false}
end

-- One more answer of reason (a count of the counters hash), now or later (e.later).
local function count_reason(KEYS, e, reason)
  local later = e.later
  if not later then
    redis.call('HINCRBY', KEYS[K_COUNTERS], reason, '1')
  elseif later.counts[reason] then
    later.counts[reason] = later.counts[reason] + 1
  else
    later.reasons[#later.reasons + 1], later.counts[reason] = reason, 1
  end
end

-- A task that just ended: off the deadlines (now, or later: e.later), and its record
-- kept for retention ms (retention: its text, as the caller sent it; nil keeps it).
local function ended(KEYS, e, task_id, retention)
  if e.later then
    e.later.ended[#e.later.ended + 1] = task_id
  else
    redis.call('ZREM', KEYS[K_DEADLINES], task_id)
  end
  if retention then
    redis.call('PEXPIRE', KEYS[K_TASK], retention)
    redis.call('PEXPIRE', KEYS[K_HISTORY], retention)
  end
end

-- The outbox trimmed to retention (ms) before the entry id (outbox_cut).
local function trim_outbox(outbox, id, retention)
  local now = tonumber(string.match(id, '^(%d+)'))
  redis.call('XTRIM', outbox, 'MINID', outbox_cut(outbox, math.max(now - retention, 0), true))
end

-- One notification (its task, state, time and version) in the outbox, then the outbox
-- trimmed (now, or after the last task of e.later): the new entry's id is the server's
-- clock, and never older than the cut.
local function notify_outbox(outbox, task_id, st, at_text, ver, retention, e)
  local id = redis.call('XADD', outbox, '*', 'taskId', task_id, 'state', st, 'atMs', at_text,
    'version', ver)
  if retention and e.later then
    e.later.trim_id = id  -- the last entry's cut is the furthest
  elseif retention then
    trim_outbox(outbox, id, retention)
  end
end

-- e.later's writes (later_writes), made once after the last task of e (KEYS: apply.lua's).
local function write_later(KEYS, e)
  local later = e.later
  for at = 1, #later.ended, 1000 do  -- unpack's stack holds a thousand
    local upto = math.min(at + 999, #later.ended)
    redis.call('ZREM', KEYS[K_DEADLINES], unpack(later.ended, at, upto))
  end
  for _, reason in ipairs(later.reasons) do
    redis.call('HINCRBY', KEYS[K_COUNTERS], reason, tostring(later.counts[reason]))
  end
  if later.trim_id then
    trim_outbox(KEYS[K_OUTBOX], later.trim_id, tonumber(e.retention_ms))
  end
end

-- What info_missing needs of one event (type, atMs, the worker a start names).
-- (A start's worker is kept in e.worker: commit writes it.)
local function event_facts(e)
  e.worker = e.type == 'start' and worker_of(e.event_json) or false
  return {e.type, tonumber(e.at_ms), e.worker or nil}
end

-- A step of the machine (what transition made of one event): the event e, its kind and
-- time, the state before it, its reason and flags, the history entry it recorded, and
-- the task's state, error, version and progress after it.
local function advance(t, s, json)
  t.ver = t.ver + 1
  s.entry = json
  if t.events then t.events[t.ver] = json end
  s.changed = true
end

-- One event of kind (at_text, at: its time) on task t, in memory: its step, or nil and
-- the '!invalid' answer for a value a rule refused (nothing changed then).
local function transition(t, e, kind, at_text, at, history_key)
  local s = {e = e, kind = kind, at_text = at_text, at = at, before = t.st,
    before_prog = t.prog, before_att = t.att, before_err = t.err,
    changed = false, duplicate = false, notify = false, reason = false,
    entry = false, worker = false, st = false, err = false, ver = false, prog = false}
  if TERMINAL[t.st] then
    if kind == 'succeed' and t.st == 'succeeded'
        and result_of(t, history_key).resultHash == e.result_hash then
      s.reason, s.duplicate = 'duplicate-result', true
    elseif kind == 'expire' and t.st == 'expired' then
      s.reason, s.duplicate = 'duplicate-expire', true
    elseif kind == 'cancel' and t.st == 'cancelled' then
      s.reason, s.duplicate = 'duplicate-cancel', true
    else
      s.reason = 'terminal-conflict'
    end
  elseif kind == 'expire' or at >= tonumber(t.exp) then
    advance(t, s, '{"type":"expire","atMs":' .. t.exp .. '}')
    t.st = 'expired'
    s.reason, s.notify = 'expired', true
  elseif kind == 'cancel' then
    advance(t, s, e.event_json)
    t.st, t.err = 'cancelled', e.error_json
    s.reason, s.notify = 'cancelled', true
  elseif kind == 'start' then
    if t.st == 'running' then
      s.reason, s.duplicate = 'already-running', true
    elseif t.st ~= 'queued' or t.att >= t.max then
      s.reason = 'not-startable'
    else
      advance(t, s, e.event_json)
      t.st, t.att, t.prog = 'running', t.att + 1, 0
      s.reason = 'started'
    end
  elseif kind == 'progress' then
    local p = tonumber(e.progress)
    if t.st ~= 'running' then
      s.reason = 'not-running'
    elseif not p or p < 0 or p ~= math.floor(p) then
      return nil, {'!invalid', 'progress', 'progress must be an integer >= 0'}
    elseif p > 100 then
      return nil, {'!invalid', 'progress', 'progress must not exceed 100'}
    elseif p < t.prog then
      s.reason = 'stale-progress'
    elseif p == t.prog then
      s.reason, s.duplicate = 'duplicate-progress', true
    else
      advance(t, s, e.event_json)
      t.prog = p
      s.reason = 'progress'
    end
  elseif t.st ~= 'running' then
    s.reason = 'not-running'
  elseif kind == 'succeed' then
    if e.result_ref_blank == '1' then
      return nil, {'!invalid', 'resultRef', 'resultRef must not be empty'}
    end
    if e.result_hash_blank == '1' then
      return nil, {'!invalid', 'resultHash', 'resultHash must not be empty'}
    end
    advance(t, s, e.event_json)
    t.st, t.prog = 'succeeded', 100
    s.reason, s.notify = 'succeeded', true
  elseif e.retryable == '1' and t.att < t.max then
    advance(t, s, e.event_json)
    t.st, t.prog, t.err = 'queued', 0, e.error_json
    s.reason = 'requeued'
  else
    advance(t, s, e.event_json)
    t.st, t.err = 'failed', e.error_json
    s.reason, s.notify = 'failed', true
  end
  s.st, s.err, s.ver, s.prog = t.st, t.err or false, t.ver, t.prog
  return s
end

-- The writes of steps of one task t (applied in memory, in order): the record changed
-- once (one HSET, one RPUSH, the indexes moved from the first state to the last), then
-- each step's own effects (the info, the change feed, its callback marker s.marker, the
-- outbox, the counters).
local function commit(KEYS, c, t, steps)
  local first, last = steps[1], steps[#steps]
  local id, retention = first.e.task_id, tonumber(first.e.retention_ms)
  local changed, was_running, beat = false, false, false
  for n = 1, #steps do
    local s = steps[n]
    changed = changed or s.changed
    was_running = was_running or s.before == 'running'
    beat = beat or s.kind == 'start' or s.kind == 'progress'
  end
  local ended_at = t.st == 'expired' and t.exp or last.at_text
  if changed then
    -- Only what changed is written; numbers become text once (announce reuses them).
    t.ver_text, t.prog_text = tostring(t.ver), tostring(t.prog)
    local fields = {'st', t.st, 'ver', t.ver_text}
    if t.prog ~= first.before_prog then
      fields[#fields + 1] = 'prog'; fields[#fields + 1] = t.prog_text
    end
    if t.att ~= first.before_att then
      fields[#fields + 1] = 'att'; fields[#fields + 1] = tostring(t.att)
    end
    if t.err and t.err ~= first.before_err then
      fields[#fields + 1] = 'err'; fields[#fields + 1] = t.err
    end
    local entries, cursor, unnamed = {}, nil, false
    for n = 1, #steps do
      local s = steps[n]
      if s.changed then entries[#entries + 1] = s.entry end
      if s.changed and s.kind == 'progress' then cursor = s.e.cursor end
      if s.reason == 'started' then
        s.worker = s.e.worker or nil
        unnamed = not s.worker
        started_fields(fields, s.at_text, s.worker)
      end
    end
    if TERMINAL[t.st] then fields[#fields + 1] = 'e'; fields[#fields + 1] = ended_at end
    if cursor then fields[#fields + 1] = 'cur'; fields[#fields + 1] = cursor end
    redis.call('HSET', KEYS[K_TASK], unpack(fields))
    if unnamed then
      redis.call('HDEL', KEYS[K_TASK], 'w')  -- the last attempt names no worker
    end
    redis.call('RPUSH', KEYS[K_HISTORY], unpack(entries))
    -- The indexes' change (index_change, _info.lua): applied later by index.lua.
    local ch = {q = t.seq}
    if t.st ~= first.before then
      ch.f, ch.t = first.before, t.st
    end
    local worked = false  -- the change names the worker (a start, a run's end)
    for n = 1, #steps do
      local s = steps[n]
      if s.reason == 'started' then
        t.s, t.w, worked = s.at_text, s.worker, true
        ch.s, ch.a = s.at_text, tostring(t.att)
      elseif s.kind == 'fail' and s.changed then
        info_failure(c, KEYS[K_TASK], t, s.e.failure)
      end
    end
    if TERMINAL[t.st] then
      ended(KEYS, first.e, id, retention and first.e.retention_ms)
      local runtime = info_ended(c, t, last.before, ended_at, retention and first.e.retention_ms)
      ch.e = ended_at
      if runtime then
        ch.r, worked = tostring(runtime), true
      end
    end
    ch.w = worked and t.w or nil
    index_change(KEYS[K_CHANGES], t, id, ch)
    for n = 1, #steps do
      local s = steps[n]
      if s.changed then
        local seen = s == last and t
          or {id = t.id, gid = t.gid, st = s.st, prog = s.prog, ver = s.ver}
        announce(s.e.changes_channel, seen)
      end
    end
  end
  if t.gk and changed then
    if t.st ~= first.before then
      redis.call('HINCRBY', c.group, first.before, '-1')
      redis.call('HINCRBY', c.group, t.st, '1')
    end
    if t.prog ~= first.before_prog then
      redis.call('HINCRBY', c.group, 'prog', t.prog - first.before_prog)
    end
    if TERMINAL[t.st] then
      group_maybe_ended(c.group, c.members, KEYS[K_GROUP_OUTBOX], last.at_text, retention)
    end
  end
  if t.hbt then
    -- A change, a start or a progress report is also a heartbeat (no version bump).
    if t.st == 'running' and (changed or beat) then
      redis.call('ZADD', KEYS[K_STALLS], server_ms() + t.hbt, id)
    elseif t.st ~= 'running' and was_running then
      redis.call('ZREM', KEYS[K_STALLS], id)
    end
  end
  for n = 1, #steps do
    local s = steps[n]
    local given = s.e.callback_given
    if string.sub(given, 1, 1) == 'h' then
      redis.call('HSET', KEYS[K_TASK], string.sub(given, 2), '1')  -- goes with the record
    elseif given ~= '0' and given ~= 'taken' then
      if retention then
        -- Kept until the task's record goes: it ends by its deadline at the latest,
        -- which is (exp - at) from now on the task's own clock.
        redis.call('SET', s.e.marker, '1', 'PX', retention + math.max(0, math.ceil(tonumber(t.exp) - s.at)))
      else
        redis.call('SET', s.e.marker, '1')
      end
    end
  end
  for n = 1, #steps do
    local s = steps[n]
    if s.notify then
      local ver = s == last and t.ver_text or s.ver  -- text: not formatted again
      notify_outbox(KEYS[K_OUTBOX], id, s.st, s.at_text, ver, retention, s.e)
    end
  end
  for n = 1, #steps do
    local s = steps[n]
    count_reason(KEYS, s.e, s.reason)
  end
end

local function flags_of(s)
  return (s.changed and '1' or '0') .. (s.duplicate and '1' or '0') .. (s.notify and '1' or '0') .. '0'
end

local function compact_answer(s)
  return {s.reason, flags_of(s), s.st, s.err or ''}
end

-- gate (claim_run.lua's limited start): called for a start about to be granted, before
-- anything is written; an answer from it is returned instead, the record unchanged.
local function apply_event(KEYS, e, c, gate)
  local with_history = e.with_history == '1'
  local compact = e.with_history == 'c'
  local loaded = with_history and load_full(KEYS[K_TASK], KEYS[K_HISTORY]) or load_task(KEYS[K_TASK])
  local t, refused = usable(loaded, KEYS[K_HISTORY])
  if refused then
    return refused
  end
  local missing = info_missing(c, t, {event_facts(e)})
  if missing then
    return missing
  end
  -- 'taken': a sharded namespace's other task holds the id (_claims.py)
  if marker_seen(KEYS[K_TASK], e) then
    redis.call('HINCRBY', KEYS[K_COUNTERS], 'duplicate-callback', '1')
    if compact then
      return {'duplicate-callback', '0101', t.st, t.err or ''}
    end
    return task_parts({'duplicate-callback', '0101'}, t, KEYS[K_HISTORY], with_history)
  end
  if e.event_valid ~= '1' then
    return {'!shape'}
  end

  local kind, at_text = e.type, e.at_ms
  if kind == 'deadline' then
    kind, at_text = 'expire', t.exp
  end
  local at = tonumber(at_text)
  if not at or at < 0 then
    return {'!invalid', 'event.atMs', 'event.atMs must be a non-negative number'}
  end
  if e.only_if_stalled == '1' then
    -- The sweep's stall fail (its atMs is the sweep's now): only if still overdue then.
    local stall_at = redis.call('ZSCORE', KEYS[K_STALLS], e.task_id)
    if t.st ~= 'running' or not stall_at or tonumber(stall_at) > at then
      return {'!fresh'}
    end
  elseif e.only_if_stalled == 'u' and t.st == 'running' and at < tonumber(t.exp) then
    -- claim_run.lua's start: not while a live run holds the task (its stall time, by
    -- the server's clock, is still ahead); a stale holder is ended first, by the caller.
    local stall_at = redis.call('ZSCORE', KEYS[K_STALLS], e.task_id)
    if stall_at and t.hbt then
      local now = server_ms()
      if tonumber(stall_at) > now then
        return {'!held', string.format('%d', t.att), stall_at, string.format('%d', now)}
      end
      return {'!stale', stall_at, string.format('%d', now), string.format('%d', t.hbt)}
    end
  end
  local s, invalid = transition(t, e, kind, at_text, at, KEYS[K_HISTORY])
  if not s then
    return invalid
  end
  local waits = gate and s.reason == 'started' and gate()
  if waits then
    return waits
  end
  commit(KEYS, c, t, {s})
  if compact then
    return compact_answer(s)
  end
  return task_parts({s.reason, flags_of(s)}, t, KEYS[K_HISTORY], with_history)
end

-- An execution's start and end (records A and B of apply_event's ARGV, each with its
-- marker), applied together: the same transitions and, by commit, the same writes as
-- apply_event's for each in turn, less those the end undoes (the running index, the
-- stall clock) and with one HSET and one RPUSH. Only for the common case (a queued task
-- outside a group, two callbacks, both new, both events well-formed and before the
-- deadline); nil otherwise, having written nothing, and apply_event applies them one by
-- one.
local function start_and_end(KEYS, A, B, c, t)
  if A.type ~= 'start' or (B.type ~= 'succeed' and B.type ~= 'fail') then
    return nil
  end
  local given = A.callback_given ~= '0' and A.callback_given ~= 'taken' and A.marker ~= B.marker
    and B.callback_given ~= '0' and B.callback_given ~= 'taken'
    and A.event_valid == '1' and B.event_valid == '1'
  if not given or A.only_if_stalled ~= '0' or B.only_if_stalled ~= '0' then
    return nil
  end
  if B.type == 'succeed' and (B.result_ref_blank == '1' or B.result_hash_blank == '1') then
    return nil
  end
  if not t or t.damaged or t.gk or t.st ~= 'queued' or t.att >= t.max then
    return nil
  end
  local exp, at1, at2 = tonumber(t.exp), tonumber(A.at_ms), tonumber(B.at_ms)
  if not at1 or not at2 or at1 < 0 or at2 < 0 or at1 >= exp or at2 >= exp then
    return nil
  end
  if marker_seen(KEYS[K_TASK], A) or marker_seen(KEYS[K_TASK], B) or damage(t, KEYS[K_HISTORY]) then
    return nil
  end
  local started = transition(t, A, A.type, A.at_ms, at1, KEYS[K_HISTORY])
  local ending = transition(t, B, B.type, B.at_ms, at2, KEYS[K_HISTORY])
  commit(KEYS, c, t, {started, ending})
  return {compact_answer(started), compact_answer(ending)}
end

-- apply_events(KEYS, ARGV, at): the events of a script that RedisBook.apply_in_script
-- calls (KEYS: task hash, history, the caller's key, apply.lua's KEYS 4..9, one
-- callback marker per event, then the info block; ARGV[at]: the number of events,
-- apply.lua's ARGV (apply_args) per event, then the info block's), each applied by
-- apply_event, in order. Returns their compact answers, or nil when the book does not
-- hold the task, or nil and the '!facts' answer when the block lacks facts (then
-- nothing was written).
local function apply_events(KEYS, ARGV, at)
  local answers = {}
  local keys = {KEYS[K_TASK], KEYS[K_HISTORY], ''}
  for i = K_DEADLINES, APPLY_KEYC do
    keys[i] = KEYS[i]
  end
  local count = tonumber(ARGV[at])
  local events, facts = {}, {}
  for n = 1, count do
    local e = apply_args(ARGV, at + 1 + (n - 1) * APPLY_ARGC, KEYS[APPLY_KEYC + n])
    e.with_history = 'c'
    events[n], facts[n] = e, event_facts(e)
  end
  local c = info_block(KEYS, APPLY_KEYC + 1 + count, ARGV, at + APPLY_ARGC * count + 1)
  local t = load_task(KEYS[K_TASK])
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
    keys[K_MARKER] = events[n].marker
    answers[n] = apply_event(keys, events[n], c)
    if answers[n][1] == '!unknown' then
      return nil  -- the first event met no task, and wrote nothing
    end
  end
  return answers
end

-- apply_each(KEYS, slots, how): one event record applied to each of many tasks by
-- apply_event, in order, as expire_many.lua documents its KEYS and ARGV (slots); how
-- says what a script adds (cancel_many: an audit entry per task):
--   how.name: the script's, in a task's error; how.later: the writes that add up over
--   the tasks made once, after the last (later_writes);
--   how.shared: its own KEYS after apply.lua's 4..9; how.per_task: its own KEYS after
--   each task's three; how.argc: its own slots after the event's;
--   how.each(keys, e, answer, own, at): after each task's answer (not an error): keys
--   apply.lua's for the task, own the script's KEYS (the shared ones, then the task's
--   own), at the first of its slots.
-- Returns: per task, in order, its answer; an error its apply_event raised is its answer.
local function apply_each(KEYS, slots, how)
  local SHARED = 1 + APPLY_KEYC - K_DEADLINES + 1  -- KEYS 1..SHARED: the marker, 4..9
  local shared = how.shared or 0
  local per_task = 3 + (how.per_task or 0)
  local block_count = tonumber(slots[1])
  local blocks = {}
  local k, a = SHARED + shared + 1, 2
  for b = 1, block_count do
    local key_count = tonumber(slots[a])
    local block_keys = {}
    for i = 1, key_count do
      block_keys[i] = KEYS[k + i - 1]
    end
    -- One record per block (info_block): each task's own info hash goes in it.
    blocks[b] = info_block(block_keys, 1, slots, a + 1)
    k, a = k + key_count, a + 1 + #INFO_ARGV
  end
  -- One event record for every task (apply_event sets only its worker, for each event):
  -- each task's own id goes in it.
  local e = apply_args(slots, a, KEYS[1])
  if how.later then
    e.later = later_writes()
  end
  local own_at = a + APPLY_ARGC
  a = own_at + (how.argc or 0)
  local keys = {'', '', KEYS[1]}
  for i = K_DEADLINES, APPLY_KEYC do
    keys[i] = KEYS[i - K_DEADLINES + 2]
  end
  local own_keys = {}
  for i = 1, shared do
    own_keys[i] = KEYS[SHARED + i]
  end
  local answers = {}
  while a <= #slots do
    local block = blocks[tonumber(slots[a + 1])]
    keys[K_TASK], keys[K_HISTORY] = KEYS[k], KEYS[k + 1]
    block.info = KEYS[k + 2]
    for i = 4, per_task do
      own_keys[shared + i - 3] = KEYS[k + i - 1]
    end
    e.task_id = slots[a]
    local ok, answer = pcall(apply_event, keys, e, block)
    if not ok then
      local why = type(answer) == 'table' and answer.err or tostring(answer)
      answer = {err = 'ERR Error running script ' .. how.name .. ': ' .. tostring(why)}
    elseif how.each then
      how.each(keys, e, answer, own_keys, own_at)
    end
    answers[#answers + 1] = answer
    k, a = k + per_task, a + 2
  end
  if how.later then
    write_later(keys, e)
  end
  return answers
end
