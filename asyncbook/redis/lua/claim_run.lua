-- claim_run: a start that takes the run unless a live attempt holds the task (one run
-- per task, extension): apply.lua's call for a start whose only-if-stalled slot is 'u'
-- (apply_event, _apply.lua). While the task runs and its stall time is ahead of the
-- server's clock, nothing changes and the duplicate's audit entry is written in the
-- same call (action as given, outcome 'held', reason 'attempt N is running').
-- KEYS: 1..9 as apply.lua's, 10 the task's audit list, 11 the namespace's audit log
--       (stream), 12.. the info block (_info.lua)
-- ARGV: CancelArgs (redis/_script_args.py): apply.lua's slots (apply_args, _apply.lua), then the
--       audit's (AuditArgs; its reason is written here), then the info block's facts
-- Returns: as apply.lua, or {'!held', attempts, stall time, server now, postpone} (the
--          record unchanged, the entry written; postpone '1' for the first held claim
--          since the last postponement fell due: the record's field 'hp' notes the stall
--          time, when the delivery the caller sends again is due), or {'!stale', stall
--          time, server now, heartbeat timeout} (a stale holder: nothing written; the
--          caller ends it with a retryable stall fail, then claims again)

local event = apply_args(ARGV, 1, KEYS[K_MARKER])
local actor = ARGV[19]
local action = ARGV[20]
local reason_given = ARGV[21]  -- replaced below: the reason is written here
local reason = ARGV[22]
local log_cap = ARGV[23]
local task_cap = ARGV[24]
local AUDIT_ARGC = 6
local AUDIT_KEYC = 2

local block = info_block(KEYS, APPLY_KEYC + AUDIT_KEYC + 1, ARGV, APPLY_ARGC + AUDIT_ARGC + 1)
local answer = apply_event(KEYS, event, block)
if answer[1] == '!held' then
  reason_given, reason = '1', 'attempt ' .. answer[2] .. ' is running'
  local a = {actor = actor, action = action, reason_given = reason_given, reason = reason,
    log_cap = log_cap, task_cap = task_cap}
  write_audit(KEYS[K_TASK], KEYS[APPLY_KEYC + 1], KEYS[APPLY_KEYC + 2], event.task_id, a, 'held')
  local stall_at, now = answer[3], answer[4]
  local due = redis.call('HGET', KEYS[K_TASK], 'hp')  -- not a record field: not loaded
  local postpone = '0'
  if not due or tonumber(due) <= tonumber(now) then
    redis.call('HSET', KEYS[K_TASK], 'hp', stall_at)
    postpone = '1'
  end
  return {'!held', answer[2], stall_at, now, postpone}
end
return answer
