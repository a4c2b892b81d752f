-- apply: one event on one task, atomically: callback de-duplication, the transition,
-- history, the index's change, retention, the outbox and the change feed (apply_event, _apply.lua).
-- KEYS: 1 task hash, 2 history list, 3 callback marker, 4 deadlines, 5 outbox,
--       6 the index's change stream (index.lua applies it to the state and sort
--       indexes), 7 counters (hash: answers by reason), 8 stalls (running tasks by stall
--       time), 9 group notifications (stream), 10.. the info block (_info.lua: the info
--       hash, the name's indexes, the stats hours, the workers, the group's keys); then
--       the hash of the task an 'x' callback marker names (Shard.marker); then,
--       for a call of a batch (apply_many's MULTI/EXEC), the batch's own halt key
--       (KeySchema.batch_halt), which the batch's last call names twice
-- ARGV: ApplyArgs (redis/_script_args.py), in the order apply_args (_apply.lua) reads
--       them: the task id, callback given (0/1, taken, h..., x...: Shard.marker), event
--       shape valid (1/0), then the
--       event: type (start | progress | succeed | fail | expire | cancel | deadline:
--       expire at the deadline),
--       atMs (JSON number text; '' when not a finite number), event JSON, progress (''
--       when not a finite number), retryable (1/0), resultHash (as given), resultRef
--       blank (1/0), resultHash blank (1/0), error JSON (fail: its error; cancel: its
--       reason); then retention ms ('' keeps forever), changes channel, answer with the
--       task's history (1/0; c: compact, see _apply.lua), only if stalled (1/0: the
--       sweep's stall fail, refused with '!fresh' when a heartbeat came in time; u: a
--       start unless a live run holds the task, claim_run.lua), the
--       progress cursor (kept as the task's checkpoint), a failure's exception type and
--       traceback (JSON object, or ''; kept in the task's info, see _info.lua); then the
--       info block's facts (InfoBlockArgs)
-- Returns: {'!unknown'} | {'!damaged', why} | {'!fresh'} | {'!shape'} | {'!facts', ...}
--          | {'!after'} (a batch's call after one refused for facts: nothing written)
--          | {'!invalid', field, message}
--          | {reason, flags, task parts...}: flags is four 0/1 characters,
--            changed, duplicate, notify, duplicateCallback; the task as task_parts
--            (_task.lua) gives it

local event = apply_args(ARGV, 1, KEYS[K_MARKER])
local c = info_block(KEYS, APPLY_KEYC + 1, ARGV, APPLY_ARGC + 1)
local after = c.after + (string.sub(event.callback_given, 1, 1) == 'x' and 1 or 0)
local halt = KEYS[after]
if not halt then
  return apply_event(KEYS, event, c)
end
-- A call of a batch: once a call was refused for facts (it goes again after the batch,
-- with the facts it learned), it marks the halt key, and the batch's calls after it
-- write nothing and answer '!after': they go again behind it, in order. The key is the
-- batch's own (no other batch's mark stops it); the last call deletes the mark.
local last = KEYS[after + 1] ~= nil
if redis.call('EXISTS', halt) == 1 then
  if last then
    redis.call('DEL', halt)
  end
  return {'!after'}
end
local answer = apply_event(KEYS, event, c)
if answer[1] == '!facts' and not last then
  redis.call('SET', halt, '1', 'PX', 60000)
end
return answer
