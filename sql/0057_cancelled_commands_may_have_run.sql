-- 0057_cancelled_commands_may_have_run.sql — a command whose tool call is
-- cancelled after its machine accepted it is cancelled too (its daemon
-- stops its process), so a cancelled command may have been handed out.

ALTER TABLE holdfast.commands DROP CONSTRAINT commands_accepted_iff_handed_out;
ALTER TABLE holdfast.commands ADD CONSTRAINT commands_accepted_iff_handed_out
    CHECK ((state = 'cancelled') OR ((state IN ('queued', 'failed')) = (accepted_at IS NULL)));
