-- get_many: several tasks with their histories, for a listing page.
-- KEYS: task hash 1, history list 1, task hash 2, history list 2, ...
-- Returns: one taskJSON per task, or false where the task no longer exists, or
--          '!damaged:' .. why where its record is damaged

-- ARGV: GetManyArgs (redis/_script_args.py)
local with_histories = ARGV[1] == '1'
local out = {}
for i = 1, #KEYS, 2 do
  local t = with_histories and load_full(KEYS[i], KEYS[i + 1]) or load_task(KEYS[i])
  local why = t and damage(t, KEYS[i + 1])
  if why then
    out[#out + 1] = '!damaged:' .. why
  else
    out[#out + 1] = t and render_task(t, KEYS[i + 1], with_histories) or false
  end
end
return out
