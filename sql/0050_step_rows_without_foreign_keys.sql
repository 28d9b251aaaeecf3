-- 0050_step_rows_without_foreign_keys.sql — the rows a step writes are
-- inserted without per-row foreign-key checks.
--
-- Each foreign key on a child table is a per-row trigger that, for every
-- inserted row, runs a query locking its parent row (FOR KEY SHARE): seven
-- such queries per model step and tool result on the step path, about a
-- tenth of Postgres' CPU per step (docs/internals/benchmarks.md). The
-- functions that write these rows already guarantee what the keys checked:
-- every writer of events, steps, messages and tool calls locks the agent row
-- first (and events take their seq from it, so an unknown agent gets none),
-- and a step's messages and tool calls name the step the same function has
-- just inserted. Agents, steps, messages, tool calls and inputs are never
-- deleted. The keys that guard rarer writes (a tool call's child agent,
-- everything else's) stay.

ALTER TABLE holdfast.events DROP CONSTRAINT events_agent_id_fkey1;
ALTER TABLE holdfast.steps DROP CONSTRAINT steps_agent_id_fkey;
ALTER TABLE holdfast.messages
    DROP CONSTRAINT messages_agent_id_fkey,
    DROP CONSTRAINT messages_input_id_fkey,
    DROP CONSTRAINT messages_step_id_fkey;
ALTER TABLE holdfast.tool_calls
    DROP CONSTRAINT tool_calls_agent_id_fkey,
    DROP CONSTRAINT tool_calls_result_step_id_fkey,
    DROP CONSTRAINT tool_calls_step_id_fkey;
