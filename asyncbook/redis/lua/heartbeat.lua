-- heartbeat: the running attempts of these tasks are alive (no version bump, no history).
-- KEYS: 1 stalls, 2 workers (worker -> last seen ms), 3.. the task hashes of the ids in
--       ARGV, in the same order
-- (A running task's worker is seen now: the console's workers.)
-- Returns: how many were running with a heartbeat timeout (their stall time moved on)

-- ARGV: TaskIdsArgs (redis/_script_args.py)
local task_ids = ARGV  -- all of it: the ids of the task hashes in KEYS from 3 on

local now, alive = server_ms(), 0
for i, task_id in ipairs(task_ids) do
  local f = redis.call('HMGET', KEYS[i + 2], 'st', 'hbt', 'w')
  if f[1] == 'running' and f[2] then
    redis.call('ZADD', KEYS[1], 'GT', now + tonumber(f[2]), task_id)
    alive = alive + 1
  end
  if f[1] == 'running' and f[3] then
    redis.call('ZADD', KEYS[2], 'GT', now, f[3])  -- last seen
  end
end
return alive
