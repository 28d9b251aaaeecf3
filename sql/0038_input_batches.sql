-- 0038_input_batches.sql — the record type of the API's group commit of
-- inputs.
--
-- Adds: holdfast.new_input, one posted input (the arguments of
-- create_input_or_replay as a record, with the project the request was
-- authenticated for), so the API can save the inputs that arrive within a
-- short window in one transaction with create_inputs(holdfast.new_input[]):
-- each input checked on its own, one commit (one WAL flush, one turn at the
-- NOTIFY queue lock) for all.
--
-- The functions (create_inputs, input_refusal, insert_input, new;
-- create_input_or_replay, now their one-input form) are in
-- sql/functions/agents.sql, stored_content in content.sql. Here: the type,
-- and the drops below.

CREATE TYPE holdfast.new_input AS (
    project_id uuid,
    agent_id uuid,
    content jsonb,
    idempotency_key text,
    trace_parent text,
    trace_state text,
    mode text
);

-- An input is now checked before anything of it is written (input_refusal,
-- then insert_input), so a batch refuses one input without a savepoint:
-- validate_content's check moved into input_refusal, store_input_content's
-- into input_refusal (the provider check) and insert_input (the files).
DROP FUNCTION IF EXISTS holdfast.validate_content(jsonb);
DROP FUNCTION IF EXISTS holdfast.store_input_content(holdfast.agents, jsonb);
