-- slots: a concurrency key's slots (concurrency limits across workers, extension):
-- slot_call (_slots.lua, which claim_run.lua's limited start shares) on its keys.
-- KEYS: 1 stalls, 2 the key's running set, 3 its line, 4 its payloads (_slots.lua)
-- ARGV: SlotArgs (redis/_script_args.py): op ('take' or 'release'), task id, limit,
--       lease ms, payload
-- Returns: slot_call's answer: {granted '1' or '0', how many still wait, the payloads of
--          the tasks given a slot...}

return slot_call(KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
