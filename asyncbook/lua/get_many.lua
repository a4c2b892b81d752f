-- get_many: several tasks with their histories, for a listing page.
-- KEYS: task hash 1, history list 1, task hash 2, history list 2, ...
-- Returns: one taskJSON per task, or false where the task no longer exists

local out = {}
for i = 1, #KEYS, 2 do
  local t = load_full(KEYS[i], KEYS[i + 1])
  out[#out + 1] = t and render_task(t, KEYS[i + 1], true) or false
end
return out
