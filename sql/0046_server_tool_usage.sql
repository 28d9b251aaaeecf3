-- 0046_server_tool_usage.sql — the provider's server tool uses counted in
-- every usage sum, beside the tokens.
--
-- Anthropic's server tools (web search, web fetch) run inside the model
-- call; the response reports how many requests they made
-- (`usage.server_tool_use`), and web searches are billed per request. The
-- worker already saved the counts in each model.response event's usage
-- (`server_tool_requests`, of them `web_search_requests`) and priced the
-- searches into cost_usd; now the sums carry the counts too, so the usage
-- routes show how many uses a cost came from:
--
-- - holdfast.token_usage gains server_tool_requests and
--   web_search_requests. Rows written before this migration read them as
--   NULL, which the usage functions (sql/functions/usage.sql) count as 0:
--   earlier steps' counts stay only in their model.response events.
-- - agents.turn_usage and agents.usage default to all counts 0.
-- - holdfast.usage_by_project sums both per project, day and model.
--
-- At the end, the old forms of functions whose arguments or results
-- changed in sql/functions/ (re-created there after the migrations):
-- add_server_tool_cost, record_tools_unavailable (a tool name per
-- unavailable entry), content_file_sizes (and media types) and
-- context_file_cost (now context_files, rows with media types, for the
-- PDF limit of a request), and retention_tick, whose one transaction held
-- a new or dropped partition's lock on events while it pruned rows (the
-- maintenance process now commits maintain_event_partitions, then runs
-- prune_retention_rows).

ALTER TYPE holdfast.token_usage
    ADD ATTRIBUTE server_tool_requests bigint,
    ADD ATTRIBUTE web_search_requests bigint;

ALTER TABLE holdfast.agents
    ALTER COLUMN turn_usage SET DEFAULT ROW(0, 0, 0, 0, 0, NULL, 0, 0),
    ALTER COLUMN usage SET DEFAULT ROW(0, 0, 0, 0, 0, NULL, 0, 0);

-- Per project, UTC day, provider and model: the model calls' tokens, cost
-- (NULL when none of the group's calls was priced) and server tool
-- requests. model_steps counts every model call: steps and compactions. A
-- scan of the steps table: for reports, not for a hot path.
CREATE OR REPLACE VIEW holdfast.usage_by_project AS
SELECT a.project_id,
       (s.created_at AT TIME ZONE 'UTC')::date AS day,
       s.provider,
       s.model,
       count(*) AS model_steps,
       sum((s.usage).input_tokens)::bigint AS input_tokens,
       sum((s.usage).output_tokens)::bigint AS output_tokens,
       sum((s.usage).cache_read_tokens)::bigint AS cache_read_tokens,
       sum((s.usage).cache_write_tokens)::bigint AS cache_write_tokens,
       sum((s.usage).reasoning_tokens)::bigint AS reasoning_tokens,
       sum((s.usage).cost_usd) AS cost_usd,
       coalesce(sum((s.usage).server_tool_requests), 0)::bigint AS server_tool_requests,
       coalesce(sum((s.usage).web_search_requests), 0)::bigint AS web_search_requests
  FROM holdfast.steps s
  JOIN holdfast.agents a ON a.id = s.agent_id
 -- Model calls saved since 0022 (earlier ones have no usage). Not
 -- `s.usage IS NOT NULL`: a row with a NULL field (an unpriced cost) is
 -- not NOT NULL.
 WHERE s.kind IN ('model', 'compaction') AND s.turn_seq IS NOT NULL
 GROUP BY a.project_id, (s.created_at AT TIME ZONE 'UTC')::date, s.provider, s.model;

-- Absent on a new database, whose function files are applied after the
-- migrations.
DROP FUNCTION IF EXISTS holdfast.add_server_tool_cost(holdfast.token_usage, jsonb, text);
DROP FUNCTION IF EXISTS holdfast.record_tools_unavailable(uuid, bigint, text[], text[]);
DROP FUNCTION IF EXISTS holdfast.content_file_sizes(jsonb);
DROP FUNCTION IF EXISTS holdfast.context_file_cost(holdfast.agents);
DROP FUNCTION IF EXISTS holdfast.retention_tick(integer);
