-- _slots.lua: a concurrency key's slots (concurrency limits across workers, extension;
-- asyncbook/_slots.py has the rules), shared by slots.lua and claim_run.lua's limited
-- start: take one (op 'take'), or free one (op 'release'), then give free slots to the
-- key's line, oldest first.
-- s: the keys: 1 stalls, 2 the key's running set (task id -> its lease's end, ms), 3 its
--    line (list of task ids, oldest first), 4 its payloads (hash: waiting id -> payload)
-- Returns: {granted '1' or '0', how many still wait, the payloads of the tasks given a
--          slot...}
local function slot_call(s, op, task_id, limit, lease_ms, payload)
  local now = server_ms()
  local cap, lease = tonumber(limit), now + tonumber(lease_ms)
  -- A member holds its slot while its lease or its attempt's stall time is ahead: only
  -- those whose lease lapsed are looked at; one kept by its heartbeats has its lease
  -- moved to its stall time (looked at again after it).
  local lapsed = redis.call('ZRANGEBYSCORE', s[2], '-inf', now)
  for _, member in ipairs(lapsed) do
    local stall = redis.call('ZSCORE', s[1], member)
    if stall and tonumber(stall) > now then
      redis.call('ZADD', s[2], stall, member)
    else
      redis.call('ZREM', s[2], member)
    end
  end
  local count = redis.call('ZCARD', s[2])
  local granted = '0'
  if op == 'take' then
    if redis.call('ZSCORE', s[2], task_id) then
      granted = '1'
      redis.call('ZADD', s[2], 'GT', lease, task_id)
    elseif count < cap and redis.call('LLEN', s[3]) == 0 then
      granted, count = '1', count + 1
      redis.call('ZADD', s[2], lease, task_id)
    elseif redis.call('HSETNX', s[4], task_id, payload) == 1 then
      redis.call('RPUSH', s[3], task_id)
    end
  else
    count = count - redis.call('ZREM', s[2], task_id)
  end
  local answer = {granted, 0}
  while count < cap do
    local next_id = redis.call('LPOP', s[3])
    if not next_id then
      break
    end
    answer[#answer + 1] = redis.call('HGET', s[4], next_id) or ''
    redis.call('HDEL', s[4], next_id)
    redis.call('ZADD', s[2], lease, next_id)
    count = count + 1
  end
  answer[2] = redis.call('LLEN', s[3])
  return answer
end
