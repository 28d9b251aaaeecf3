-- benches/experiments/set_based_commit.sql — what a group commit of model
-- steps costs per step as the batch grows: commit_model_steps as shipped
-- (one lock-and-fence statement, then write_model_step row by row) against
-- a lower bound for set-based writes (the same batch written by one
-- statement per table).
--
-- Not a scenario: a psql script against a migrated database, timed inside
-- one transaction (no commit, so no WAL flush: CPU only), rolled back at
-- the end. Every step is the same: an agent's first model call, which
-- consumes its one input and answers with one custom tool call, so the
-- agent waits for the result. The set-based side does only that path's
-- writes (no limits, approvals, pauses, new turns or fences refused): it
-- is the floor that a set-based commit_model_steps could approach, not an
-- implementation of it. Two rounds, in opposite orders.
--
-- Run it on a freshly migrated database: the 4,096 agents it creates and
-- rolls back leave dead rows that made a second run on the same database
-- 4–5 times slower on both sides.
--
--   holdfast migrate --database-url URL
--   psql URL -v ON_ERROR_STOP=1 -q -f benches/experiments/set_based_commit.sql

BEGIN;
SET LOCAL client_min_messages = warning;

CREATE TEMP TABLE commit_results (round int, variant text, batch int, us_per_step numeric);
CREATE TEMP TABLE claimed (n serial, agent_id uuid, epoch bigint);

-- 2 variants × 2 rounds × 4 batch sizes × 256 steps, each on an agent of
-- its own (an agent commits one first step).
SELECT holdfast.ensure_project('set-based-commit') AS project \gset
SELECT count(holdfast.create_input(holdfast.create_agent(:'project',
           '{"model": {"provider": "anthropic", "name": "claude-x"}}'),
       '"Look it up."'))
  FROM generate_series(1, 4096) \gset
DO $$
BEGIN
    LOOP
        INSERT INTO claimed (agent_id, epoch)
        SELECT c.agent_id, c.epoch FROM holdfast.claim_agents('set-based-commit', 256, '1 hour') c;
        EXIT WHEN NOT FOUND;
    END LOOP;
    IF (SELECT count(*) FROM claimed) <> 4096 THEN
        RAISE EXCEPTION 'set_based_commit.sql: % of 4096 agents claimed', (SELECT count(*) FROM claimed);
    END IF;
END
$$;

-- The batch of steps for claimed agents p_first .. p_first + p_size - 1.
CREATE FUNCTION pg_temp.batch(p_first int, p_size int) RETURNS holdfast.model_step[]
LANGUAGE sql AS $$
    SELECT array_agg(ROW(c.agent_id, c.epoch,
                         ARRAY(SELECT i.id FROM holdfast.inputs i WHERE i.agent_id = c.agent_id),
                         '[{"type": "text", "text": "Let me look that up."}]'::jsonb,
                         '[{"provider_id": "toolu_1", "name": "lookup", "kind": "custom", "input": {"q": "x"}}]'::jsonb,
                         '{"input_tokens": 120, "output_tokens": 30}'::jsonb,
                         'tool_use')::holdfast.model_step ORDER BY c.n)
      FROM claimed c WHERE c.n >= p_first AND c.n < p_first + p_size
$$;

-- The floor: the path's writes, one statement per table for the whole
-- batch. Locked as commit_model_steps locks (lock_agents); the fence is
-- not checked (every lease here is live).
CREATE FUNCTION pg_temp.commit_set_based(p_steps holdfast.model_step[]) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM 1 FROM holdfast.lock_agents(ARRAY(SELECT s.agent_id FROM unnest(p_steps) s));
    WITH batch AS (
        SELECT s.agent_id, s.epoch, s.message, s.tool_calls, s.stop_reason,
               coalesce(s.usage, '{}') AS usage_json,
               ARRAY(SELECT i.id FROM holdfast.inputs i
                      WHERE i.agent_id = s.agent_id AND i.id = ANY (s.input_ids) AND i.consumed_at IS NULL
                      ORDER BY i.created_at, i.id) AS input_ids,
               (SELECT holdfast.price_usage(holdfast.usage_from_json(s.usage),
                                            x.config #>> '{model,provider}', x.config #>> '{model,name}')
                  FROM holdfast.agents x WHERE x.id = s.agent_id) AS usage,
               jsonb_array_length(s.tool_calls) AS n_calls
          FROM unnest(p_steps) s
    ), agent AS (
        UPDATE holdfast.agents a
           SET last_step_seq = a.last_step_seq + 1,
               last_message_seq = a.last_message_seq + cardinality(b.input_ids) + 1,
               last_event_seq = a.last_event_seq + 1 + b.n_calls, last_event_at = holdfast.now(),
               model_attempts = 0, turn_model_steps = a.turn_model_steps + 1,
               turn_usage = holdfast.add_usage(a.turn_usage, b.usage),
               usage = holdfast.add_usage(a.usage, b.usage),
               state = 'waiting',
               lease_owner = NULL, lease_expires_at = NULL, lease_pid = NULL, lease_backend_start = NULL,
               first_attempt_epoch = NULL, lost_attempt_epoch = NULL,
               lost_attempt_started_at = NULL, lost_attempt_ended_at = NULL,
               updated_at = holdfast.now()
          FROM batch b
         WHERE a.id = b.agent_id
        RETURNING a.id, a.last_step_seq, a.last_message_seq, a.last_event_seq, a.turn_seq,
                  a.config #>> '{model,provider}' AS provider, a.config #>> '{model,name}' AS model
    ), step AS (
        INSERT INTO holdfast.steps (agent_id, step_seq, kind, epoch, turn_seq, provider, model, usage)
        SELECT g.id, g.last_step_seq, 'model', b.epoch, g.turn_seq, g.provider, g.model, b.usage
          FROM agent g JOIN batch b ON b.agent_id = g.id
        RETURNING id, agent_id
    ), message AS (
        INSERT INTO holdfast.messages (agent_id, seq, role, content, step_id, input_id)
        SELECT g.id, g.last_message_seq - cardinality(b.input_ids) - 1 + m.ord, m.role, m.content, st.id, m.input_id
          FROM agent g JOIN batch b ON b.agent_id = g.id JOIN step st ON st.agent_id = g.id
         CROSS JOIN LATERAL (
               SELECT u.ord, 'user' AS role,
                      CASE WHEN jsonb_typeof(i.content) = 'string'
                           THEN jsonb_build_array(jsonb_build_object('type', 'text', 'text', i.content #>> '{}'))
                           ELSE i.content END AS content,
                      i.id AS input_id
                 FROM unnest(b.input_ids) WITH ORDINALITY AS u (id, ord)
                 JOIN holdfast.inputs i ON i.id = u.id
               UNION ALL
               SELECT cardinality(b.input_ids) + 1, 'assistant', b.message, NULL::uuid) m
    ), consumed AS (
        UPDATE holdfast.inputs i SET consumed_at = holdfast.now()
          FROM batch b
         WHERE i.agent_id = b.agent_id AND i.id = ANY (b.input_ids) AND i.consumed_at IS NULL
    ), call AS (
        INSERT INTO holdfast.tool_calls (agent_id, step_id, position, provider_id, name, input, kind, status)
        SELECT st.agent_id, st.id, (c.ord - 1)::integer, c.value ->> 'provider_id', c.value ->> 'name',
               coalesce(c.value -> 'input', '{}'), c.value ->> 'kind', 'waiting'
          FROM step st JOIN batch b ON b.agent_id = st.agent_id
         CROSS JOIN LATERAL jsonb_array_elements(b.tool_calls) WITH ORDINALITY AS c (value, ord)
        RETURNING id, agent_id, step_id, position, provider_id, name, input, kind, status
    ), calls AS (
        SELECT c.agent_id, jsonb_agg(jsonb_build_object('id', c.id, 'provider_id', c.provider_id, 'name', c.name,
                                                        'input', c.input, 'kind', c.kind, 'status', c.status)
                                     ORDER BY c.position) AS calls
          FROM call c GROUP BY c.agent_id
    )
    INSERT INTO holdfast.events (agent_id, seq, type, data)
    SELECT g.id, g.last_event_seq - b.n_calls, 'model.response',
           jsonb_build_object('step_id', st.id, 'message', b.message, 'tool_calls', cs.calls,
                              'usage', b.usage_json, 'stop_reason', b.stop_reason)
      FROM agent g JOIN batch b ON b.agent_id = g.id JOIN step st ON st.agent_id = g.id
      JOIN calls cs ON cs.agent_id = g.id
    UNION ALL
    SELECT g.id, g.last_event_seq - b.n_calls + c.ord, 'tool_call.created', c.value
      FROM agent g JOIN batch b ON b.agent_id = g.id JOIN calls cs ON cs.agent_id = g.id
     CROSS JOIN LATERAL jsonb_array_elements(cs.calls) WITH ORDINALITY AS c (value, ord);
END
$$;

-- 256 steps in batches of p_batch, from claimed agent p_first on: µs per step.
CREATE FUNCTION pg_temp.time_commits(p_variant text, p_first int, p_batch int) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    v_batch holdfast.model_step[];
    v_starts int[] := ARRAY(SELECT p_first + g FROM generate_series(0, 255, p_batch) g);
    v_start int;
    v_total interval := '0';
    v_began timestamptz;
    v_bad int;
BEGIN
    FOREACH v_start IN ARRAY v_starts LOOP
        v_batch := pg_temp.batch(v_start, p_batch);
        v_began := clock_timestamp();
        IF p_variant = 'commit_model_steps' THEN
            SELECT count(*) FILTER (WHERE r.outcome <> 'committed') INTO v_bad
              FROM holdfast.commit_model_steps(v_batch) r;
            IF v_bad > 0 THEN
                RAISE EXCEPTION 'set_based_commit.sql: % steps of a batch were refused', v_bad;
            END IF;
        ELSE
            PERFORM pg_temp.commit_set_based(v_batch);
        END IF;
        v_total := v_total + (clock_timestamp() - v_began);
    END LOOP;
    RETURN round(extract(epoch FROM v_total) * 1e6 / 256, 1);
END
$$;

-- Round 1: shipped first, batches growing; round 2: the reverse. Each
-- (round, variant, batch) takes the next 256 claimed agents.
DO $$
DECLARE
    v_slot int := 0;
    v_round int;
    v_variant text;
    v_size int;
BEGIN
    FOREACH v_round IN ARRAY ARRAY[1, 2] LOOP
        FOREACH v_variant IN ARRAY CASE v_round WHEN 1 THEN ARRAY['commit_model_steps', 'set-based floor']
                                                ELSE ARRAY['set-based floor', 'commit_model_steps'] END LOOP
            FOREACH v_size IN ARRAY CASE v_round WHEN 1 THEN ARRAY[1, 4, 16, 32] ELSE ARRAY[32, 16, 4, 1] END LOOP
                INSERT INTO commit_results
                VALUES (v_round, v_variant, v_size, pg_temp.time_commits(v_variant, 1 + 256 * v_slot, v_size));
                v_slot := v_slot + 1;
            END LOOP;
        END LOOP;
    END LOOP;
END
$$;

-- Both sides wrote the same rows for each step: every agent, whichever
-- side committed it, waits with one step, two messages, one call and four
-- events (input.received and turn.started before the step).
DO $$
DECLARE
    v_odd int;
BEGIN
    SELECT count(*) INTO v_odd
      FROM claimed c JOIN holdfast.agents a ON a.id = c.agent_id
     WHERE a.state <> 'waiting' OR a.last_event_seq <> 4
        OR (SELECT count(*) FROM holdfast.steps s WHERE s.agent_id = a.id) <> 1
        OR (SELECT count(*) FROM holdfast.messages m WHERE m.agent_id = a.id) <> 2
        OR (SELECT count(*) FROM holdfast.tool_calls t WHERE t.agent_id = a.id) <> 1
        OR (SELECT count(*) FROM holdfast.events e WHERE e.agent_id = a.id) <> 4;
    IF v_odd > 0 THEN
        RAISE EXCEPTION 'set_based_commit.sql: % agents do not hold what a committed step writes', v_odd;
    END IF;
END
$$;

\pset format aligned
SELECT variant, batch,
       max(us_per_step) FILTER (WHERE round = 1) AS "round 1 µs/step",
       max(us_per_step) FILTER (WHERE round = 2) AS "round 2 µs/step"
  FROM commit_results
 GROUP BY variant, batch
 ORDER BY variant, batch;

ROLLBACK;
