-- get: one task with its history.
-- KEYS: 1 task hash
-- Returns: taskJSON, or false when the task does not exist

local t = load_full(KEYS[1])
if not t then
  return false
end
return render_task(t, KEYS[1], true)
