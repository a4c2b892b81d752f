-- resume: what a client that saw version `cursor` is missing.
-- KEYS: 1 task hash, 2 history list
-- ARGV: 1 cursor version (integer >= 0), 2 retention versions, 3 with full task (1/0)
-- Returns: {'!unknown'} | {'!damaged', why} | {mode, taskJSON, entry JSON...}; a delta reads only the entries
--          it returns (from the list's tail); the task's own history is included in
--          snapshot mode or when asked.

local t = load_task(KEYS[1])
if not t then
  return {'!unknown'}
end
local why = damage(t, KEYS[2])
if why then
  return {'!damaged', why}
end
local cursor, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local full = ARGV[3] == '1'
if t.ver <= cursor then
  return {'caught-up', render_task(t, KEYS[2], full)}
end
if t.ver - cursor > window then
  return {'snapshot', render_task(t, KEYS[2], true)}
end
local reply = {'delta', render_task(t, KEYS[2], full)}
local missing = redis.call('LRANGE', KEYS[2], cursor - t.ver, -1)
for _, entry in ipairs(entries_json(missing, cursor + 1)) do
  reply[#reply + 1] = entry
end
return reply
