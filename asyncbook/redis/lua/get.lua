-- get: one task with its history.
-- KEYS: 1 task hash, 2 history list
-- ARGV: NoArgs (redis/_script_args.py): none
-- Returns: taskJSON, or false when the task does not exist, or {'!damaged', why}

local t = load_full(KEYS[1], KEYS[2])
if not t then
  return false
end
local why = damage(t, KEYS[2])
if why then
  return {'!damaged', why}
end
return render_task(t, KEYS[2], true)
