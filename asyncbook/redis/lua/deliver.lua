-- deliver: hand a succeeded task's result over once per idempotency key.
-- KEYS: 1 delivery receipt, 2 task hash, 3 history list
-- Returns: {'existing', receiptJSON} | {'!unknown'} | {'!damaged', why} | {'not-succeeded'}
--          | {'delivered', receiptJSON}

-- ARGV: DeliverArgs (redis/_script_args.py)
local key_json = ARGV[1]      -- the idempotency key as JSON
local now_ms = ARGV[2]        -- JSON number text
local retention_ms = ARGV[3]  -- '' keeps forever

local existing = redis.call('GET', KEYS[1])
if existing then
  return {'existing', existing}
end
local t, refused = usable(load_task(KEYS[2]), KEYS[3])
if refused then
  return refused
end
if t.st ~= 'succeeded' then
  return {'not-succeeded'}
end
local result = result_of(t, KEYS[3])
local receipt = '{"taskId":' .. t.id .. ',"resultRef":' .. cjson.encode(result.resultRef)
  .. ',"resultHash":' .. cjson.encode(result.resultHash)
  .. ',"idempotencyKey":' .. key_json .. ',"deliveredAtMs":' .. now_ms .. '}'
local retention = tonumber(retention_ms)
if retention then
  redis.call('SET', KEYS[1], receipt, 'PX', retention)
else
  redis.call('SET', KEYS[1], receipt)
end
return {'delivered', receipt}
