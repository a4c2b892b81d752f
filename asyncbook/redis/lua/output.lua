-- output: append chunks to a running task's output stream (extension, _output.py).
-- KEYS: 1 task hash, 2 the task's output stream
-- The stream's entry ids are 0-<n>, n the chunk's number from 1 (the reader's cursor);
-- each entry holds a (attempt), c (chunk), t (stored at, ms), b (bytes so far) and s (the
-- task's creation order: a stream left by an expired task of the same id is dropped).
-- The stream expires at the task's deadline (or now, if later) plus retention.
-- Returns: {'!unknown'}, {'!damaged', why}, {'!state', st} (not running), {'!full', chunks, bytes} (a bound
--   would be passed: nothing was written), or {last chunk's number, attempt, bytes}

-- ARGV: OutputArgs (redis/_script_args.py)
local retention_ms = ARGV[1]
local max_chunks = tonumber(ARGV[2])
local max_bytes = tonumber(ARGV[3])
local values = {unpack(ARGV, 4)}  -- the chunks

local f = redis.call('HMGET', KEYS[1], 'id', 'st', 'att', 'seq', 'exp')
if not f[1] then
  return {'!unknown'}
elseif not (f[2] and f[3] and f[4]) then
  return {'!damaged', 'its hash lacks fields'}
elseif f[2] ~= 'running' then
  return {'!state', f[2]}
end
local n, bytes = 0, 0
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
if last then
  local e = {}
  for i = 1, #last[2], 2 do
    e[last[2][i]] = last[2][i + 1]
  end
  if e.s == f[4] then
    n, bytes = tonumber(string.match(last[1], '^0%-(%d+)$')), tonumber(e.b)
  else
    redis.call('DEL', KEYS[2])
  end
end
local adding = 0
for _, chunk in ipairs(values) do
  adding = adding + #chunk
end
if n + #values > max_chunks or bytes + adding > max_bytes then
  return {'!full', n, bytes}
end
local now = string.format('%.0f', server_ms())
for _, chunk in ipairs(values) do
  n, bytes = n + 1, bytes + #chunk
  redis.call('XADD', KEYS[2], '0-' .. n, 'a', f[3], 'c', chunk, 't', now, 'b', bytes, 's', f[4])
end
if retention_ms ~= '' then
  local deadline = math.max(tonumber(f[5]) or 0, tonumber(now))
  redis.call('PEXPIREAT', KEYS[2], string.format('%.0f', math.ceil(deadline + tonumber(retention_ms))))
end
return {n, tonumber(f[3]), bytes}
