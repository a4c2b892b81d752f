-- celery_meta: Celery's result meta write (RedisBackend.set), with Celery's SUCCESS guard
-- run here, after the book's events of the same transaction, so that the meta and the
-- book agree. Not prefixed with _task.lua.
-- KEYS: 1 the meta key (celery-task-meta-<id>), 2 the task's hash in the book
-- ARGV: 1 the encoded meta, 2 expiry in seconds ('' or '0': none),
--       3 guard: 'json' (the stored meta is JSON: keep a stored SUCCESS) | 'none' (write)
--         | 'keep' (the caller found a stored SUCCESS: write nothing),
--       4 the book states ('|st|' separated, e.g. '|expired|cancelled|') for which nothing
--         is written: the caller writes the meta that matches the book instead
-- Returns: {'written', st} | {'kept', st} (a SUCCESS was stored) | {'refused', st}
--          (the book's state is one of ARGV[4]); st is the task's state, '' when unknown

local st = redis.call('HGET', KEYS[2], 'st') or ''
if st ~= '' and string.find(ARGV[4], '|' .. st .. '|', 1, true) then
  return {'refused', st}
end
if ARGV[3] == 'keep' then
  return {'kept', st}
elseif ARGV[3] == 'json' then
  local current = redis.call('GET', KEYS[1])
  if current then
    local ok, meta = pcall(cjson.decode, current)
    local stored
    if ok and type(meta) == 'table' then
      stored = meta.status
    elseif string.find(current, '"status": "SUCCESS"', 1, true) then
      stored = 'SUCCESS'  -- JSON cjson cannot read (too deep): Celery's own spelling
    end
    if stored == 'SUCCESS' then
      return {'kept', st}
    end
  end
end
local expires = tonumber(ARGV[2])
if expires and expires > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', expires)
else
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', KEYS[1], ARGV[1])
return {'written', st}
