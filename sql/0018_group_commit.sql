-- 0018_group_commit.sql — the record type of the worker's group commit.
--
-- Adds: holdfast.model_step, one model response to save (the arguments of
-- commit_model_step as a record), so a worker can save the steps that
-- finished within a short window in one transaction with
-- commit_model_steps(holdfast.model_step[]): each agent fenced on its own,
-- one commit (one WAL flush, one turn at the NOTIFY queue lock) for all.
--
-- The functions (commit_model_steps, new; commit_model_step, now the batch
-- of one; check_model_step and write_model_step, its two halves) are in
-- sql/functions/steps.sql. Here: the type only.

CREATE TYPE holdfast.model_step AS (
    agent_id uuid,
    epoch bigint,
    input_ids uuid[],
    message jsonb,
    tool_calls jsonb,
    usage jsonb,
    stop_reason text
);
