-- execution: what one execution of a tracked task leaves, in one call: its events (the
-- buffered start and progress, then its end), each applied as apply.lua applies it, then
-- Celery's result meta (RedisBackend.set: SET with expiry, PUBLISH) with Celery's SUCCESS
-- guard run here, after the events, so that the meta and the book agree.
-- KEYS: 1 task hash, 2 history list, 3 the meta key (celery-task-meta-<id>),
--       4..9 apply.lua's KEYS 4..9 (deadlines ... group notifications),
--       10.. one callback marker per event, then the info block (_info.lua)
-- ARGV: ExecutionArgs (celery/_execution_args.py), then from events_at on
--       RedisBook.apply_in_script's: the number of events N, each event's apply.lua ARGV
--       (apply_args, _apply.lua), in order, then the info block's facts
-- Returns: {'!unknown'} (events were given for a task the book does not hold: nothing is
--          written) | {'!facts', ...} (the info block lacks facts: nothing is written)
--          | {status, st, answers}: status 'written' | 'kept' (a SUCCESS was
--          stored) | 'refused' (the book's state is one of refused_states); st the task's state
--          after the events ('' when unknown); answers one compact apply answer per event

local meta = ARGV[1]            -- the encoded meta
local expires_s = ARGV[2]       -- expiry in seconds ('' or '0': none)
local guard = ARGV[3]           -- 'json' (the stored meta is JSON: keep a stored SUCCESS)
                                -- | 'none' (write) | 'keep' (the caller found a stored
                                -- SUCCESS: write nothing)
local refused_states = ARGV[4]  -- the book states ('|st|' separated, e.g.
                                -- '|expired|cancelled|') for which no meta is written:
                                -- the caller writes the meta that matches the book instead
local events_at = 5

local answers, missing = apply_events(KEYS, ARGV, events_at)
if missing then
  return missing
elseif not answers then
  return {'!unknown'}
end

-- The task's state: the last compact answer carries it (apply_event answers with the
-- task's state even when it refuses an event); '!' answers carry none.
local last = answers[#answers]
local st
if last and string.sub(last[1], 1, 1) ~= '!' then
  st = last[3]
else
  st = redis.call('HGET', KEYS[1], 'st') or ''
end
if st ~= '' and string.find(refused_states, '|' .. st .. '|', 1, true) then
  return {'refused', st, answers}
end
if guard == 'keep' then
  return {'kept', st, answers}
elseif guard == 'json' then
  local current = redis.call('GET', KEYS[3])
  if current then
    local ok, meta = pcall(cjson.decode, current)
    local stored
    if ok and type(meta) == 'table' then
      stored = meta.status
    elseif string.find(current, '"status": "SUCCESS"', 1, true) then
      stored = 'SUCCESS'  -- JSON cjson cannot read (too deep): Celery's own spelling
    end
    if stored == 'SUCCESS' then
      return {'kept', st, answers}
    end
  end
end
local expires = tonumber(expires_s)
if expires and expires > 0 then
  redis.call('SET', KEYS[3], meta, 'EX', expires)
else
  redis.call('SET', KEYS[3], meta)
end
redis.call('PUBLISH', KEYS[3], meta)
return {'written', st, answers}
