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
-- KEYS: 1 the change stream, 2..7 the state indexes (STATE_SLOT order), 8..11 the sort
--       indexes (started, ended, runtime, attempts), 12 names, 13 name totals,
--       14 workers, then the keys slots_json places
-- Returns: {'indexed', count} | {'!moved'}
-- ARGV: IndexArgs (redis/_script_args.py)
local first_id = ARGV[1]    -- the batch's first entry id
local last_id = ARGV[2]     -- its last
local slots_json = ARGV[3]  -- where the batch's other keys are in KEYS (JSON): n: name ->
                            -- its six state indexes' first; h: hour -> every name's
                            -- stats; s: hour -> name -> the name's; w: worker -> its
                            -- tasks (its counts next)

local WORKER_TASKS = 1000          -- a worker's index keeps its latest tasks only
local STATS_TTL = 25 * 3600000     -- per-minute stats reach back a day
local STATS_FAILED_UNIT = 2147483648  -- '<minute>:r<i>': a failed run adds 2^31, a
                                      -- succeeded one 1 (a minute never has 2^31)
local RUNTIME_BOUNDS = {100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000,
  300000, 600000, 1800000, 3600000}
local SORTS = {s = 8, e = 9, r = 10, a = 11}  -- an entry's field: its sort index
local NAMES, TOTALS, WORKERS = KEYS[12], KEYS[13], KEYS[14]

local stream = KEYS[1]
local head = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
if not head[1] or head[1][1] ~= first_id then
  return {'!moved'}
end
local slots = cjson.decode(slots_json)

local function hour_of(at)
  return string.format('%.0f', math.floor(at / 3600000))
end

local function runtime_bucket(ms)
  for i, bound in ipairs(RUNTIME_BOUNDS) do
    if ms <= bound then
      return i - 1
    end
  end
  return #RUNTIME_BOUNDS
end

-- The batch's counts, summed before they are written: one HINCRBY per hash and field
-- (sums[key][field]; keys and fields in first-seen order), the stats' hashes given their
-- expiry when the batch made a field of theirs (as one HINCRBY per event would have).
local sums, summed, expiring = {}, {}, {}

local function add(key, field, by, expires)
  local of = sums[key]
  if not of then
    of = {fields = {}, by = {}}
    sums[key], summed[#summed + 1], expiring[key] = of, key, expires
  end
  if not of.by[field] then
    of.fields[#of.fields + 1], of.by[field] = field, 0
  end
  of.by[field] = of.by[field] + by
end

-- One count (and a runtime) of one minute, for the task's name and for every name.
local function count_minute(name, at, code, runtime)
  local field, minute_code, by = code, code, 1
  if runtime then
    local bucket = runtime_bucket(runtime)
    field, minute_code = code .. ':' .. bucket, 'r' .. bucket
    by = code == 'failed' and STATS_FAILED_UNIT or 1
  end
  local minute_field = (math.floor(at / 60000) % 60) .. ':' .. minute_code
  local hour = hour_of(at)
  add(KEYS[slots.h[hour]], minute_field, by, true)
  if name then
    add(KEYS[slots.s[hour][name]], minute_field, by, true)
    add(TOTALS, name .. '|' .. field, 1, false)
    if runtime then
      add(TOTALS, name .. '|sum', runtime, false)
    end
  end
end

-- A task's moves between states in the batch, applied as one (its first state out, its
-- last one in): chains by task id, in the order their tasks first moved.
local chains, order = {}, {}

local function moved(chain)
  if chain.f then
    redis.call('ZREM', KEYS[1 + STATE_SLOT[chain.f]], chain.i)
    if chain.named then
      redis.call('ZREM', KEYS[chain.named + STATE_SLOT[chain.f] - 1], chain.i)
    end
  end
  redis.call('ZADD', KEYS[1 + STATE_SLOT[chain.t]], chain.q, chain.i)
  if chain.named then
    redis.call('ZADD', KEYS[chain.named + STATE_SLOT[chain.t] - 1], chain.q, chain.i)
  end
end

local entries = redis.call('XRANGE', stream, first_id, last_id)
for _, entry in ipairs(entries) do
  local f, kv = {}, entry[2]
  for i = 1, #kv, 2 do
    f[kv[i]] = kv[i + 1]
  end
  local at = 1  -- f.m: CHANGE's fields (_info.lua), each followed by '|'
  for value in string.gmatch(f.m .. '|', '([^|]*)|') do
    if value ~= '' then
      f[CHANGE[at]] = value
    end
    at = at + 1
  end
  if f.t then
    local chain = chains[f.i]
    if chain and f.f then
      chain.t = f.t  -- the task moved on: only where it ends up is written
    else
      if chain then
        moved(chain)  -- a create of an id whose earlier task's moves are in the batch
      else
        order[#order + 1] = f.i
      end
      chains[f.i] = {i = f.i, q = f.q, f = f.f, t = f.t, named = f.n and slots.n[f.n]}
    end
  end
  if f.c and f.n then
    redis.call('ZADD', NAMES, f.c, f.n)
  end
  for field, slot in pairs(SORTS) do
    if f[field] then
      redis.call('ZADD', KEYS[slot], f[field], f.i)
    end
  end
  local worker = f.w and slots.w[f.w]
  if f.s then
    if worker then
      redis.call('ZADD', KEYS[worker], f.q, f.i)
      if redis.call('HINCRBY', KEYS[worker + 1], 'started', '1') % 64 == 0 then
        -- trimmed now and then: at most 64 over WORKER_TASKS
        redis.call('ZREMRANGEBYRANK', KEYS[worker], 0, -WORKER_TASKS - 1)
      end
      redis.call('ZADD', WORKERS, 'GT', f.s, f.w)
    end
    count_minute(f.n, tonumber(f.s), 'S', nil)
  end
  if f.e then
    local runtime = tonumber(f.r)
    if runtime and worker then
      add(KEYS[worker + 1], f.t, 1, false)
    end
    count_minute(f.n, tonumber(f.e), f.t, runtime)
  end
end
for _, task_id in ipairs(order) do
  moved(chains[task_id])
end
for _, key in ipairs(summed) do
  local of = sums[key]
  for _, field in ipairs(of.fields) do
    local by = of.by[field]
    -- A new field (the minute's first of its kind) sets the hour's expiry: few calls.
    if redis.call('HINCRBY', key, field, string.format('%.0f', by)) == by and expiring[key] then
      redis.call('PEXPIRE', key, STATS_TTL)
    end
  end
end
-- Trimmed up to the batch's last entry (MINID keeps ids at or above the next id).
local ms, seq = string.match(last_id, '^(%d+)-(%d+)$')
redis.call('XTRIM', stream, 'MINID', ms .. '-' .. string.format('%.0f', tonumber(seq) + 1))
return {'indexed', #entries}
