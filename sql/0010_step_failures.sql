-- 0010: contained step failures (issue 16).
--
-- A step that fails with anything but a lost lease (a panic in the worker, a
-- config the worker can't represent, a database error) used to release its
-- agent ready at once, so the next claim failed the same way: a hot loop,
-- each pass possibly a billed model call. Now such a failure is counted on
-- the agent and the agent is released with a durable delay (run_after, the
-- worker's jittered backoff); after p_max_attempts failures in a row the
-- turn ends with `turn.failed` {"type": "internal_error"} and the cause in
-- history. The count survives crashes (it is a column) and is reset whenever
-- the agent settles any other way (a step committed, a retry recorded, a
-- turn ended or cancelled).
--
-- The functions (fail_step, and settle_agent_with resetting the count) are
-- in sql/functions/steps.sql and leases.sql.

ALTER TABLE holdfast.agents
    ADD COLUMN step_failures integer NOT NULL DEFAULT 0 CHECK (step_failures >= 0);
