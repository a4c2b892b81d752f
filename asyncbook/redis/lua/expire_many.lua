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

local slots = ARGV  -- all of it: ExpireManyArgs, read in order (apply_each, _apply.lua)

-- The writes that add up over the tasks are made once, after the last (e.later).
return apply_each(KEYS, slots, {name = 'expire_many', later = true})
