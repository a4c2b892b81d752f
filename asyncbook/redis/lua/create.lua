-- create: store a new queued task, unless the id exists (create_task, _create.lua).
-- KEYS: 1 task hash, 2 history list, 3 the index's change stream, 4 deadlines,
--       5 sequence, 6 its group's hash, 7 its group's members (both unused without a
--       group), 8 its info hash, 9 its parent's children (unused without a parent):
--       see _info.lua, 10 its kept message (unused without one)
-- Returns: {'created'} | {'exists', taskJSON} | {'!conflict'} | {'!damaged', why}

-- ARGV: CreateArgs (redis/_script_args.py)
local task_id = ARGV[1]
local task_id_json = ARGV[2]
local deadline = ARGV[3]              -- JSON number text
local max_attempts = ARGV[4]
local exist_ok = ARGV[5]              -- 1/0
local changes_channel = ARGV[6]
local heartbeat_timeout_ms = ARGV[7]  -- '' for none
local retry_on_stall = ARGV[8]        -- retry a stalled attempt (1/0)
local group_id_json = ARGV[9]         -- '' for none
local created_ms = ARGV[10]           -- ms text; then the publisher's info, '' where not given
local name = ARGV[11]
local queue = ARGV[12]
local parent_id = ARGV[13]
local root_id = ARGV[14]
local args = ARGV[15]
local kwargs = ARGV[16]
local children_keep_ms = ARGV[17]     -- how long a parent's list of children is kept ('' ever)
local message = ARGV[18]              -- the message as published ('' for none)
local message_keep_ms = ARGV[19]      -- how long it is kept ('' ever)
local trace = ARGV[20]                -- the publish's trace context ('' for none)

return create_task(KEYS, {task_id = task_id, task_id_json = task_id_json,
  deadline = deadline, max_attempts = max_attempts, exist_ok = exist_ok,
  changes_channel = changes_channel, heartbeat_timeout_ms = heartbeat_timeout_ms,
  retry_on_stall = retry_on_stall, group_id_json = group_id_json, created_ms = created_ms,
  name = name, queue = queue, parent_id = parent_id, root_id = root_id, args = args,
  kwargs = kwargs, children_keep_ms = children_keep_ms, message = message,
  message_keep_ms = message_keep_ms, trace = trace})
