-- get_many: several tasks with their histories, for a listing page.
-- KEYS: the task hashes
-- Returns: one taskJSON per task, or false where the task no longer exists

local out = {}
for i = 1, #KEYS do
  local t = load_full(KEYS[i])
  out[i] = t and render_task(t, KEYS[i], true) or false
end
return out
