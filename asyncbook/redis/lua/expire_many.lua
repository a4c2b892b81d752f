-- expire_many: many tasks expired at their deadlines in one call (the sweep's batches),
-- each by apply_event (_apply.lua) exactly as apply.lua expires one task: the same
-- answer, writes, notification, indexes and counts per task, in the order given.
-- KEYS: 1 the callback marker of a call without one (never touched), 2..7 apply.lua's
--       KEYS 4..9 (deadlines, outbox, the index's change stream, counters, stalls, group
--       notifications), then each info block's keys (_info.lua; its first slot, the
--       info hash, stands for the info hash of each task that uses the block), then per
--       task its hash, its history and its info hash
-- ARGV: ExpireManyArgs (redis/_script_args.py): the number of blocks; per block the number of
--       its keys and its ARGV (InfoBlockArgs); apply.lua's ARGV of an expiry at the
--       deadline without a callback (ApplyArgs, its task id left blank); then per task
--       its id and the number of its block (from 1)
-- Returns: per task, in order, what apply.lua answers for it; an error a task's
--          apply_event raised is that task's answer (an error reply), the others go on.

local slots = ARGV  -- all of it: ExpireManyArgs, read in order below

local SHARED = 1 + APPLY_KEYC - K_DEADLINES + 1  -- KEYS 1..SHARED: the marker, 4..9
local block_count = tonumber(slots[1])
local blocks = {}
local k, a = SHARED + 1, 2
for b = 1, block_count do
  local key_count = tonumber(slots[a])
  local block_keys = {}
  for i = 1, key_count do
    block_keys[i] = KEYS[k + i - 1]
  end
  -- One record per block (info_block): each task's own info hash goes in it.
  blocks[b] = info_block(block_keys, 1, slots, a + 1)
  k, a = k + key_count, a + 1 + #INFO_ARGV
end
-- One event record for every task (apply_event sets only its worker, for each event):
-- each task's own id goes in it. The writes that add up over the tasks are made once,
-- after the last (e.later, _apply.lua).
local e = apply_args(slots, a, KEYS[1])
e.later = later_writes()
a = a + APPLY_ARGC

local keys = {'', '', KEYS[1]}
for i = K_DEADLINES, APPLY_KEYC do
  keys[i] = KEYS[i - K_DEADLINES + 2]
end
local answers = {}
while a <= #slots do
  local block = blocks[tonumber(slots[a + 1])]
  keys[K_TASK], keys[K_HISTORY] = KEYS[k], KEYS[k + 1]
  block.info = KEYS[k + 2]
  e.task_id = slots[a]
  local ok, answer = pcall(apply_event, keys, e, block)
  if not ok then
    local why = type(answer) == 'table' and answer.err or tostring(answer)
    answer = {err = 'ERR Error running script expire_many: ' .. tostring(why)}
  end
  answers[#answers + 1] = answer
  k, a = k + 3, a + 2
end
write_later(keys, e)
return answers
