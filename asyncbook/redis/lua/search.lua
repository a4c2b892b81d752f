-- search: one page of the console's task search, newest or oldest first, with totals.
-- KEYS: the indexes to count and walk: 1..6 one per state (STATE_NAMES order) of all
--       tasks or of one task name, or 1 a worker's latest tasks (of every state); then
--       the task hash and history of each id in given_ids_json
-- Returns: {rows, next, totals, exact}: rows {taskJSON, info fields} per task (info as
--          info.lua's fields, then a k tb empty), next the cursor of the next page ('' when
--          none), totals {state, count, ...}, exact '1' | '0'
--          | {'!keys', id...}: the walk met ids whose keys given_ids_json lacks (these, and the
--          ones it would read next); sent again with them

-- ARGV: SearchArgs (_scripts.py)
local given_ids_json = ARGV[1]  -- ids whose keys follow the indexes (JSON array)
local order = ARGV[2]           -- 'newest' | 'oldest'
local limit = tonumber(ARGV[3])  -- the page size
local cursor_given = ARGV[4]    -- a creation order score to continue after; '' from the start
local state = ARGV[5]           -- '' any
local name = ARGV[6]            -- '' any; checked per task only with a worker index
local id_prefix = ARGV[7]       -- '' any
local since_ms = ARGV[8]        -- created at or after ('' any)
local until_ms = ARGV[9]        -- created at or before ('' any)
local budget = tonumber(ARGV[10])  -- how many index entries one call may examine
local totals_by = ARGV[11]      -- 'card' (the indexes are per state and nothing else
                                -- filters: the totals are their sizes) | 'count' (count
                                -- matching tasks, walking at most budget entries)

local STATES = {'queued', 'running', 'succeeded', 'failed', 'expired', 'cancelled'}
local newest = order == 'newest'
local state_wanted = state  -- set aside while the totals are counted
local since, before = tonumber(since_ms), tonumber(until_ms)
local SLACK = 60000  -- creation order and creation time agree to within a minute
local given = cjson.decode(given_ids_json)
local per_state = #KEYS - 2 * #given == 6
local keys_of = {}
for i, id in ipairs(given) do
  local at = #KEYS - 2 * #given + 2 * i - 1
  keys_of[id] = {KEYS[at], KEYS[at + 1]}
end

-- 'take', 'skip' or 'stop' (no later entry of this index can match) for one entry.
local function verdict(id, state_of_index, check_state)
  if id_prefix ~= '' and string.sub(id, 1, #id_prefix) ~= id_prefix then
    return 'skip'
  end
  if not keys_of[id] then
    return 'need'
  end
  local f = redis.call('HMGET', keys_of[id][1], 'st', 'n', 'c')
  if not f[1] then
    return 'skip'  -- its record expired; prune drops the entry
  end
  if check_state and state_wanted ~= '' and f[1] ~= state_wanted then
    return 'skip'
  end
  if not per_state and name ~= '' and f[2] ~= name then
    return 'skip'
  end
  local created = tonumber(f[3])
  if created then
    if since and created < since then
      return (newest and created < since - SLACK) and 'stop' or 'skip'
    end
    if before and created > before then
      return (not newest and created > before + SLACK) and 'stop' or 'skip'
    end
  elseif since or before then
    return 'skip'
  end
  return 'take', state_of_index or f[1]
end

-- A reader of one index in the page's order, from a cursor, a batch at a time.
local function reader(key, cursor, batch)
  local r = {key = key, buf = {}, pos = 1, done = false, from = cursor}
  function r.head()
    if r.pos > #r.buf then
      if r.done then return nil end
      local from = r.from
      local rows
      if newest then
        rows = redis.call('ZREVRANGEBYSCORE', key, from and ('(' .. from) or '+inf', '-inf',
          'WITHSCORES', 'LIMIT', 0, batch)
      else
        rows = redis.call('ZRANGEBYSCORE', key, from and ('(' .. from) or '-inf', '+inf',
          'WITHSCORES', 'LIMIT', 0, batch)
      end
      r.buf, r.pos = rows, 1
      if #rows < 2 * batch then r.done = true end
      if #rows == 0 then return nil end
      r.from = rows[#rows]
    end
    return r.buf[r.pos], tonumber(r.buf[r.pos + 1])
  end
  function r.next()
    r.pos = r.pos + 2
  end
  return r
end

-- Walks the indexes merged in the page's order, calling visit(id, score, state_of_index)
-- until it answers false or budget entries were examined; answers whether it ran out.
-- A visit that answers 'need' stops the walk: it answers 'need' and the ids the
-- readers hold from there on.
local function walk(indexes, cursor, batch, visit)
  local readers = {}
  for i, entry in ipairs(indexes) do
    readers[i] = {reader(entry[1], cursor, batch), entry[2]}
  end
  local examined = 0
  while true do
    local best, best_score, best_id
    for i, r in ipairs(readers) do
      local id, score = r[1].head()
      if id and (not best or (newest and score > best_score) or (not newest and score < best_score)) then
        best, best_score, best_id = i, score, id
      end
    end
    if not best then
      return false
    end
    if examined >= budget then
      return true, best_score
    end
    examined = examined + 1
    local r = readers[best]
    r[1].next()
    local answer = visit(best_id, best_score, r[2])
    if answer == 'need' then
      local ids = {best_id}
      for _, other in ipairs(readers) do
        if other[1].head() then
          for j = other[1].pos, #other[1].buf, 2 do
            ids[#ids + 1] = other[1].buf[j]
          end
        end
      end
      return 'need', ids
    elseif answer == 'stop' then
      table.remove(readers, best)
    elseif answer == false then
      return false
    end
  end
end

local sources = {}
if per_state then
  for i, state in ipairs(STATES) do
    if state_wanted == '' or state_wanted == state then
      sources[#sources + 1] = {KEYS[i], state}
    end
  end
else
  sources[1] = {KEYS[1], nil}
end

local cursor = cursor_given ~= '' and cursor_given or nil
local ids, scores, last_seen = {}, {}, nil
local function lacking(ids)
  local out = {'!keys'}
  for _, id in ipairs(ids) do
    if not keys_of[id] then out[#out + 1] = id end
  end
  return out
end

local out_of_budget, stop_score = walk(sources, cursor, math.min(limit + 1, 200), function(id, score, st)
  last_seen = score
  local answer = verdict(id, st, not per_state)
  if answer == 'take' then
    ids[#ids + 1], scores[#scores + 1] = id, score
    if #ids > limit then
      return false
    end
  end
  return answer
end)
if out_of_budget == 'need' then
  return lacking(stop_score)
end

local next_cursor = ''
if #ids > limit then
  ids[#ids], scores[#scores] = nil, nil
  next_cursor = string.format('%.0f', scores[#scores])
elseif out_of_budget and last_seen then
  next_cursor = string.format('%.0f', last_seen)
end

local rows = {}
for i, id in ipairs(ids) do
  local key = keys_of[id][1]
  local t = load_task(key)
  if t and not t.damaged then
    local fields = redis.call('HMGET', key, 'c', 'n', 'q', 'pid', 'rid', 'gid', 'w', 's', 'e',
      'x', 'att', 'st', 'ro', 'ra', 'rby', 'rwhy')
    rows[#rows + 1] = {render_task(t, keys_of[id][2], false), fields}
  end
end

local totals, exact = {}, '1'
if totals_by == 'card' then
  for i, state in ipairs(STATES) do
    totals[#totals + 1] = state
    totals[#totals + 1] = redis.call('ZCARD', KEYS[i])
  end
else
  local counts = {}
  local everything = {}
  if per_state then
    for i, state in ipairs(STATES) do everything[i] = {KEYS[i], state} end
  else
    everything[1] = {KEYS[1], nil}
  end
  local saved = state_wanted
  state_wanted = ''
  local ran_out, needed = walk(everything, nil, 500, function(id, _, st)
    local answer, state = verdict(id, st, false)
    if answer == 'take' then
      counts[state] = (counts[state] or 0) + 1
    end
    return answer
  end)
  if ran_out == 'need' then
    return lacking(needed)
  end
  state_wanted = saved
  if ran_out then exact = '0' end
  for _, state in ipairs(STATES) do
    totals[#totals + 1] = state
    totals[#totals + 1] = counts[state] or 0
  end
end
return {rows, next_cursor, totals, exact}
