-- Shared helpers, prepended to every script that reads or writes a task.
-- A task is one hash: id (JSON string), st, exp (deadline, JSON number text), att, max,
-- prog, ver, seq (creation order), ref, rh, err (JSON strings, when set), and its history:
-- field "N" holds the JSON of the event that produced version N. load_task reads the
-- fields only (for answers that need a few entries); load_full reads everything at once.

local TERMINAL = {succeeded = true, failed = true, expired = true}
local STATE_SLOT = {queued = 1, running = 2, succeeded = 3, failed = 4, expired = 5}

local function load_task(key)
  local f = redis.call('HMGET', key, 'id', 'st', 'exp', 'att', 'max', 'prog', 'ver', 'seq', 'ref', 'rh', 'err')
  if not f[1] then
    return nil
  end
  return {
    id = f[1], st = f[2], exp = f[3], att = tonumber(f[4]), max = tonumber(f[5]),
    prog = tonumber(f[6]), ver = tonumber(f[7]), seq = f[8], ref = f[9], rh = f[10], err = f[11],
  }
end

-- History entries first..last as JSON objects, read in chunks (unpack has a stack limit).
local function history_entries(key, first, last, out)
  local chunk = 500
  for low = first, last, chunk do
    local high = math.min(low + chunk - 1, last)
    local names = {}
    for v = low, high do
      names[#names + 1] = tostring(v)
    end
    local events = redis.call('HMGET', key, unpack(names))
    for i, event in ipairs(events) do
      out[#out + 1] = '{"version":' .. names[i] .. ',"event":' .. event .. '}'
    end
  end
  return out
end

-- The whole task in one call: its fields and, in t.events, every history entry's event.
local function load_full(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then
    return nil
  end
  local f, events = {}, {}
  for i = 1, #flat, 2 do
    local version = tonumber(flat[i])
    if version then events[version] = flat[i + 1] else f[flat[i]] = flat[i + 1] end
  end
  return {
    id = f.id, st = f.st, exp = f.exp, att = tonumber(f.att), max = tonumber(f.max),
    prog = tonumber(f.prog), ver = tonumber(f.ver), seq = f.seq, ref = f.ref, rh = f.rh,
    err = f.err, events = events,
  }
end

local function render_task(t, key, with_history)
  local parts = {
    '{"id":', t.id, ',"state":"', t.st, '","expiresAtMs":', t.exp,
    ',"attempts":', tostring(t.att), ',"maxAttempts":', tostring(t.max),
    ',"progress":', tostring(t.prog), ',"version":', tostring(t.ver),
  }
  if t.ref then parts[#parts + 1] = ',"resultRef":'; parts[#parts + 1] = t.ref end
  if t.rh then parts[#parts + 1] = ',"resultHash":'; parts[#parts + 1] = t.rh end
  if t.err then parts[#parts + 1] = ',"error":'; parts[#parts + 1] = t.err end
  parts[#parts + 1] = ',"history":['
  if with_history and t.ver > 0 then
    if t.events then
      local entries = {}
      for v = 1, t.ver do
        entries[v] = '{"version":' .. v .. ',"event":' .. t.events[v] .. '}'
      end
      parts[#parts + 1] = table.concat(entries, ',')
    else
      parts[#parts + 1] = table.concat(history_entries(key, 1, t.ver, {}), ',')
    end
  end
  parts[#parts + 1] = ']}'
  return table.concat(parts)
end

local function server_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

local function announce(channel, t)
  redis.call('PUBLISH', channel, '{"taskId":' .. t.id .. ',"version":' .. tostring(t.ver)
    .. ',"state":"' .. t.st .. '","progress":' .. tostring(t.prog) .. '}')
end
