-- prune: drop listing-index entries whose task record has expired (retention).
-- KEYS: 1 a state index, 2.. the task hashes of the ids in ARGV, in the same order
-- Returns: how many entries were dropped

-- ARGV: TaskIdsArgs (redis/_script_args.py)
local task_ids = ARGV  -- all of it: the ids to check, of the task hashes in KEYS from 2 on

local dropped = 0
for i, id in ipairs(task_ids) do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    dropped = dropped + redis.call('ZREM', KEYS[1], id)
  end
end
return dropped
