-- resume: what a client that saw version `cursor` is missing.
-- KEYS: 1 task hash, 2 history list
-- Returns: {'!unknown'} | {'!damaged', why} | {mode, taskJSON, entry JSON...}; a delta
--          reads only the entries it returns (from the list's tail); the task's own
--          history is included in snapshot mode or when asked.

-- ARGV: ResumeArgs (redis/_script_args.py)
local cursor = tonumber(ARGV[1])              -- the version the client saw (integer >= 0)
local retention_versions = tonumber(ARGV[2])
local with_full_task = ARGV[3] == '1'

local t, refused = usable(load_task(KEYS[1]), KEYS[2])
if refused then
  return refused
end
if t.ver <= cursor then
  return {'caught-up', render_task(t, KEYS[2], with_full_task)}
end
if t.ver - cursor > retention_versions then
  return {'snapshot', render_task(t, KEYS[2], true)}
end
local reply = {'delta', render_task(t, KEYS[2], with_full_task)}
local missing = unpack_entries(redis.call('LRANGE', KEYS[2], cursor - t.ver, -1), t)
for _, entry in ipairs(entries_json(missing, cursor + 1)) do
  reply[#reply + 1] = entry
end
return reply
