-- slots: a concurrency key's slots (concurrency limits across workers, extension):
-- slot_call (_slots.lua, which claim_run.lua's limited start shares) on its keys.
-- KEYS: 1 stalls, 2 the key's running set, 3 its line, 4 its payloads (_slots.lua)
-- ARGV: SlotArgs (redis/_script_args.py)
-- Returns: slot_call's answer: {granted '1' or '0', how many still wait, the payloads of
--          the tasks given a slot...}

local op = ARGV[1]
local task_id = ARGV[2]
local limit = ARGV[3]
local lease_ms = ARGV[4]
local payload = ARGV[5]

return slot_call(KEYS, op, task_id, limit, lease_ms, payload)
