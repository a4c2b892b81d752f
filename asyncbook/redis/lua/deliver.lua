-- deliver: hand a succeeded task's result over once per idempotency key.
-- KEYS: 1 delivery receipt, 2 task hash, 3 history list
-- ARGV: 1 idempotency key as JSON, 2 now (JSON number text), 3 retention ms ('' keeps forever)
-- Returns: {'existing', receiptJSON} | {'!unknown'} | {'not-succeeded'} | {'delivered', receiptJSON}

local existing = redis.call('GET', KEYS[1])
if existing then
  return {'existing', existing}
end
local f = redis.call('HMGET', KEYS[2], 'id', 'st')
if not f[1] then
  return {'!unknown'}
end
if f[2] ~= 'succeeded' then
  return {'not-succeeded'}
end
local result = result_of({}, KEYS[3])
local receipt = '{"taskId":' .. f[1] .. ',"resultRef":' .. cjson.encode(result.resultRef)
  .. ',"resultHash":' .. cjson.encode(result.resultHash)
  .. ',"idempotencyKey":' .. ARGV[1] .. ',"deliveredAtMs":' .. ARGV[2] .. '}'
local retention = tonumber(ARGV[3])
if retention then
  redis.call('SET', KEYS[1], receipt, 'PX', retention)
else
  redis.call('SET', KEYS[1], receipt)
end
return {'delivered', receipt}
