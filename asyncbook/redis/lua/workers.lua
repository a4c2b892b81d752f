-- workers: the workers seen since a time, with their counts and running tasks.
-- KEYS: 1 workers (sorted set: worker -> last seen ms), 2 the running tasks' index, then
--       the task hash of each id in running_ids_json, then the counts hash of each
--       worker in workers_json
-- Returns: {worker, last seen, {started, succeeded, failed}, {running ids}} per worker,
--          most recently seen first | {'!keys', {ids}, {workers}}: the keys of these
--          ids and workers are missing; sent again with them (nothing was read twice)

-- ARGV: WorkersArgs (redis/_script_args.py)
local seen_since_ms = ARGV[1]          -- seen at or after (ms)
local workers_listed = ARGV[2]         -- how many workers at most
local running_looked_at = ARGV[3]      -- how many running tasks to look at, at most
local running_ids_json = ARGV[4]       -- running ids whose task hashes follow (JSON array)
local workers_json = ARGV[5]           -- workers whose counts follow (JSON array)

local ids, names = cjson.decode(running_ids_json), cjson.decode(workers_json)
local task_of, counts_of = {}, {}
for i, id in ipairs(ids) do
  task_of[id] = KEYS[2 + i]
end
for i, worker in ipairs(names) do
  counts_of[worker] = KEYS[2 + #ids + i]
end
local seen = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', seen_since_ms, 'WITHSCORES',
  'LIMIT', 0, tonumber(workers_listed))
local running_ids = redis.call('ZRANGE', KEYS[2], 0, tonumber(running_looked_at) - 1)
local lacking_ids, lacking_workers = {}, {}
for _, id in ipairs(running_ids) do
  if not task_of[id] then lacking_ids[#lacking_ids + 1] = id end
end
for i = 1, #seen, 2 do
  if not counts_of[seen[i]] then lacking_workers[#lacking_workers + 1] = seen[i] end
end
if #lacking_ids > 0 or #lacking_workers > 0 then
  return {'!keys', lacking_ids, lacking_workers}
end
local running = {}
for _, id in ipairs(running_ids) do
  local worker = redis.call('HGET', task_of[id], 'w')
  if worker then
    running[worker] = running[worker] or {}
    table.insert(running[worker], id)
  end
end
local out = {}
for i = 1, #seen, 2 do
  local worker = seen[i]
  local counts = redis.call('HMGET', counts_of[worker], 'started', 'succeeded', 'failed')
  out[#out + 1] = {worker, seen[i + 1], counts, running[worker] or {}}
end
return out
