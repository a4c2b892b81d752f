-- resume: what a client that saw version `cursor` is missing.
-- KEYS: 1 task hash
-- ARGV: 1 cursor version (integer >= 0), 2 retention versions, 3 with full task (1/0)
-- Returns: {'!unknown'} | {mode, taskJSON, entry JSON...}; a delta reads only the entries
--          it returns; the task's own history is included in snapshot mode or when asked.

local t = load_task(KEYS[1])
if not t then
  return {'!unknown'}
end
local cursor, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local full = ARGV[3] == '1'
if t.ver <= cursor then
  return {'caught-up', render_task(t, KEYS[1], full)}
end
if t.ver - cursor > window then
  return {'snapshot', render_task(t, KEYS[1], true)}
end
return history_entries(KEYS[1], cursor + 1, t.ver, {'delta', render_task(t, KEYS[1], full)})
