-- prune: drop listing-index entries whose task record has expired (retention).
-- KEYS: 1 a state index, 2.. the task hashes of the ids in ARGV, in the same order
-- ARGV: the task ids to check
-- Returns: how many entries were dropped

local dropped = 0
for i, id in ipairs(ARGV) do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    dropped = dropped + redis.call('ZREM', KEYS[1], id)
  end
end
return dropped
