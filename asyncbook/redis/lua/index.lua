-- index: one batch of the index's change stream applied to the state, name and sort
-- indexes, then trimmed from the stream (the visibility store: the writes append the
-- changes, index_change in _info.lua; _indexer.py reads a batch and calls this). The
-- stream holds only what is still to be indexed, so the batch is the stream's head: if
-- its first entry is not the one the caller read, another indexer took it (nothing is
-- written; the caller reads again). One call applies the whole batch or nothing.
-- KEYS: 1 the change stream, 2..7 the state indexes (STATE_SLOT order), 8..11 the sort
--       indexes (started, ended, runtime, attempts), then per name of names_json its six
--       state indexes (STATE_SLOT order)
-- Returns: {'indexed', count} | {'!moved'}
-- ARGV: IndexArgs (redis/_script_args.py)
local first_id = ARGV[1]    -- the batch's first entry id
local last_id = ARGV[2]     -- its last
local names_json = ARGV[3]  -- the names its entries carry (a JSON array), in KEYS order
local stream = KEYS[1]
local head = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
if not head[1] or head[1][1] ~= first_id then
  return {'!moved'}
end
local by_name = {}
for i, name in ipairs(cjson.decode(names_json)) do
  by_name[name] = 12 + (i - 1) * 6
end
local SORTS = {s = 8, e = 9, r = 10, a = 11}  -- the entry's field: its sort index
local entries = redis.call('XRANGE', stream, first_id, last_id)
for _, entry in ipairs(entries) do
  local f, kv = {}, entry[2]
  for i = 1, #kv, 2 do
    f[kv[i]] = kv[i + 1]
  end
  local named = f.n and by_name[f.n]
  if f.n and not named then
    return redis.error_reply('index: the batch names ' .. f.n .. ', which is not in names_json')
  end
  if f.t then
    if f.f then
      redis.call('ZREM', KEYS[1 + STATE_SLOT[f.f]], f.i)
      if named then
        redis.call('ZREM', KEYS[named + STATE_SLOT[f.f] - 1], f.i)
      end
    end
    redis.call('ZADD', KEYS[1 + STATE_SLOT[f.t]], f.q, f.i)
    if named then
      redis.call('ZADD', KEYS[named + STATE_SLOT[f.t] - 1], f.q, f.i)
    end
  end
  for field, slot in pairs(SORTS) do
    if f[field] then
      redis.call('ZADD', KEYS[slot], f[field], f.i)
    end
  end
end
-- Trimmed up to the batch's last entry (MINID keeps ids at or above the next id).
local ms, seq = string.match(last_id, '^(%d+)-(%d+)$')
redis.call('XTRIM', stream, 'MINID', ms .. '-' .. string.format('%.0f', tonumber(seq) + 1))
return {'indexed', #entries}
