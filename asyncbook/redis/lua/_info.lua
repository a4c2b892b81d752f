-- Task info for the operator console, kept by the scripts that write the task (no
-- extra round trip). Short fields live in the task's own hash, which stays compact:
-- c (created ms), n (Celery task name), q (queue), pid and rid (parent and root ids),
-- w (the worker of the last attempt), s (its start ms), e (end ms), x (exception type),
-- i (1: the task has a companion hash).
-- Long ones (a args, k kwargs, tb traceback) live in a companion hash <tag>:i:<id>
-- that ends with the task. Every key below shares the task's hash tag (one slot), and
-- is named by KeySchema in _keys.py.
-- Indexes: <tag>:names (name -> last created ms), <tag>:w:<worker> (a worker's latest tasks),
-- <tag>:wc:<worker> (its counts), <tag>:workers (worker -> last seen ms: its latest
-- start or heartbeat); prune forgets a worker unseen for a week, with its keys.
-- The state indexes (<tag>:idx:<state>, <tag>:n:<state>:<name>) and the sort indexes
-- (<tag>:by:<field>) are not written here: each write appends one entry to the index's
-- change stream (index_change), which index.lua applies later, in batches.
-- Stats: <tag>:s:<hour>:<name> and <tag>:sa:<hour> (every name): per minute of the
-- hour, '<minute>:<code>' counts (S started, succeeded, failed, expired, cancelled),
-- and '<minute>:r<i>' the ends with a runtime in bucket i, succeeded and failed in one
-- number (STATS_FAILED_UNIT), kept a day and an hour; <tag>:nt holds running totals per
-- name ('<name>|<code>', '<name>|<code>:<i>' for an end with a runtime in bucket i, plus
-- '<name>|sum' of runtimes) for Prometheus counters. One HINCRBY per hash and event;
-- a code's count is the sum over its fields (readers: _console.py).

local WORKER_TASKS = 1000          -- a worker's index keeps its latest tasks only
local STATS_TTL = 25 * 3600000     -- per-minute stats reach back a day
local STATS_FAILED_UNIT = 2147483648  -- '<minute>:r<i>': a failed run adds 2^31, a
                                      -- succeeded one 1 (a minute never has 2^31)
local RUNTIME_BOUNDS = {100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000,
  300000, 600000, 1800000, 3600000}

-- Keys named by what only the task's record says (its name, group, worker, the hours
-- its counts fall in) are sent by the caller in an info block (KeySchema.info_block in
-- _keys.py): a script never builds a key name. Where the record names a fact the
-- caller did not send, the script writes nothing and answers {'!facts', ...}; the
-- caller sends the block again with those facts (see info_missing).
-- The block: KEYS (from k) info hash, names, name totals, workers, group hash, group
-- members, then per hour its two stats hashes (every name's, the name's), then per worker its tasks and counts;
-- ARGV (from a) the name ('' none), the group id as JSON ('' none), the hours and the
-- workers (the hours as integers joined by ',', the workers as a JSON array of strings).
-- The block's ARGV fields (InfoBlockArgs in redis/_script_args.py), in order.
local INFO_ARGV = {'name', 'group_id_json', 'hours', 'workers_json'}

local function info_block(KEYS, k, ARGV, a)
  local f = fields_at(ARGV, a, INFO_ARGV)
  local c = {info = KEYS[k], names = KEYS[k + 1], totals = KEYS[k + 2], workers = KEYS[k + 3],
    group = KEYS[k + 4], members = KEYS[k + 5], name = f.name, gid = f.group_id_json,
    hours = {}, of_worker = {}}
  local at = k + 6
  for hour in string.gmatch(f.hours, '[^,]+') do
    c.hours[hour] = {KEYS[at], KEYS[at + 1]}
    at = at + 2
  end
  if f.workers_json ~= '[]' then
    for _, worker in ipairs(cjson.decode(f.workers_json)) do
      c.of_worker[worker] = {tasks = KEYS[at], counts = KEYS[at + 1]}
      at = at + 2
    end
  end
  c.after = at  -- the KEYS slot after the block
  return c
end

local HOURS = {}  -- hour_of's answers in this call, by time

local function hour_of(at)
  local hour = HOURS[at]
  if not hour then
    hour = string.format('%.0f', math.floor(at / 3600000))
    HOURS[at] = hour
  end
  return hour
end

-- The facts a block lacks for these events on task t (each {kind, at, worker}: the
-- event's type, its atMs or nil, the worker a start names), as the '!facts' answer:
-- {'!facts', name, group id JSON, last worker, deadline}; nil when the block has all.
local function info_missing(c, t, events)
  local lacks = t.gid and t.gid ~= c.gid
  local worker = t.w
  for _, e in ipairs(events) do
    local kind = e[1]
    if kind ~= 'progress' and t.n and t.n ~= c.name then
      lacks = true  -- a change of state moves the task between its name's indexes
    end
    if kind == 'start' then
      worker = e[3]
      lacks = lacks or (worker and not c.of_worker[worker])
    elseif (kind == 'succeed' or kind == 'fail')
        and ((worker and not c.of_worker[worker]) or (t.w and not c.of_worker[t.w])) then
      lacks = true  -- it counts for the start's worker, or for t.w if that start is refused
    end
    if e[2] and not c.hours[hour_of(e[2])] then
      lacks = true
    end
    if (kind == 'deadline' or kind == 'expire' or (e[2] and e[2] >= tonumber(t.exp)))
        and not c.hours[hour_of(tonumber(t.exp))] then
      lacks = true
    end
  end
  if lacks then
    return {'!facts', t.n or '', t.gid or '', t.w or '', t.exp}
  end
  return nil
end

local function runtime_bucket(ms)
  for i, bound in ipairs(RUNTIME_BOUNDS) do
    if ms <= bound then
      return i - 1
    end
  end
  return #RUNTIME_BOUNDS
end

-- One count (and a runtime) of one minute, for the task's name and for every name.
local function count_minute(c, name, at, code, runtime)
  local field, minute_code, by = code, code, 1
  if runtime then
    local bucket = runtime_bucket(runtime)
    field, minute_code = code .. ':' .. bucket, 'r' .. bucket
    by = code == 'failed' and STATS_FAILED_UNIT or 1
  end
  local minute_field = (math.floor(at / 60000) % 60) .. ':' .. minute_code
  local hour = c.hours[hour_of(at)]
  local keys = {hour[1]}
  if name then
    keys[2] = hour[2]
  end
  for _, key in ipairs(keys) do
    -- A new field (the minute's first of its kind) sets the hour's expiry: few calls.
    if redis.call('HINCRBY', key, minute_field, by) == by then
      redis.call('PEXPIRE', key, STATS_TTL)
    end
  end
  if name then
    redis.call('HINCRBY', c.totals, name .. '|' .. field, 1)
    if runtime then
      redis.call('HINCRBY', c.totals, name .. '|sum', runtime)
    end
  end
end

-- create: the info the publisher gave (given: c, n, q, pid, rid, a, k as create.lua's
-- ARGV has them, '' where not given; KEYS from 8 on: see create.lua). Its short fields
-- are appended to fields, which the caller writes into the task's hash (and its index
-- change: create_task).
local function info_created(KEYS, task_id, seq, given, children_keep_ms, fields)
  fields[#fields + 1] = 'c'
  fields[#fields + 1] = given.c
  for _, field in ipairs({'n', 'q', 'pid', 'rid'}) do
    if given[field] ~= '' then
      fields[#fields + 1] = field
      fields[#fields + 1] = given[field]
    end
  end
  local long = {}
  for _, field in ipairs({'a', 'k'}) do
    if given[field] ~= '' then
      long[#long + 1] = field
      long[#long + 1] = given[field]
    end
  end
  if #long > 0 then
    fields[#fields + 1] = 'i'  -- it has a companion hash
    fields[#fields + 1] = '1'
  end
  if given.n ~= '' then
    redis.call('ZADD', KEYS[9], given.c, given.n)
  end
  if #long > 0 then
    redis.call('HSET', KEYS[8], unpack(long))
  end
  if given.pid ~= '' then
    redis.call('ZADD', KEYS[10], seq, task_id)
    local keep = tonumber(children_keep_ms)
    if keep then
      redis.call('PEXPIRE', KEYS[10], keep)
    end
  end
end

-- One entry on the index's change stream (KeySchema.index_changes) for task t:
-- change holds 'i' id, 'q' creation order, then what moved: 'f' the state before (none
-- at a create), 't' the state after, 's' and 'a' a start's ms and the attempt count,
-- 'e' the end ms, 'r' the runtime (ms); 'n' (the task's name) is added here. Nothing is
-- written when nothing moved (a progress report). index.lua applies the entries.
local function index_change(stream, t, change)
  if #change <= 4 then
    return
  end
  if t.n then
    change[#change + 1] = 'n'; change[#change + 1] = t.n
  end
  redis.call('XADD', stream, '*', unpack(change))
end

-- The hash fields of a start (at_text, on worker), for the caller's HSET of the task.
local function started_fields(fields, at_text, worker)
  fields[#fields + 1] = 's'
  fields[#fields + 1] = at_text
  if worker then
    fields[#fields + 1] = 'w'
    fields[#fields + 1] = worker
  end
end

-- An attempt started on a worker at at_text: the worker's index and counts, the
-- minute's count (the caller wrote started_fields into the task's hash).
local function info_started(c, t, task_id, at_text, worker)
  t.s, t.w = at_text, worker
  local at = tonumber(at_text)
  if worker then
    local keys = c.of_worker[worker]
    redis.call('ZADD', keys.tasks, t.seq, task_id)
    local started = redis.call('HINCRBY', keys.counts, 'started', '1')
    if started % 64 == 0 then  -- trimmed now and then: at most 64 over WORKER_TASKS
      redis.call('ZREMRANGEBYRANK', keys.tasks, 0, -WORKER_TASKS - 1)
    end
    redis.call('ZADD', c.workers, 'GT', at_text, worker)
  end
  count_minute(c, t.n, at, 'S', nil)
end

-- The task reached a terminal state at at_text (an attempt's end, or expire/cancel):
-- the worker's counts, the minute's count and runtime (the caller wrote 'e'). Returns
-- the runtime (ms) of a run that went from running to succeeded or failed, else nil.
local function info_ended(c, t, task_id, old, at_text, retention)
  local at = tonumber(at_text)
  local runtime
  if t.s and old == 'running' and (t.st == 'succeeded' or t.st == 'failed') then
    runtime = math.max(0, math.floor(at - tonumber(t.s)))
    if t.w then
      redis.call('HINCRBY', c.of_worker[t.w].counts, t.st, '1')
    end
  end
  count_minute(c, t.n, at, t.st, runtime)
  if retention and t.i then
    redis.call('PEXPIRE', c.info, retention)
  end
  return runtime
end

-- What the worker said of a failure (apply.lua's failure: '' or a JSON object with
-- exception and traceback), kept with the task.
local function info_failure(c, task_key, t, patch)
  if patch == nil or patch == '' then
    return
  end
  local ok, given = pcall(cjson.decode, patch)
  if not ok or type(given) ~= 'table' then
    return
  end
  local fields = {}
  if type(given.exception) == 'string' then
    fields[1], fields[2] = 'x', given.exception
  end
  if type(given.traceback) == 'string' then
    redis.call('HSET', c.info, 'tb', given.traceback)
    fields[#fields + 1], fields[#fields + 2] = 'i', '1'
    t.i = '1'
  end
  if #fields > 0 then
    redis.call('HSET', task_key, unpack(fields))
  end
end

-- The worker named by a start event's JSON (an empty name names none).
local function worker_of(event_json)
  local ok, event = pcall(cjson.decode, event_json)
  if ok and type(event) == 'table' and type(event.worker) == 'string' and event.worker ~= '' then
    return event.worker
  end
  return nil
end
