-- sql/schema/usage.sql — model usage: reading a response's tokens, pricing them, summing them; the operator's prices.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- The operator's price of a provider's model, USD per million tokens
-- (cache prices NULL: the input price); set_model_price.
CREATE TABLE holdfast.model_prices (
    provider text NOT NULL,
    model text NOT NULL,
    input_usd_per_mtok numeric NOT NULL,
    output_usd_per_mtok numeric NOT NULL,
    cache_read_usd_per_mtok numeric,
    cache_write_usd_per_mtok numeric,
    updated_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT model_prices_cache_read_usd_per_mtok_check CHECK (cache_read_usd_per_mtok >= (0)::numeric),
    CONSTRAINT model_prices_cache_write_usd_per_mtok_check CHECK (cache_write_usd_per_mtok >= (0)::numeric),
    CONSTRAINT model_prices_input_usd_per_mtok_check CHECK (input_usd_per_mtok >= (0)::numeric),
    CONSTRAINT model_prices_model_check CHECK ((length(model) >= 1) AND (length(model) <= 200)),
    CONSTRAINT model_prices_output_usd_per_mtok_check CHECK (output_usd_per_mtok >= (0)::numeric),
    CONSTRAINT model_prices_provider_check CHECK ((length(provider) >= 1) AND (length(provider) <= 100)),
    CONSTRAINT model_prices_pkey PRIMARY KEY (provider, model)
);

-- ==== functions and triggers ====

-- No usage yet: every count 0, no cost.
CREATE OR REPLACE FUNCTION holdfast.zero_usage() RETURNS holdfast.token_usage
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(0, 0, 0, 0, 0, NULL, 0, 0)::holdfast.token_usage
$$;

-- One token count of a provider's report: the counts come from the
-- provider, which may be a tenant's own server, so anything but a number
-- reads as 0 and a count is held to [0, 10^12], where no sum of them can
-- overflow a bigint and abort a commit. Pure.
CREATE OR REPLACE FUNCTION holdfast.token_count(p_value jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN jsonb_typeof(p_value) = 'number'
                THEN least(greatest(trunc(p_value::numeric), 0), 1000000000000)::bigint
                ELSE 0 END
$$;

-- The tokens of one model response as the worker saves them (the
-- model.response event's `usage`: input_tokens, output_tokens,
-- cache_read_tokens, cache_write_tokens, reasoning_tokens, and the
-- provider's server tool requests, server_tool_requests and of them
-- web_search_requests; an absent kind is 0), unpriced. Pure.
CREATE OR REPLACE FUNCTION holdfast.usage_from_json(p_usage jsonb) RETURNS holdfast.token_usage
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(holdfast.token_count(p_usage -> 'input_tokens'),
               holdfast.token_count(p_usage -> 'output_tokens'),
               holdfast.token_count(p_usage -> 'cache_read_tokens'),
               holdfast.token_count(p_usage -> 'cache_write_tokens'),
               holdfast.token_count(p_usage -> 'reasoning_tokens'),
               NULL,
               holdfast.token_count(p_usage -> 'server_tool_requests'),
               holdfast.token_count(p_usage -> 'web_search_requests'))::holdfast.token_usage
$$;

-- p_usage priced at the operator's current price for p_provider's p_model
-- (holdfast.model_prices, per million tokens): input tokens that were
-- neither read from nor written to the cache at the input price, cache
-- reads and writes at their own prices (the input price when unset),
-- output tokens (reasoning included) at the output price. The cost is NULL
-- when the model has no price. Reads model_prices; locks nothing.
-- PL/pgSQL, not SQL: its lookup is planned once per session (a LANGUAGE
-- sql function with a sub-select is never inlined, so it would be parsed
-- and planned on every call: once per model step).
CREATE OR REPLACE FUNCTION holdfast.price_usage(
    p_usage holdfast.token_usage, p_provider text, p_model text)
RETURNS holdfast.token_usage LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_cost numeric;
BEGIN
    SELECT (greatest((p_usage).input_tokens - (p_usage).cache_read_tokens
                     - (p_usage).cache_write_tokens, 0) * p.input_usd_per_mtok
            + (p_usage).cache_read_tokens * coalesce(p.cache_read_usd_per_mtok, p.input_usd_per_mtok)
            + (p_usage).cache_write_tokens * coalesce(p.cache_write_usd_per_mtok, p.input_usd_per_mtok)
            + (p_usage).output_tokens * p.output_usd_per_mtok) / 1000000
      INTO v_cost
      FROM holdfast.model_prices p
     WHERE p.provider = p_provider AND p.model = p_model;
    p_usage.cost_usd := v_cost;
    RETURN p_usage;
END
$$;

-- The price of one web search by Anthropic's server tool: its list price
-- ($10 per 1,000 searches), billed to the operator's account on top of the
-- call's tokens. Anthropic's web fetch has no charge beyond tokens. Pure.
CREATE OR REPLACE FUNCTION holdfast.web_search_usd_per_request()
RETURNS numeric LANGUAGE sql IMMUTABLE AS $$
    SELECT 0.01::numeric
$$;

-- p_usage (priced by price_usage) with its web searches
-- (`web_search_requests`, as the provider reported them; Anthropic
-- providers only) added to its cost: a call whose tokens are unpriced
-- costs its searches. Budgets sum this cost. Pure.
CREATE OR REPLACE FUNCTION holdfast.add_server_tool_cost(p_usage holdfast.token_usage, p_provider text)
RETURNS holdfast.token_usage LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_searches bigint := coalesce((p_usage).web_search_requests, 0);
BEGIN
    IF v_searches = 0 OR p_provider IS DISTINCT FROM 'anthropic' THEN
        RETURN p_usage;
    END IF;
    p_usage.cost_usd := coalesce(p_usage.cost_usd, 0) + v_searches * holdfast.web_search_usd_per_request();
    RETURN p_usage;
END
$$;

-- The sum of two usages, kind by kind; the cost sums the priced parts and
-- stays NULL only while neither part was priced. A server tool count
-- saved before those counts were kept (NULL) counts 0. Pure.
CREATE OR REPLACE FUNCTION holdfast.add_usage(p_a holdfast.token_usage, p_b holdfast.token_usage)
RETURNS holdfast.token_usage LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW((p_a).input_tokens + (p_b).input_tokens,
               (p_a).output_tokens + (p_b).output_tokens,
               (p_a).cache_read_tokens + (p_b).cache_read_tokens,
               (p_a).cache_write_tokens + (p_b).cache_write_tokens,
               (p_a).reasoning_tokens + (p_b).reasoning_tokens,
               CASE WHEN (p_a).cost_usd IS NULL THEN (p_b).cost_usd
                    WHEN (p_b).cost_usd IS NULL THEN (p_a).cost_usd
                    ELSE (p_a).cost_usd + (p_b).cost_usd END,
               coalesce((p_a).server_tool_requests, 0) + coalesce((p_b).server_tool_requests, 0),
               coalesce((p_a).web_search_requests, 0) + coalesce((p_b).web_search_requests, 0)
              )::holdfast.token_usage
$$;

-- A usage as the API and events show it: every kind, cost_usd (JSON null
-- when unpriced) and the server tool requests (0 when none, or saved
-- before they were counted). Pure.
CREATE OR REPLACE FUNCTION holdfast.usage_json(p_usage holdfast.token_usage) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'input_tokens', (p_usage).input_tokens,
        'output_tokens', (p_usage).output_tokens,
        'cache_read_tokens', (p_usage).cache_read_tokens,
        'cache_write_tokens', (p_usage).cache_write_tokens,
        'reasoning_tokens', (p_usage).reasoning_tokens,
        'cost_usd', (p_usage).cost_usd,
        'server_tool_requests', coalesce((p_usage).server_tool_requests, 0),
        'web_search_requests', coalesce((p_usage).web_search_requests, 0))
$$;

-- An agent's usage, for GET /v1/agents/{id}/usage: the whole life's sum
-- (agents.usage) and each turn's sum over its model calls (steps and
-- compactions), oldest turn
-- first: {"agent_id", "usage", "turns": [{"turn", "model_steps",
-- "started_at", "usage"}]}. NULL when the agent is not in p_project. Reads
-- only.
CREATE OR REPLACE FUNCTION holdfast.agent_usage(p_project uuid, p_agent uuid) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'agent_id', a.id,
        'usage', holdfast.usage_json(a.usage),
        'turns', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                       'turn', t.turn_seq, 'model_steps', t.model_steps,
                       'started_at', t.started_at, 'usage', holdfast.usage_json(t.usage))
                   ORDER BY t.turn_seq)
              FROM (SELECT s.turn_seq, count(*) AS model_steps, min(s.created_at) AS started_at,
                           ROW(sum((s.usage).input_tokens), sum((s.usage).output_tokens),
                               sum((s.usage).cache_read_tokens), sum((s.usage).cache_write_tokens),
                               sum((s.usage).reasoning_tokens), sum((s.usage).cost_usd),
                               sum((s.usage).server_tool_requests), sum((s.usage).web_search_requests)
                              )::holdfast.token_usage AS usage
                      FROM holdfast.steps s
                     WHERE s.agent_id = a.id AND s.kind IN ('model', 'compaction') AND s.turn_seq IS NOT NULL
                     GROUP BY s.turn_seq) t), '[]'))
      FROM holdfast.agents a
     WHERE a.id = p_agent AND a.project_id = p_project
$$;

-- Set (insert or replace) the operator's price of a provider's model, in
-- USD per million tokens; NULL cache prices mean the input price. Applies
-- to steps committed from now on. Locks the price row. Raises HF422 naming
-- the field (provider, model, input_usd_per_mtok, output_usd_per_mtok,
-- cache_read_usd_per_mtok, cache_write_usd_per_mtok).
CREATE OR REPLACE FUNCTION holdfast.set_model_price(
    p_provider text, p_model text, p_input numeric, p_output numeric,
    p_cache_read numeric, p_cache_write numeric)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(length(p_provider), 0) NOT BETWEEN 1 AND 100 THEN
        PERFORM holdfast.raise('HF422', 'provider must be 1 to 100 characters', 'provider');
    END IF;
    IF coalesce(length(p_model), 0) NOT BETWEEN 1 AND 200 THEN
        PERFORM holdfast.raise('HF422', 'model must be 1 to 200 characters', 'model');
    END IF;
    IF p_input IS NULL OR p_input < 0 THEN
        PERFORM holdfast.raise('HF422', 'the input price must be a number of USD, at least 0', 'input_usd_per_mtok');
    END IF;
    IF p_output IS NULL OR p_output < 0 THEN
        PERFORM holdfast.raise('HF422', 'the output price must be a number of USD, at least 0', 'output_usd_per_mtok');
    END IF;
    IF p_cache_read < 0 THEN
        PERFORM holdfast.raise('HF422', 'the cache read price must be at least 0', 'cache_read_usd_per_mtok');
    END IF;
    IF p_cache_write < 0 THEN
        PERFORM holdfast.raise('HF422', 'the cache write price must be at least 0', 'cache_write_usd_per_mtok');
    END IF;
    INSERT INTO holdfast.model_prices AS p (provider, model, input_usd_per_mtok, output_usd_per_mtok,
                                            cache_read_usd_per_mtok, cache_write_usd_per_mtok)
    VALUES (p_provider, p_model, p_input, p_output, p_cache_read, p_cache_write)
    ON CONFLICT (provider, model) DO UPDATE
       SET input_usd_per_mtok = EXCLUDED.input_usd_per_mtok,
           output_usd_per_mtok = EXCLUDED.output_usd_per_mtok,
           cache_read_usd_per_mtok = EXCLUDED.cache_read_usd_per_mtok,
           cache_write_usd_per_mtok = EXCLUDED.cache_write_usd_per_mtok,
           updated_at = holdfast.now();
END
$$;

-- Every price, by provider and model. Reads only.
CREATE OR REPLACE FUNCTION holdfast.list_model_prices()
RETURNS SETOF holdfast.model_prices LANGUAGE sql STABLE AS $$
    SELECT * FROM holdfast.model_prices ORDER BY provider, model
$$;

-- Remove a model's price (its later steps are unpriced; steps already
-- priced keep their cost). Returns whether there was one. Raises nothing.
CREATE OR REPLACE FUNCTION holdfast.remove_model_price(p_provider text, p_model text)
RETURNS boolean LANGUAGE sql AS $$
    WITH removed AS (
        DELETE FROM holdfast.model_prices WHERE provider = p_provider AND model = p_model RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM removed)
$$;

-- How many extra allowances people granted the agent's budget p_name
-- (answering a budget approval; agents.budget_grants) that count now: a
-- per-agent budget's always, a per-turn budget's only in the turn they
-- were granted. Pure.
CREATE OR REPLACE FUNCTION holdfast.budget_grants_in_force(p_agent holdfast.agents, p_name text)
RETURNS integer LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_name LIKE '%per_agent'
                  OR ((p_agent).budget_grants #>> ARRAY[p_name, 'turn_seq'])::bigint = (p_agent).turn_seq
                THEN coalesce(((p_agent).budget_grants #>> ARRAY[p_name, 'grants'])::integer, 0)
                ELSE 0 END
$$;

-- Which of the agent's budgets (config.budget) its usage has reached, as
-- {"budget", "limit", "value", "granted"} (the first in the order
-- documented: max_tokens_per_turn, max_cost_usd_per_turn,
-- max_tokens_per_agent, max_cost_usd_per_agent), or NULL when none. Tokens
-- are input + output; a cost budget counts the priced usage only. The
-- limit is the maximum times one plus the grants in force
-- (budget_grants_in_force): each approval of a budget approval allows one
-- more maximum. The worker reads it with the step's context and makes no
-- model call when it is set. Pure. PL/pgSQL, so that an agent without
-- budgets costs one test per step (as SQL with a FROM it would be parsed
-- and planned on every call).
CREATE OR REPLACE FUNCTION holdfast.budget_exceeded(p_agent holdfast.agents) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF (p_agent).config -> 'budget' IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (
    SELECT jsonb_build_object('budget', b.name, 'limit', b.max * (1 + b.granted), 'value', b.used,
                              'granted', b.granted)
      FROM (VALUES
          (1, 'max_tokens_per_turn',
           ((p_agent).turn_usage).input_tokens + ((p_agent).turn_usage).output_tokens::numeric),
          (2, 'max_cost_usd_per_turn', coalesce(((p_agent).turn_usage).cost_usd, 0)),
          (3, 'max_tokens_per_agent',
           ((p_agent).usage).input_tokens + ((p_agent).usage).output_tokens::numeric),
          (4, 'max_cost_usd_per_agent', coalesce(((p_agent).usage).cost_usd, 0))
      ) AS b0 (ord, name, used)
      CROSS JOIN LATERAL (SELECT b0.name, b0.used,
                                 ((p_agent).config #>> ARRAY['budget', b0.name])::numeric AS max,
                                 holdfast.budget_grants_in_force(p_agent, b0.name) AS granted) b
     WHERE b.max IS NOT NULL AND b.used >= b.max * (1 + b.granted)
     ORDER BY b0.ord
     LIMIT 1);
END
$$;

-- End an agent's turn `budget_exceeded` for the budget p_exceeded
-- (budget_exceeded's value): `turn.failed` {"error": {"type":
-- "budget_exceeded", "message", "budget", "limit", "value", "granted"}},
-- the inputs the next call would have sent (p_input_ids) into the history
-- with the cause (end_turn_with_error). The caller holds the agent's row
-- lock.
CREATE OR REPLACE FUNCTION holdfast.end_turn_budget_exceeded(
    p_agent uuid, p_exceeded jsonb, p_input_ids uuid[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.end_turn_with_error(p_agent, 'budget_exceeded',
        format('this %s has used %s of its budget.%s of %s; no further model call was made.',
            CASE WHEN p_exceeded ->> 'budget' LIKE '%per_turn' THEN 'turn' ELSE 'agent' END,
            p_exceeded ->> 'value', p_exceeded ->> 'budget', p_exceeded ->> 'limit'),
        p_input_ids, NULL, p_exceeded);
END
$$;

-- Stop an agent whose budget is exhausted before the model call it would
-- have made. Checked again under the row lock; when no budget is exceeded
-- any more (the config changed meanwhile) the agent is only released, for
-- the next step to call the model ('released'). With
-- config.budget.on_exceeded = "ask" the turn stays open and waits on a
-- budget approval (approval.requested {"approval_id", "kind": "budget",
-- "budget"}; the agent is waiting until a person answers: answer_approval)
-- — 'asked'. Otherwise the turn ends (end_turn_budget_exceeded) —
-- 'failed'. Fenced: locks the agent row, raises HF001 when the lease is
-- not p_epoch's.
CREATE OR REPLACE FUNCTION holdfast.end_turn_over_budget(
    p_agent uuid, p_epoch bigint, p_input_ids uuid[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_exceeded jsonb;
    v_approval uuid;
BEGIN
    v_agent := holdfast.lock_leased_agent(p_agent, p_epoch);
    v_exceeded := holdfast.budget_exceeded(v_agent);
    IF v_exceeded IS NULL THEN
        PERFORM holdfast.settle_agent(p_agent);
        RETURN 'released';
    END IF;
    IF v_agent.config #>> '{budget,on_exceeded}' = 'ask' THEN
        INSERT INTO holdfast.approvals (agent_id, kind, budget) VALUES (p_agent, 'budget', v_exceeded)
        RETURNING id INTO v_approval;
        PERFORM holdfast.settle_agent(p_agent, ARRAY['approval.requested'],
            ARRAY[jsonb_build_object('approval_id', v_approval, 'kind', 'budget', 'budget', v_exceeded)], NULL);
        RETURN 'asked';
    END IF;
    PERFORM holdfast.interrupt_running_calls(p_agent);
    PERFORM holdfast.end_turn_budget_exceeded(p_agent, v_exceeded, p_input_ids);
    RETURN 'failed';
END
$$;

-- The decision on a budget approval (answer_approval has recorded it and
-- appended approval.answered). Approved: one more allowance of that budget
-- (agents.budget_grants; for a per-turn budget, in this turn only) and the
-- agent is settled, ready for the model call it was stopped before.
-- Denied: the turn ends budget_exceeded for the budget the approval asked
-- about, with the turn's inputs (turn_inputs: not the queued ones, which
-- wait for the next turn) into the history. The caller holds the agent's row lock; the
-- agent is waiting (a pending budget approval keeps it so: decide_next_state).
CREATE OR REPLACE FUNCTION holdfast.answer_budget_approval(p_approval holdfast.approvals)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_name text := p_approval.budget ->> 'budget';
BEGIN
    SELECT * INTO v_agent FROM holdfast.agents WHERE id = p_approval.agent_id;
    IF p_approval.status = 'approved' THEN
        UPDATE holdfast.agents
           SET budget_grants = budget_grants || jsonb_build_object(v_name, jsonb_build_object(
                   'grants', holdfast.budget_grants_in_force(v_agent, v_name) + 1,
                   'turn_seq', v_agent.turn_seq))
         WHERE id = v_agent.id;
        PERFORM holdfast.settle_agent(v_agent.id);
    ELSE
        PERFORM holdfast.end_turn_budget_exceeded(v_agent.id, p_approval.budget,
            ARRAY(SELECT i.id FROM holdfast.turn_inputs(v_agent.id) i));
    END IF;
END
$$;

-- A project's model usage by UTC day, provider and model, from p_since
-- on, newest day first, with the sum of it all, for
-- GET /v1/usage: {"since", "days": [{"day", "provider", "model",
-- "model_steps", "usage"}], "usage"}. A report: it reads the project's
-- model steps (holdfast.usage_by_project), not a hot path. Reads only.
CREATE OR REPLACE FUNCTION holdfast.project_usage(p_project uuid, p_since date) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    WITH rows AS (
        SELECT u.day, u.provider, u.model, u.model_steps,
               jsonb_build_object(
                   'input_tokens', u.input_tokens, 'output_tokens', u.output_tokens,
                   'cache_read_tokens', u.cache_read_tokens, 'cache_write_tokens', u.cache_write_tokens,
                   'reasoning_tokens', u.reasoning_tokens, 'cost_usd', u.cost_usd,
                   'server_tool_requests', u.server_tool_requests,
                   'web_search_requests', u.web_search_requests) AS usage,
               u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens,
               u.reasoning_tokens, u.cost_usd, u.server_tool_requests, u.web_search_requests
          FROM holdfast.usage_by_project u
         WHERE u.project_id = p_project AND u.day >= p_since)
    SELECT jsonb_build_object(
        'since', p_since,
        'days', coalesce((SELECT jsonb_agg(jsonb_build_object(
                                 'day', r.day, 'provider', r.provider, 'model', r.model,
                                 'model_steps', r.model_steps, 'usage', r.usage)
                             ORDER BY r.day DESC, r.provider, r.model)
                            FROM rows r), '[]'),
        'usage', jsonb_build_object(
            'input_tokens', coalesce(sum(input_tokens), 0), 'output_tokens', coalesce(sum(output_tokens), 0),
            'cache_read_tokens', coalesce(sum(cache_read_tokens), 0),
            'cache_write_tokens', coalesce(sum(cache_write_tokens), 0),
            'reasoning_tokens', coalesce(sum(reasoning_tokens), 0), 'cost_usd', sum(cost_usd),
            'server_tool_requests', coalesce(sum(server_tool_requests), 0),
            'web_search_requests', coalesce(sum(web_search_requests), 0)))
      FROM rows
$$;
