-- Shared helpers, prepended to every script that reads or writes a task.
-- A task hash holds: id (JSON string), st, exp (deadline, JSON number text), att, max,
-- prog, ver, seq (creation order), and when set ref, rh, err (JSON strings).

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

local function render_task(t, history_key, with_history)
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
    parts[#parts + 1] = table.concat(redis.call('LRANGE', history_key, 0, -1), ',')
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
