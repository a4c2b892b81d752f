local function __check(command, ...)
  if __of ~= KEYS then
    __of, __declared = KEYS, {}
    for _, key in ipairs(KEYS) do __declared[key] = true end
  end
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
local redis = {
  call = function(...) __check(...); return __redis().call(...) end,
  pcall = function(...) __check(...); return __redis().pcall(...) end,
}
local __forwarded = {'error_reply', 'status_reply', 'sha1hex', 'log', 'setresp',
  'register_function', 'set_repl', 'replicate_commands', 'breakpoint', 'debug'}
for i = 1, #__forwarded do
  local name = __forwarded[i]
  redis[name] = function(...) return __redis()[name](...) end
end
