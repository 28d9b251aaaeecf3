-- 0060_step_context_json.sql — a step context's messages, tool calls and
-- pending inputs are json, built as text (load_step_context, steps.sql):
-- the worker parses them as text, and jsonb would encode each into a binary
-- document only for it to be printed again.

ALTER TYPE holdfast.step_context
    ALTER ATTRIBUTE messages TYPE json,
    ALTER ATTRIBUTE tool_calls TYPE json,
    ALTER ATTRIBUTE pending_inputs TYPE json;
