-- cancel_many: many tasks cancelled in one call (RedisBook.cancel_many), each as
-- cancel.lua cancels one: apply_event (_apply.lua) of the same cancel event, then its
-- audit entry (write_audit, _task.lua) unless the answer was a refusal ('!...'): the
-- same answer, writes, notification, indexes, counts and entry per task, in the order
-- given (apply_each).
-- KEYS: as expire_many.lua's, with the namespace's audit log (stream) after apply.lua's
--       KEYS 4..9, and per task its audit list after its hash, history and info hash
-- ARGV: CancelManyArgs (redis/_script_args.py): as expire_many.lua's, the event a cancel
--       without a callback (ApplyArgs, its task id left blank), then the audit's slots
--       (AuditArgs) before the tasks
-- Returns: as expire_many.lua

local slots = ARGV  -- all of it: CancelManyArgs, read in order (apply_each, _apply.lua)

local function audited(keys, e, answer, own, at)
  if string.sub(answer[1], 1, 1) ~= '!' then
    local a = {actor = slots[at], action = slots[at + 1], reason_given = slots[at + 2],
      reason = slots[at + 3], log_cap = slots[at + 4], task_cap = slots[at + 5]}
    write_audit(keys[K_TASK], own[2], own[1], e.task_id, a, answer[1])
  end
end

return apply_each(KEYS, slots,
  {name = 'cancel_many', shared = 1, per_task = 1, argc = 6, each = audited})
