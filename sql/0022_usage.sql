-- 0022_usage.sql — model usage summed per step, turn, agent and project, and
-- the operator's prices.
--
-- The tokens of each model response were saved only in its model.response
-- event. Budgets and billing need sums that cost nothing to read, so the
-- step commit (write_model_step, in the group commit's transaction) now
-- also saves them in the rows it already writes:
--
-- - holdfast.token_usage: one response's or one sum's tokens by kind, and
--   its cost in USD (NULL while none of it was priced). cache_read_tokens
--   and cache_write_tokens are part of input_tokens, reasoning_tokens part
--   of output_tokens, as the providers report them.
-- - holdfast.model_prices: the operator's price per million tokens of each
--   kind, per provider and model (`holdfast prices set`). A step is priced
--   at the price in force when it commits, as an invoice is; a price set
--   later does not reprice old steps. Cache reads and writes cost the input
--   price unless they have their own.
-- - steps.turn_seq, provider, model, usage: what each model step used (tool
--   steps keep NULLs).
-- - agents.turn_seq (the number of the open or last turn: counted up when a
--   turn opens), agents.turn_usage (the sum of that turn) and agents.usage
--   (the sum of the agent's life), updated by the step commit's one agent
--   UPDATE.
-- - holdfast.usage_by_project: per project, UTC day, provider and model.
-- The functions are in sql/functions/usage.sql.

CREATE TYPE holdfast.token_usage AS (
    input_tokens bigint,
    output_tokens bigint,
    cache_read_tokens bigint,
    cache_write_tokens bigint,
    reasoning_tokens bigint,
    cost_usd numeric
);

CREATE TABLE holdfast.model_prices (
    provider text NOT NULL CHECK (length(provider) BETWEEN 1 AND 100),
    model text NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
    input_usd_per_mtok numeric NOT NULL CHECK (input_usd_per_mtok >= 0),
    output_usd_per_mtok numeric NOT NULL CHECK (output_usd_per_mtok >= 0),
    cache_read_usd_per_mtok numeric CHECK (cache_read_usd_per_mtok >= 0),
    cache_write_usd_per_mtok numeric CHECK (cache_write_usd_per_mtok >= 0),
    updated_at timestamptz NOT NULL DEFAULT holdfast.now(),
    PRIMARY KEY (provider, model)
);

ALTER TABLE holdfast.steps
    ADD COLUMN turn_seq bigint,
    ADD COLUMN provider text,
    ADD COLUMN model text,
    ADD COLUMN usage holdfast.token_usage;

ALTER TABLE holdfast.agents
    ADD COLUMN turn_seq bigint NOT NULL DEFAULT 0,
    ADD COLUMN turn_usage holdfast.token_usage NOT NULL DEFAULT ROW(0, 0, 0, 0, 0, NULL),
    ADD COLUMN usage holdfast.token_usage NOT NULL DEFAULT ROW(0, 0, 0, 0, 0, NULL);

-- Per project, UTC day, provider and model: the model steps' tokens and
-- cost (NULL when none of the group's steps was priced). A scan of the
-- steps table: for reports, not for a hot path.
CREATE VIEW holdfast.usage_by_project AS
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
 -- Model steps saved since 0022 (earlier ones have no usage). Not
 -- `s.usage IS NOT NULL`: a row with a NULL field (an unpriced cost) is
 -- not NOT NULL.
 WHERE s.kind = 'model' AND s.turn_seq IS NOT NULL
 GROUP BY a.project_id, (s.created_at AT TIME ZONE 'UTC')::date, s.provider, s.model;
