-- deliver: hand a succeeded task's result over once per idempotency key.
-- KEYS: 1 delivery receipt, 2 task hash, 3 history list
-- ARGV: 1 idempotency key as JSON, 2 now (JSON number text), 3 retention ms ('' keeps forever)
-- Returns: {'existing', receiptJSON} | {'!unknown'} | {'!damaged', why} | {'not-succeeded'}
--          | {'delivered', receiptJSON}

local existing = redis.call('GET', KEYS[1])
if existing then
  return {'existing', existing}
end
local t = load_task(KEYS[2])
if not t then
  return {'!unknown'}
end
local why = damage(t, KEYS[3])
if why then
  return {'!damaged', why}
end
if t.st ~= 'succeeded' then
  return {'not-succeeded'}
end
local result = result_of(t, KEYS[3])
local receipt = '{"taskId":' .. t.id .. ',"resultRef":' .. cjson.encode(result.resultRef)
  .. ',"resultHash":' .. cjson.encode(result.resultHash)
  .. ',"idempotencyKey":' .. ARGV[1] .. ',"deliveredAtMs":' .. ARGV[2] .. '}'
local retention = tonumber(ARGV[3])
if retention then
  redis.call('SET', KEYS[1], receipt, 'PX', retention)
else
  redis.call('SET', KEYS[1], receipt)
end
return {'delivered', receipt}
