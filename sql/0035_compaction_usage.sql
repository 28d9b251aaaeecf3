-- 0035_compaction_usage.sql — a compaction's model call counts in usage.
--
-- A compaction is a paid model call (the summary of the old history), but
-- until now its usage reached only the context.compacted event: the turn's,
-- the agent's and the project's sums, and so the budgets, left it out.
-- commit_compaction now saves it as a step of kind 'compaction' (priced
-- like a model step) and adds it to turn_usage and usage; this lets the
-- steps table take that kind and the per-project view count it.

ALTER TABLE holdfast.steps DROP CONSTRAINT steps_kind_check;
ALTER TABLE holdfast.steps ADD CONSTRAINT steps_kind_check
    CHECK (kind IN ('model', 'tool', 'compaction'));

-- Per project, UTC day, provider and model: the model calls' tokens and
-- cost (NULL when none of the group's calls was priced). model_steps
-- counts every model call: steps and compactions. A scan of the steps
-- table: for reports, not for a hot path.
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
       sum((s.usage).cost_usd) AS cost_usd
  FROM holdfast.steps s
  JOIN holdfast.agents a ON a.id = s.agent_id
 -- Model calls saved since 0022 (earlier ones have no usage). Not
 -- `s.usage IS NOT NULL`: a row with a NULL field (an unpriced cost) is
 -- not NOT NULL.
 WHERE s.kind IN ('model', 'compaction') AND s.turn_seq IS NOT NULL
 GROUP BY a.project_id, (s.created_at AT TIME ZONE 'UTC')::date, s.provider, s.model;
