-- 0028_tool_result_batches.sql — the record type of the API's group commit
-- of tool results.
--
-- Adds: holdfast.tool_result, one posted result of a custom tool call (the
-- arguments of submit_tool_result as a record), so the API can save the
-- results that arrive within a short window in one transaction with
-- submit_tool_results(holdfast.tool_result[]): each call checked on its
-- own, one commit (one WAL flush, one turn at the NOTIFY queue lock) for
-- all.
--
-- The functions (submit_tool_results, new; submit_tool_result, now the
-- batch of one) are in sql/functions/tools.sql. Here: the type only.

CREATE TYPE holdfast.tool_result AS (
    tool_call_id uuid,
    output jsonb,
    is_error boolean
);
