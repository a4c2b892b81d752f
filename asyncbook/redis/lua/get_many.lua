-- get_many: several tasks with their histories, for a listing page.
-- KEYS: task hash 1, history list 1, task hash 2, history list 2, ...
-- ARGV: 1 with histories (1/0)
-- Returns: one taskJSON per task, or false where the task no longer exists, or
--          '!damaged:' .. why where its record is damaged

local with_history = ARGV[1] == '1'
local out = {}
for i = 1, #KEYS, 2 do
  local t = with_history and load_full(KEYS[i], KEYS[i + 1]) or load_task(KEYS[i])
  local why = t and damage(t, KEYS[i + 1])
  if why then
    out[#out + 1] = '!damaged:' .. why
  else
    out[#out + 1] = t and render_task(t, KEYS[i + 1], with_history) or false
  end
end
return out
