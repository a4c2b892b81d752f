-- cancel: apply.lua's call for a cancel event, and its audit entry in the same call:
-- who asked, why, and the book's answer (write_audit, _task.lua). The answer is
-- apply.lua's; an entry is written only when the task exists and the call was not
-- refused ('!...': unknown, damaged, a missing fact, a bad event).
-- KEYS: 1..9 as apply.lua's, 10 the task's audit list, 11 the namespace's audit log
--       (stream), 12.. the info block (_info.lua)
-- ARGV: CancelArgs (redis/_script_args.py): apply.lua's slots (apply_args, _apply.lua), then the
--       audit's (AuditArgs), then the info block's facts (InfoBlockArgs)
-- Returns: as apply.lua

local event = apply_args(ARGV, 1, KEYS[K_MARKER])
local actor = ARGV[19]
local action = ARGV[20]
local reason_given = ARGV[21]  -- 1/0
local reason = ARGV[22]
local log_cap = ARGV[23]
local task_cap = ARGV[24]
local AUDIT_ARGC = 6
local AUDIT_KEYC = 2

local block = info_block(KEYS, APPLY_KEYC + AUDIT_KEYC + 1, ARGV, APPLY_ARGC + AUDIT_ARGC + 1)
local answer = apply_event(KEYS, event, block)
if string.sub(answer[1], 1, 1) ~= '!' then
  local a = {actor = actor, action = action, reason_given = reason_given, reason = reason,
    log_cap = log_cap, task_cap = task_cap}
  write_audit(KEYS[K_TASK], KEYS[APPLY_KEYC + 1], KEYS[APPLY_KEYC + 2], event.task_id, a,
    answer[1])
end
return answer
