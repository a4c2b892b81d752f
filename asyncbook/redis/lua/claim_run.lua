-- claim_run: a start that takes the run unless a live attempt holds the task (one run
-- per task, extension): apply.lua's call for a start whose only-if-stalled slot is 'u'
-- (apply_event, _apply.lua). While the task runs and its stall time is ahead of the
-- server's clock, nothing changes and the duplicate's audit entry is written in the
-- same call (action as given, outcome 'held', reason 'attempt N is running').
-- A limited start (concurrency limits, extension) takes its concurrency key's slot in
-- the same call: only a start about to be granted looks at it (slot_call, _slots.lua),
-- and over the limit the task joins the key's line and its record is unchanged.
-- KEYS: 1..9 as apply.lua's, 10 the task's audit list, 11 the namespace's audit log
--       (stream), 12.. the info block (_info.lua); a limited start's last three: the
--       key's running set, line and payloads (_slots.lua)
-- ARGV: CancelArgs (redis/_script_args.py): apply.lua's slots (apply_args, _apply.lua), then the
--       audit's (AuditArgs; its reason is written here), then the info block's facts; a
--       limited start's then SlotArgs' limit, lease ms and payload
-- Returns: as apply.lua, or {'!held', attempts, stall time, server now, postpone} (the
--          record unchanged, the entry written; postpone '1' for the first held claim
--          since the last postponement fell due: the record's field 'hp' notes the stall
--          time, when the delivery the caller sends again is due), or {'!stale', stall
--          time, server now, heartbeat timeout} (a stale holder: nothing written; the
--          caller ends it with a retryable stall fail, then claims again); a limited
--          start that looked at its slot: {'!slot', slot_call's answer's length,
--          slot_call's answer..., then the start's answer as above, none when it waits}

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
local at, slot = APPLY_ARGC + AUDIT_ARGC + #INFO_ARGV + 1, nil
local gate = #ARGV > at and function()
  local n = #KEYS
  local keys = {KEYS[K_STALLS], KEYS[n - 2], KEYS[n - 1], KEYS[n]}
  local limit, lease_ms, payload = unpack(ARGV, at, at + 2)
  slot = slot_call(keys, 'take', event.task_id, limit, lease_ms, payload)
  return slot[1] ~= '1' and {} or nil
end
local answer = apply_event(KEYS, event, block, gate or nil)
if slot then
  local parts = {'!slot', #slot}
  for _, each in ipairs(slot) do parts[#parts + 1] = each end
  for _, each in ipairs(answer) do parts[#parts + 1] = each end
  return parts
end
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
