local function __check(command, ...)
  local args = {...}
  local name = string.upper(command)
  local keys
  if __keyless[name] then
    return
  elseif __every[name] then
    keys = args
  elseif __second[name] then
    keys = {args[2]}
  elseif __first[name] then
    keys = {args[1]}
  else
    error('strict keys: ' .. name .. ' is not in tests/strict_keys.py')
  end
  for _, key in ipairs(keys) do
    if not __declared[key] then
      error('strict keys: ' .. name .. ' touched ' .. tostring(key) .. ', which is not in KEYS')
    end
  end
end
local __redis = redis
local redis = setmetatable({
  call = function(...) __check(...); return __redis.call(...) end,
  pcall = function(...) __check(...); return __redis.pcall(...) end,
}, {__index = __redis})
