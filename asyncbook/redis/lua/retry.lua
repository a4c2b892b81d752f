-- retry: a failed, expired or cancelled task sent again as a new task (create_task,
-- _create.lua), linked both ways (retryOf on the new, retriedAs on the original), once:
-- the original's retriedAs decides, so two retries at once create one task.
-- KEYS: 1-12 the new task's, as create.lua's; 13 the original's task hash,
--       14 the original's kept message (copied to the new task's, KEYS[12])
-- Returns: {'created'} | {'refused', code, detail}: code not-found, not-retryable
--          (detail: the state), already-retried (detail: the retry's id), no-message;
--          or create_task's other answers

-- ARGV: RetryArgs (_scripts.py): CreateArgs, then the retry's own
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
local original_id = ARGV[20]
local actor = ARGV[21]                -- '' when not said
local reason = ARGV[22]               -- '' when not said

local st = redis.call('HGET', KEYS[13], 'st')
if not st then
  return {'refused', 'not-found', ''}
end
if st ~= 'failed' and st ~= 'expired' and st ~= 'cancelled' then
  return {'refused', 'not-retryable', st}
end
local retried = redis.call('HGET', KEYS[13], 'ra')
if retried then
  return {'refused', 'already-retried', retried}
end
local kept = redis.call('GET', KEYS[14])
if not kept then
  return {'refused', 'no-message', ''}
end
local extra = {'ro', original_id}
if actor ~= '' then
  extra[#extra + 1] = 'rby'; extra[#extra + 1] = actor
end
if reason ~= '' then
  extra[#extra + 1] = 'rwhy'; extra[#extra + 1] = reason
end
local answer = create_task(KEYS, {task_id = task_id, task_id_json = task_id_json,
  deadline = deadline, max_attempts = max_attempts, exist_ok = exist_ok,
  changes_channel = changes_channel, heartbeat_timeout_ms = heartbeat_timeout_ms,
  retry_on_stall = retry_on_stall, group_id_json = group_id_json, created_ms = created_ms,
  name = name, queue = queue, parent_id = parent_id, root_id = root_id, args = args,
  kwargs = kwargs, children_keep_ms = children_keep_ms, message = kept,
  message_keep_ms = message_keep_ms, extra = extra})
if answer[1] ~= 'created' then
  return answer
end
redis.call('HSET', KEYS[13], 'ra', task_id)
return answer
