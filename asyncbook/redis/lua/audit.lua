-- audit: record one change of a task that another call made (a retry, say): its entry
-- in the task's audit list and in the namespace's audit log (write_audit, _task.lua).
-- KEYS: 1 task hash, 2 the task's audit list, 3 the namespace's audit log (stream)
-- Returns: {'!unknown'} when the task does not exist (nothing written), else {'ok'}

-- ARGV: RecordAuditArgs (redis/_script_args.py)
local task_id = ARGV[1]
local actor = ARGV[2]
local action = ARGV[3]
local reason_given = ARGV[4]  -- 1/0
local reason = ARGV[5]
local log_cap = ARGV[6]
local task_cap = ARGV[7]
local outcome = ARGV[8]
local retried_as = ARGV[9]    -- '' when none

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'!unknown'}
end
local a = {actor = actor, action = action, reason_given = reason_given, reason = reason,
  log_cap = log_cap, task_cap = task_cap}
write_audit(KEYS[1], KEYS[2], KEYS[3], task_id, a, outcome,
  retried_as ~= '' and retried_as or nil)
return {'ok'}
