-- index: one batch of the index's change stream applied to the console's indexes and
-- counts, then trimmed from the stream (the visibility store: the writes append the
-- changes, index_change in _info.lua; _indexer.py reads a batch and calls this). The
-- stream holds only what is still to be indexed, so the batch is the stream's head: if
-- its first entry is not the one the caller read, another indexer took it (nothing is
-- written; the caller reads again). One call applies the whole batch or nothing.
-- What it keeps, every key on the shard's hash tag (KeySchema, _keys.py):
-- <tag>:idx:<state> and <tag>:n:<state>:<name> (a state's and a name's tasks in one
-- state, by creation order); <tag>:by:<field> (the search's sort: started, the last
-- attempt's start ms, and attempts, at a start; ended (ms) and runtime (ms, a run that
-- went from running to succeeded or failed), at an end); <tag>:names (name -> last
-- created ms); <tag>:w:<worker> (a worker's latest tasks), <tag>:wc:<worker> (its
-- counts), <tag>:workers (worker -> last seen ms: its latest start, or a heartbeat);
-- prune forgets a worker unseen for a week, with its keys.
-- Stats: <tag>:s:<hour>:<name> and <tag>:sa:<hour> (every name): per minute of the
-- hour, '<minute>:<code>' counts (S started, succeeded, failed, expired, cancelled),
-- and '<minute>:r<i>' the ends with a runtime in bucket i, succeeded and failed in one
-- number (STATS_FAILED_UNIT), kept a day and an hour; <tag>:nt holds running totals per
-- name ('<name>|<code>', '<name>|<code>:<i>' for an end with a runtime in bucket i, plus
-- '<name>|sum' of runtimes) for Prometheus counters. One HINCRBY per hash and field;
-- a code's count is the sum over its fields (readers: _console.py, _stats.py).
-- KEYS: 1 the change stream, then every key the batch writes (the ops name their slots)
-- ARGV: IndexArgs (redis/_script_args.py): the batch's first and last entry ids; then its
--       writes, worked out and summed by the caller (_indexer.py's _Batch: a task's moves
--       between states as one, a key's members in one command, one HINCRBY per hash and
--       field), each an op and its operands: 'r' slot n member... (ZREM of n members) |
--       'z' slot n score member... (ZADD of n/2 pairs) | 'g' slot n score member... (ZADD
--       GT) | 'h' slot field by (HINCRBY) | 'x' slot field by (HINCRBY of a
--       stats hash, which expires a day and an hour after a field is new) | 'w' counts
--       tasks by (a worker's starts: its index trimmed to its latest tasks whenever the
--       count passes a multiple of 64, so at most 64 over WORKER_TASKS)
-- Returns: {'indexed'} | {'!moved'}
local WORKER_TASKS = 1000
local STATS_TTL = 25 * 3600000

-- The ops of argv from argv[at] on, applied in order (their KEYS slots in keys).
local function apply_ops(keys, argv, at)
  while at <= #argv do
    local op, key = argv[at], keys[tonumber(argv[at + 1])]
    if op == 'r' or op == 'z' or op == 'g' then
      local last = at + 2 + tonumber(argv[at + 2])
      if op == 'r' then
        redis.call('ZREM', key, unpack(argv, at + 3, last))
      elseif op == 'z' then
        redis.call('ZADD', key, unpack(argv, at + 3, last))
      else
        redis.call('ZADD', key, 'GT', unpack(argv, at + 3, last))
      end
      at = last + 1
    else
      if op == 'w' then
        local by = tonumber(argv[at + 3])
        local count = redis.call('HINCRBY', key, 'started', by)
        if math.floor(count / 64) > math.floor((count - by) / 64) then
          redis.call('ZREMRANGEBYRANK', keys[tonumber(argv[at + 2])], 0, -WORKER_TASKS - 1)
        end
      elseif redis.call('HINCRBY', key, argv[at + 2], argv[at + 3]) == tonumber(argv[at + 3])
          and op == 'x' then
        redis.call('PEXPIRE', key, STATS_TTL)  -- a new field: few calls
      end
      at = at + 4
    end
  end
end

local first_id = ARGV[1]
local last_id = ARGV[2]

local stream = KEYS[1]
local head = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
if not head[1] or head[1][1] ~= first_id then
  return {'!moved'}
end
apply_ops(KEYS, ARGV, 3)
-- Trimmed up to the batch's last entry (MINID keeps ids at or above the next id).
local ms, seq = string.match(last_id, '^(%d+)-(%d+)$')
redis.call('XTRIM', stream, 'MINID', ms .. '-' .. string.format('%.0f', tonumber(seq) + 1))
return {'indexed'}
