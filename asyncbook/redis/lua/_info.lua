-- Task info for the operator console, kept by the scripts that write the task (no
-- extra round trip). Short fields live in the task's own hash, which stays compact:
-- c (created ms), n (Celery task name), q (queue), pid and rid (parent and root ids),
-- w (the worker of the last attempt), s (its start ms), e (end ms), x (exception type),
-- i (1: the task has a companion hash).
-- Long ones (a args, k kwargs, tb traceback) live in a companion hash <tag>:i:<id>
-- that ends with the task. Every key below shares the task's hash tag (one slot), and
-- is named by KeySchema in _keys.py.
-- The console's indexes and counts are not written here: each write appends one entry
-- to the index's change stream (index_change), which index.lua applies later, in
-- batches (the state, name, sort and worker indexes, the names, the stats, the name
-- totals: index.lua says what each holds).

-- The keys named by what only the task's record says (its group) are sent by the caller
-- in an info block (KeySchema.info_block in _keys.py): a script never builds a key name.
-- Where the record names a group the caller did not send, the script writes nothing and
-- answers {'!facts', ...}; the caller sends the block again with it (see info_missing).
-- The block: KEYS (from k) info hash, group hash, group members; ARGV (from a) the group
-- id as JSON ('' none).
-- The block's ARGV fields (InfoBlockArgs in redis/_script_args.py), in order.
local INFO_ARGV = {'group_id_json'}

local function info_block(KEYS, k, ARGV, a)
  local f = fields_at(ARGV, a, INFO_ARGV)
  return {info = KEYS[k], group = KEYS[k + 1], members = KEYS[k + 2], gid = f.group_id_json,
    after = k + 3}  -- after: the KEYS slot after the block
end

-- The facts a block lacks for task t, as the '!facts' answer: {'!facts', name, group id
-- JSON, last worker, deadline}; nil when the block has all (events: unused, each
-- {kind, at, worker}).
local function info_missing(c, t, events)
  if t.gid and t.gid ~= c.gid then
    return {'!facts', t.n or '', t.gid or '', t.w or '', t.exp}
  end
  return nil
end

-- create: the info the publisher gave (given: c, n, q, pid, rid, tc, a, k as create.lua's
-- ARGV has them, '' where not given; KEYS from 8 on: see create.lua). Its short fields
-- are appended to fields, which the caller writes into the task's hash (and its index
-- change: create_task).
local function info_created(KEYS, task_id, seq, given, children_keep_ms, fields)
  fields[#fields + 1] = 'c'
  fields[#fields + 1] = given.c
  for _, field in ipairs({'n', 'q', 'pid', 'rid', 'tc'}) do
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
  if #long > 0 then
    redis.call('HSET', KEYS[8], unpack(long))
  end
  if given.pid ~= '' then
    redis.call('ZADD', KEYS[9], seq, task_id)
    local keep = tonumber(children_keep_ms)
    if keep then
      redis.call('PEXPIRE', KEYS[9], keep)
    end
  end
end

-- One entry on the index's change stream (KeySchema.index_changes) for task t (task_id)
-- of what moved (ch, a table): its fields 'i' the id, 'm' the numbers and states joined by
-- '|' in this order, q f t c s a e r (empty where absent: q the creation order, f the
-- state before (none at a create), t the state after, c the created ms (a create), s and
-- a a start's ms and the attempt count, e the end ms, r the runtime (ms)), then 'n' the
-- task's name and 'w' the worker (of a start, or of the run that ended) when known. One
-- packed field keeps the entry small to write and to read back. Nothing is written when
-- nothing moved (a progress report). index.lua applies them. The fields are written out,
-- not looped over: one concatenation and one XADD of literal fields cost Redis about
-- 12 k instructions less a write than a table of them (docs/benchmarks.md, "Two levers
-- of this stop").
local function index_change(stream, t, task_id, ch)
  if not (ch.t or ch.s or ch.e) then
    return
  end
  local m = (ch.q or '') .. '|' .. (ch.f or '') .. '|' .. (ch.t or '') .. '|' .. (ch.c or '')
    .. '|' .. (ch.s or '') .. '|' .. (ch.a or '') .. '|' .. (ch.e or '') .. '|' .. (ch.r or '')
  local n, w = t.n, ch.w
  if n and w then
    redis.call('XADD', stream, '*', 'i', task_id, 'm', m, 'n', n, 'w', w)
  elseif n then
    redis.call('XADD', stream, '*', 'i', task_id, 'm', m, 'n', n)
  elseif w then
    redis.call('XADD', stream, '*', 'i', task_id, 'm', m, 'w', w)
  else
    redis.call('XADD', stream, '*', 'i', task_id, 'm', m)
  end
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

-- The task reached a terminal state (old: the state before the change): the info hash
-- kept as long as the record (retention: ms text, or nil). Returns the runtime (ms) of
-- a run that went from running to succeeded or failed at at_text, else nil.
local function info_ended(c, t, old, at_text, retention)
  if retention and t.i then
    redis.call('PEXPIRE', c.info, retention)
  end
  if t.s and old == 'running' and (t.st == 'succeeded' or t.st == 'failed') then
    return math.max(0, math.floor(tonumber(at_text) - tonumber(t.s)))
  end
  return nil
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
