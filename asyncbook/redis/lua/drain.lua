-- drain: take every pending notification out of the outbox.
-- KEYS: 1 outbox stream
-- ARGV: NoArgs (redis/_script_args.py): none
-- Returns: a flat list: taskId, state, atMs, version, taskId, ... in outbox order
--   (version '' for an entry written before versions were kept)

local out = {}
for _, item in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
  local fields = {}
  local kv = item[2]
  for i = 1, #kv, 2 do
    fields[kv[i]] = kv[i + 1]
  end
  out[#out + 1] = fields.taskId
  out[#out + 1] = fields.state
  out[#out + 1] = fields.atMs
  out[#out + 1] = fields.version or ''
end
redis.call('XTRIM', KEYS[1], 'MAXLEN', 0)
return out
