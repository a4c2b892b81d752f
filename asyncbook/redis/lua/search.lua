-- search: one page of the console's task search, in creation order or by a sort index,
-- with totals.
-- KEYS: with sort_field, 1 that field's sort index (<tag>:by:<field>); then the indexes
--       to count and walk: 1..6 one per state (STATE_NAMES order) of all tasks or of one
--       task name, or 1 a worker's latest tasks (of every state); then the task hash,
--       history and info hash of each id in given_ids_json
-- Returns: {rows, next, totals, exact, scanned, complete} (or, with peek, {'!at', id,
--          position, ...}): rows {taskJSON, info fields,
--          matched_by, position} per task (info as info.lua's fields; matched_by 'id' |
--          'name' | 'text' | '' without q; position the cursor of a page that ends with
--          it: a sharded book merges pages by it), next the cursor of the next page ('' when none),
--          totals {state, count, ...}, exact '1' | '0', scanned the entries the page's
--          walk examined, complete '1' | '0' (it stopped before its budget ran out)
--          | {'!keys', id...}: the walk met ids whose keys given_ids_json lacks (these, and the
--          ones it would read next); sent again with them

-- ARGV: SearchArgs (redis/_script_args.py)
local given_ids_json = ARGV[1]  -- ids whose keys follow the indexes (JSON array)
local order = ARGV[2]           -- 'desc' | 'asc'
local limit = tonumber(ARGV[3])  -- the page size
local cursor_given = ARGV[4]    -- '' from the start; by creation a creation order score;
                                -- by a sort index '<score>:<id>' (in the index) or
                                -- '~<creation order score>' (among tasks without the field)
local state = ARGV[5]           -- '' any
local name = ARGV[6]            -- '' any; checked per task only with a worker or sort index
local q = ARGV[7]               -- '' any: else an id prefix, or one of names_json, or text
local since_ms = ARGV[8]        -- created at or after ('' any)
local until_ms = ARGV[9]        -- created at or before ('' any)
local budget = tonumber(ARGV[10])  -- how many index entries one walk may examine
local totals_by = ARGV[11]      -- 'card' (the indexes are per state and nothing else
                                -- filters: the totals are their sizes) | 'count' (count
                                -- matching tasks, walking at most budget entries)
local names_json = ARGV[12]     -- the task names q matches (JSON array)
local text = ARGV[13]           -- '1': q also matches (case-insensitively) a task's args,
                                -- kwargs, exception, traceback or error
local worker = ARGV[14]         -- '' any; checked per task only with a sort index
local sort_field = ARGV[15]     -- '' creation order; else KEYS[1] is its sort index
local unnamed = ARGV[16]        -- '1': only tasks without a name (the end of a name sort)
local peek = ARGV[17]           -- '1': answer {'!at', id, position, ...}, the first limit + 1
                                -- entries of the walk in creation order (no verdicts, no
                                -- rows): where a sharded page's rows fall

local STATES = {'queued', 'running', 'succeeded', 'failed', 'expired', 'cancelled'}
local newest = order == 'desc'
local keyed = sort_field ~= ''
local base = keyed and 1 or 0
local state_wanted = state  -- set aside while the totals are counted
local since, before = tonumber(since_ms), tonumber(until_ms)
local SLACK = 60000  -- creation order and creation time agree to within a minute
local given = cjson.decode(given_ids_json)
local per_state = #KEYS - base - 3 * #given == 6
local keys_of = {}
for i, id in ipairs(given) do
  local at = #KEYS - 3 * #given + 3 * i - 2
  keys_of[id] = {KEYS[at], KEYS[at + 1], KEYS[at + 2]}
end
local q_names = {}
for _, known in ipairs(cjson.decode(names_json)) do q_names[known] = true end
local needle = string.lower(q)

-- How q matches a task ('id', 'name', 'text'), or nil.
local function q_match(id, key, task_name)
  if string.sub(id, 1, #q) == q then return 'id' end
  if task_name and q_names[task_name] then return 'name' end
  if text ~= '1' then return nil end
  local f = redis.call('HMGET', key, 'x', 'err')
  local long = redis.call('HMGET', keys_of[id][3], 'a', 'k', 'tb')
  for _, value in ipairs({f[1], f[2], long[1], long[2], long[3]}) do
    if value and string.find(string.lower(value), needle, 1, true) then return 'text' end
  end
  return nil
end

-- 'take', 'skip' or 'stop' (no later entry of this index can match) for one entry; a
-- take also answers the task's state and how q matched. by_creation: the index is in
-- creation order; check_state: it is not one state's.
local function verdict(id, state_of_index, check_state, by_creation)
  if q ~= '' and text ~= '1' and next(q_names) == nil and string.sub(id, 1, #q) ~= q then
    return 'skip'  -- an id prefix alone: decided without reading the task
  end
  if not keys_of[id] then
    return 'need'
  end
  local key = keys_of[id][1]
  local f = redis.call('HMGET', key, 'st', 'n', 'c', 'w')
  if not f[1] then
    return 'skip'  -- its record expired; prune drops the entry
  end
  if check_state and state_wanted ~= '' and f[1] ~= state_wanted then
    return 'skip'
  end
  if (keyed or not per_state) and name ~= '' and f[2] ~= name then
    return 'skip'
  end
  if unnamed == '1' and f[2] then
    return 'skip'
  end
  if keyed and worker ~= '' and f[4] ~= worker then
    return 'skip'
  end
  local created = tonumber(f[3])
  if created then
    if since and created < since then
      return (by_creation and newest and created < since - SLACK) and 'stop' or 'skip'
    end
    if before and created > before then
      return (by_creation and not newest and created > before + SLACK) and 'stop' or 'skip'
    end
  elseif since or before then
    return 'skip'
  end
  local matched = ''
  if q ~= '' then
    matched = q_match(id, key, f[2] or nil)
    if not matched then return 'skip' end
  end
  return 'take', state_of_index or f[1], matched
end

-- Whether the filters skip entries of the index walked (a page then asks for the keys
-- of more entries than it shows at once: fewer round trips).
local sparse = q ~= '' or since ~= nil or before ~= nil or worker ~= '' or unnamed == '1'
  or (keyed and (name ~= '' or state_wanted ~= '')) or (not per_state and name ~= '')

-- A reader of one index in the page's order, a batch at a time: by score from a
-- creation order cursor, or (ranked) by rank from a rank.
local function reader(key, cursor, batch, ranked)
  local r = {key = key, buf = {}, pos = 1, done = false, from = cursor}
  function r.head()
    if r.pos > #r.buf then
      if r.done then return nil end
      local from = r.from
      local rows
      if ranked then
        local range = newest and 'ZREVRANGE' or 'ZRANGE'
        rows = redis.call(range, key, from, from + batch - 1, 'WITHSCORES')
        r.from = from + batch
      elseif newest then
        rows = redis.call('ZREVRANGEBYSCORE', key, from and ('(' .. from) or '+inf', '-inf',
          'WITHSCORES', 'LIMIT', 0, batch)
      else
        rows = redis.call('ZRANGEBYSCORE', key, from and ('(' .. from) or '-inf', '+inf',
          'WITHSCORES', 'LIMIT', 0, batch)
      end
      r.buf, r.pos = rows, 1
      if #rows < 2 * batch then r.done = true end
      if #rows == 0 then return nil end
      if not ranked then r.from = rows[#rows] end
    end
    return r.buf[r.pos], r.buf[r.pos + 1]
  end
  function r.next()
    r.pos = r.pos + 2
  end
  return r
end

-- The entry of these readers that comes first in the page's order (by creation, merged
-- by score; a ranked reader is alone): its reader's position, id and score text.
local function first_of(readers)
  local best, best_score, best_id, best_text
  for i, r in ipairs(readers) do
    local id, score_text = r[1].head()
    local score = tonumber(score_text)
    if id and (not best or (newest and score > best_score) or (not newest and score < best_score)) then
      best, best_score, best_id, best_text = i, score, id, score_text
    end
  end
  return best, best_id, best_text
end

-- Walks the readers ({reader, state of its index}) in the page's order, calling
-- visit(id, score text, state_of_index) until it answers false or allowance entries
-- were examined; answers whether it ran out (and the score text of the entry it
-- stopped at) and how many entries it examined. A visit that answers 'need' stops the
-- walk: it answers 'need' and the ids the walk would meet from there (twice as many
-- as were given, at least a page's, ten pages' with sparse filters, all it may examine
-- with q: a scan), to be sent again with their keys.
local function walk(readers, visit, allowance)
  local examined = 0
  while true do
    local best, best_id, best_text = first_of(readers)
    if not best then
      return false, nil, examined
    end
    if examined >= allowance then
      return true, best_text, examined
    end
    examined = examined + 1
    local r = readers[best]
    local answer = visit(best_id, best_text, r[2])
    if answer == 'need' then
      local first_ask = q ~= '' and allowance or sparse and 10 * (limit + 1) or limit + 1
      local ids, ahead = {}, math.min(allowance - examined + 1, math.max(2 * #given, first_ask))
      while #ids < ahead do
        local at, id = first_of(readers)
        if not at then break end
        ids[#ids + 1] = id
        readers[at][1].next()
      end
      return 'need', ids, examined
    end
    r[1].next()
    if answer == 'stop' then
      table.remove(readers, best)
    elseif answer == false then
      return false, nil, examined
    end
  end
end

-- Readers of the creation order indexes the filters pick, from a creation order cursor.
local function creation_readers(cursor, batch, only_wanted)
  local readers = {}
  if per_state then
    for i, st in ipairs(STATES) do
      if not only_wanted or state_wanted == '' or state_wanted == st then
        readers[#readers + 1] = {reader(KEYS[base + i], cursor, batch, false), st}
      end
    end
  else
    readers[1] = {reader(KEYS[base + 1], cursor, batch, false), nil}
  end
  return readers
end

local function lacking(ids)
  local out = {'!keys'}
  for _, id in ipairs(ids) do
    if not keys_of[id] then out[#out + 1] = id end
  end
  return out
end

-- The page: ids taken (how q matched each, and each one's cursor), the entries its
-- walks examined, and the cursor of the next page.
local ids, matched_by, positions, scanned = {}, {}, {}, 0
local batch = math.min(limit + 1, 200)
local next_cursor, last_position = '', nil

if peek == '1' then
  local readers = creation_readers(cursor_given ~= '' and cursor_given or nil, batch, true)
  local out = {'!at'}
  for _ = 1, limit + 1 do
    local at, id, score_text = first_of(readers)
    if not at then break end
    out[#out + 1] = id
    out[#out + 1] = string.format('%.0f', tonumber(score_text))
    readers[at][1].next()
  end
  return out
end

-- Visits one entry for the page; false once the page has one task more than it shows.
local function visit_entry(id, position, st, check_state, by_creation, skip)
  last_position = position
  if skip and skip(id) then return 'skip' end
  local answer, _, matched = verdict(id, st, check_state, by_creation)
  if answer == 'take' then
    ids[#ids + 1], matched_by[#ids + 1], positions[#ids + 1] = id, matched, position
    if #ids > limit then return false end
  end
  return answer
end

local function creation_position(prefix)
  return function(score) return prefix .. string.format('%.0f', tonumber(score)) end
end

-- Walks readers for the page (position(score text, id) names an entry's cursor);
-- answers like walk, and sets next_cursor.
local function page_walk(readers, position, allowance, check_state, by_creation, skip)
  local out, stop_at, examined = walk(readers, function(id, score, st)
    return visit_entry(id, position(score, id), st, check_state, by_creation, skip)
  end, allowance)
  scanned = scanned + examined
  if out == 'need' then return out, stop_at end
  if #ids > limit then
    ids[#ids], matched_by[#ids], positions[#ids] = nil, nil, nil
    next_cursor = positions[#ids]
  elseif out and last_position then
    next_cursor = last_position
  end
  return out, nil
end

-- The rank a walk of the sort index starts at, after the '<score>:<id>' cursor (and
-- whether ties of its score that sort before its id must be skipped: it moved).
local function sort_start(index, cursor)
  if not cursor then return 0, nil, nil end
  local score_text, id = string.match(cursor, '^([^:]+):(.*)$')
  local score = tonumber(score_text)
  local at = redis.call('ZSCORE', index, id)
  if at and tonumber(at) == score then
    local rank = redis.call(newest and 'ZREVRANK' or 'ZRANK', index, id)
    return rank + 1, nil, nil
  end
  if newest then
    return redis.call('ZCOUNT', index, '(' .. score_text, '+inf'), score, id
  end
  return redis.call('ZCOUNT', index, '-inf', '(' .. score_text), score, id
end

-- Whether id a sorts before id b byte by byte, as Redis orders a sorted set's members
-- (Lua's < follows the server's locale).
local function bytes_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Whether entry a ({id, value or nil, creation order}) comes before b in the page's
-- order: by value, ties by id, then the entries without a value by creation.
local function comes_before(a, b)
  if a[2] and b[2] then
    if a[2] ~= b[2] then
      if newest then return a[2] > b[2] end
      return a[2] < b[2]
    end
    if newest then return bytes_before(b[1], a[1]) end
    return bytes_before(a[1], b[1])
  end
  if a[2] or b[2] then return a[2] ~= nil end
  if newest then return a[3] > b[3] end
  return a[3] < b[3]
end

-- Whether the page should sort the candidates itself: a state's or a name's indexes
-- holding few tasks next to the sort index, whose walk would mostly skip other tasks.
local function few_candidates(index)
  if not per_state then return false end
  local count = 0
  for i, st in ipairs(STATES) do
    if state_wanted == '' or state_wanted == st then
      count = count + redis.call('ZCARD', KEYS[base + i])
    end
  end
  return count <= budget and count * count < (limit + 1) * redis.call('ZCARD', index)
end

-- The entries in the page's order: sorted by value (numbers: the built-in order), ties
-- and the entries without a value after (by creation) apart, so that comes_before runs
-- only for ties.
local function in_order(entries)
  local groups, values, tail, of_seq = {}, {}, {}, {}
  for _, e in ipairs(entries) do
    if e[2] then
      local group = groups[e[2]]
      if not group then
        group = {}
        groups[e[2]], values[#values + 1] = group, e[2]
      end
      group[#group + 1] = e
    else
      tail[#tail + 1], of_seq[e[3]] = e[3], e
    end
  end
  table.sort(values)
  table.sort(tail)
  local out = {}
  local first, last, step = 1, #values, 1
  if newest then first, last, step = #values, 1, -1 end
  for i = first, last, step do
    local group = groups[values[i]]
    if #group > 1 then table.sort(group, comes_before) end
    for _, e in ipairs(group) do out[#out + 1] = e end
  end
  first, last = 1, #tail
  if newest then first, last = #tail, 1 end
  for i = first, last, step do out[#out + 1] = of_seq[tail[i]] end
  return out
end

-- The page from the candidates sorted here (each one's value read from the sort index),
-- in the order and with the cursors a walk of the index gives; answers like page_walk.
local function gathered_page(index)
  local entries = {}
  for i, st in ipairs(STATES) do
    if state_wanted == '' or state_wanted == st then
      local rows = redis.call('ZRANGE', KEYS[base + i], 0, -1, 'WITHSCORES')
      for from = 1, #rows, 1000 do  -- 500 ids a ZMSCORE (unpack's stack stays small)
        local ids_here = {}
        for j = from, math.min(#rows, from + 999), 2 do ids_here[#ids_here + 1] = rows[j] end
        local values = redis.call('ZMSCORE', index, unpack(ids_here))
        for n, id in ipairs(ids_here) do
          local value = values[n] or nil  -- false: not in the sort index
          entries[#entries + 1] = {id, value and tonumber(value) or nil,
            tonumber(rows[from + 2 * n - 1]), value, st}
        end
      end
    end
  end
  entries = in_order(entries)
  local after  -- the cursor as an entry: the page starts after it
  if string.sub(cursor_given, 1, 1) == '~' then
    after = {'', nil, tonumber(string.sub(cursor_given, 2))}
  elseif cursor_given ~= '' then
    local value, id = string.match(cursor_given, '^([^:]+):(.*)$')
    after = {id, tonumber(value)}
  end
  for i, e in ipairs(entries) do
    if after and comes_before(after, e) then
      after = nil  -- sorted: every later entry comes after the cursor too
    end
    if not after then
      scanned = scanned + 1
      local position = e[4] and (e[4] .. ':' .. e[1]) or ('~' .. string.format('%.0f', e[3]))
      local answer = visit_entry(e[1], position, e[5], false, false, nil)
      if answer == 'need' then
        -- The candidates passed their indexes' filters: only q and times skip more.
        local ask = (q ~= '' or since or before) and 10 * (limit + 1) or limit + 1
        local lack = {}
        for j = i, math.min(#entries, i + math.max(2 * #given, ask) - 1) do
          lack[#lack + 1] = entries[j][1]
        end
        return 'need', lack
      end
      if answer == false then break end
    end
  end
  if #ids > limit then
    ids[#ids], matched_by[#ids], positions[#ids] = nil, nil, nil
    next_cursor = positions[#ids]
  end
  return false, nil
end

local out, stop_at
if not keyed then
  local cursor = cursor_given ~= '' and cursor_given or nil
  out, stop_at = page_walk(creation_readers(cursor, batch, true), creation_position(''), budget,
    not per_state, true, nil)
elseif few_candidates(KEYS[1]) then
  out, stop_at = gathered_page(KEYS[1])
else
  local index = KEYS[1]
  local in_tail = string.sub(cursor_given, 1, 1) == '~'
  if not in_tail then
    local start, tie_score, tie_id = sort_start(index, cursor_given ~= '' and cursor_given or nil)
    local readers = {{reader(index, start, batch, true), nil}}
    -- Ties of a moved cursor's score sort by id: those up to its id were shown.
    local function shown(id)
      if not tie_id then return false end
      local score = tonumber(redis.call('ZSCORE', index, id))
      if score ~= tie_score then
        tie_id = nil
        return false
      end
      if newest then return not bytes_before(id, tie_id) end
      return not bytes_before(tie_id, id)
    end
    out, stop_at = page_walk(readers, function(score, id) return score .. ':' .. id end, budget,
      true, false, shown)
    in_tail = not out and next_cursor == ''  -- the index ended before the page did
  end
  if in_tail and out ~= 'need' then
    -- The tasks without the field come last, by creation order.
    local cursor = cursor_given ~= '' and string.sub(cursor_given, 1, 1) == '~'
      and string.sub(cursor_given, 2) or nil
    local function has_field(id) return redis.call('ZSCORE', index, id) ~= false end
    out, stop_at = page_walk(creation_readers(cursor, batch, true), creation_position('~'),
      budget - scanned, not per_state, true, has_field)
  end
end
if out == 'need' then
  return lacking(stop_at)
end
local complete = out and '0' or '1'

local rows = {}
for i, id in ipairs(ids) do
  local key = keys_of[id][1]
  local t = load_task(key)
  if t and not t.damaged then
    local fields = redis.call('HMGET', key, 'c', 'n', 'q', 'pid', 'rid', 'gid', 'w', 's', 'e',
      'x', 'att', 'st', 'ro', 'ra', 'rby', 'rwhy')
    rows[#rows + 1] = {render_task(t, keys_of[id][2], false), fields, matched_by[i], positions[i]}
  end
end

local totals, exact = {}, '1'
if totals_by == 'card' then
  for i, st in ipairs(STATES) do
    totals[#totals + 1] = st
    totals[#totals + 1] = redis.call('ZCARD', KEYS[base + i])
  end
else
  local counts = {}
  state_wanted = ''
  local ran_out, needed = walk(creation_readers(nil, 500, false), function(id, _, st)
    local answer, of_state = verdict(id, st, false, true)
    if answer == 'take' then
      counts[of_state] = (counts[of_state] or 0) + 1
    end
    return answer
  end, budget)
  if ran_out == 'need' then
    return lacking(needed)
  end
  if ran_out then exact = '0' end
  for _, st in ipairs(STATES) do
    totals[#totals + 1] = st
    totals[#totals + 1] = counts[st] or 0
  end
end
return {rows, next_cursor, totals, exact, scanned, complete}
