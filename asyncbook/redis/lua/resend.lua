-- resend: a failed, expired or cancelled task's kept message sent again as a new task
-- (create_task, _create.lua), linked both ways (retryOf on the new, retriedAs on the
-- original: the stored names), once: the original's retriedAs decides, so two resends at
-- once create one task. When an actor is given, the answer is recorded on the original's
-- audit trail in the same call (write_audit, _task.lua): action resend, outcome 'retried'
-- or the refusal's code, and retriedAs the new task (or the earlier resend's); none for an
-- unknown task or a create that failed.
-- KEYS: 1-10 the new task's, as create.lua's; 11 the original's task hash,
--       12 the original's kept message (copied to the new task's, KEYS[10]),
--       13 the original's audit list, 14 the namespace's audit log (stream)
-- Returns: {'created'} | {'refused', code, detail}: code not-found, not-retryable
--          (detail: the state), already-retried (detail: the earlier new task), no-message;
--          or create_task's other answers

-- ARGV: ResendArgs (redis/_script_args.py): CreateArgs, the original's id, then AuditArgs
local task_id = ARGV[1]
local task_id_json = ARGV[2]
local deadline = ARGV[3]
local max_attempts = ARGV[4]
local exist_ok = ARGV[5]
local changes_channel = ARGV[6]
local heartbeat_timeout_ms = ARGV[7]
local retry_on_stall = ARGV[8]
local group_id_json = ARGV[9]
local created_ms = ARGV[10]
local name = ARGV[11]
local queue = ARGV[12]
local parent_id = ARGV[13]
local root_id = ARGV[14]
local args = ARGV[15]
local kwargs = ARGV[16]
local children_keep_ms = ARGV[17]
local message = ARGV[18]              -- unused: the original's is copied
local message_keep_ms = ARGV[19]
local trace = ARGV[20]                -- '' (a resend's publish is a new trace's)
local original_id = ARGV[21]
local actor = ARGV[22]                -- '' when not said: no audit entry
local action = ARGV[23]
local reason_given = ARGV[24]         -- 1/0
local reason = ARGV[25]
local log_cap = ARGV[26]
local task_cap = ARGV[27]

local function audited(outcome, retried_as)
  if actor ~= '' then
    local a = {actor = actor, action = action, reason_given = reason_given, reason = reason,
      log_cap = log_cap, task_cap = task_cap}
    write_audit(KEYS[11], KEYS[13], KEYS[14], original_id, a, outcome, retried_as)
  end
end

local st = redis.call('HGET', KEYS[11], 'st')
if not st then
  return {'refused', 'not-found', ''}
end
if st ~= 'failed' and st ~= 'expired' and st ~= 'cancelled' then
  audited('not-retryable', nil)
  return {'refused', 'not-retryable', st}
end
local retried = redis.call('HGET', KEYS[11], 'ra')
if retried then
  audited('already-retried', retried)
  return {'refused', 'already-retried', retried}
end
local kept = redis.call('GET', KEYS[12])
if not kept then
  audited('no-message', nil)
  return {'refused', 'no-message', ''}
end
local extra = {'ro', original_id}
if actor ~= '' then
  extra[#extra + 1] = 'rby'; extra[#extra + 1] = actor
end
if reason_given == '1' and reason ~= '' then
  extra[#extra + 1] = 'rwhy'; extra[#extra + 1] = reason
end
local answer = create_task(KEYS, {task_id = task_id, task_id_json = task_id_json,
  deadline = deadline, max_attempts = max_attempts, exist_ok = exist_ok,
  changes_channel = changes_channel, heartbeat_timeout_ms = heartbeat_timeout_ms,
  retry_on_stall = retry_on_stall, group_id_json = group_id_json, created_ms = created_ms,
  name = name, queue = queue, parent_id = parent_id, root_id = root_id, args = args,
  kwargs = kwargs, children_keep_ms = children_keep_ms, message = kept,
  message_keep_ms = message_keep_ms, trace = trace, extra = extra})
if answer[1] ~= 'created' then
  return answer
end
redis.call('HSET', KEYS[11], 'ra', task_id)
audited('retried', task_id)
return answer
