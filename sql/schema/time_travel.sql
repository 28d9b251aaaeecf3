-- sql/schema/time_travel.sql — forks and replays: an agent's saved history
-- used again (docs/guides/time-travel.md).
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- A replay: the source agent's recorded inputs sent, turn by turn, to a
-- hidden child agent (agent_id) whose config is the source's with
-- config_patch applied. source_turns lists the source's turns to replay,
-- in order; the child's k-th turn replays source_turns[k]. The child's
-- tool calls are answered from the recording (answer_replay_calls).
--   running    turns are being replayed (turns_sent of them sent so far)
--   completed  every turn was replayed
--   failed     a turn of the child failed or was cancelled (error says how)
CREATE TABLE holdfast.replays (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    source_agent_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    config_patch jsonb NOT NULL,
    source_turns bigint[] NOT NULL,
    turns_sent integer DEFAULT 0 NOT NULL,
    status text DEFAULT 'running' NOT NULL,
    error jsonb,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    completed_at timestamptz,
    CONSTRAINT replays_status_check CHECK (status IN ('running', 'completed', 'failed')),
    CONSTRAINT replays_completed_iff_ended CHECK ((status = 'running') = (completed_at IS NULL)),
    CONSTRAINT replays_turns_sent_check CHECK (turns_sent >= 0 AND turns_sent <= cardinality(source_turns)),
    CONSTRAINT replays_pkey PRIMARY KEY (id),
    CONSTRAINT replays_agent_id_key UNIQUE (agent_id),
    CONSTRAINT replays_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id),
    CONSTRAINT replays_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id),
    CONSTRAINT replays_source_agent_id_fkey FOREIGN KEY (source_agent_id) REFERENCES holdfast.agents(id)
);

-- A source agent's replays, oldest first (GET /v1/agents/{id}/replays).
CREATE INDEX replays_source_idx ON holdfast.replays (source_agent_id, id);

ALTER TABLE holdfast.agents ADD CONSTRAINT agents_replay_id_fkey FOREIGN KEY (replay_id) REFERENCES holdfast.replays(id);

-- ==== functions and triggers ====

-- A config merge patch as fork_agent and create_replay take it: NULL is
-- no change; anything but an object raises HF422 naming p_field.
CREATE OR REPLACE FUNCTION holdfast.patched_config(p_config jsonb, p_patch jsonb, p_field text)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_patch IS NULL THEN
        RETURN p_config;
    END IF;
    IF jsonb_typeof(p_patch) <> 'object' THEN
        PERFORM holdfast.raise('HF422', format('%s must be a JSON object (a merge patch of the config)', p_field),
                               p_field);
    END IF;
    RETURN holdfast.jsonb_merge_patch(p_config, p_patch);
END
$$;

-- The config a fork or replay of p_source starts from: its config version
-- p_version (agent_config_versions), or with none its current config.
-- Raises HF422 naming `version` when the source has no such version.
CREATE OR REPLACE FUNCTION holdfast.source_config(p_source holdfast.agents, p_version integer)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_config jsonb;
BEGIN
    IF p_version IS NULL THEN
        RETURN p_source.config;
    END IF;
    SELECT v.config INTO v_config FROM holdfast.agent_config_versions v
     WHERE v.agent_id = p_source.id AND v.version = p_version;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF422', format('agent %s has no config version %s', p_source.id, p_version),
                               'version');
    END IF;
    RETURN v_config;
END
$$;

-- Fork p_agent (of p_project) at one event of its timeline: a new agent of
-- the same project, idle, whose history is the source's as it stood when
-- that event was saved, and whose config is the source's (or its config
-- version p_version) with p_patch applied (validated as create_agent
-- validates a config). The point is
-- p_seq (an event seq), or the end of the source's p_turn-th turn, or,
-- with neither, the source's last event. Copied: the steps, messages
-- (with the compaction summary in force at that point) and tool calls
-- saved up to then; a call still open then (waiting, running, pending) is
-- completed for the fork as interrupted, with `tool_call.interrupted`.
-- Stored files are shared (attachment_sources), not copied. The fork's
-- timeline opens with `agent.forked` {"forked_from": {"agent_id", "seq"},
-- "turn", "messages", "tool_calls", "interrupted_tool_calls"}; its usage
-- starts at zero. Locks the source's row (its history does not move while
-- it is read), then creates the fork. Raises HF404 (no such agent in the
-- project), HF422 (both or a bad seq/turn, naming at.seq or at.turn; an
-- invalid patched config, naming the field). Returns the fork's id.
CREATE OR REPLACE FUNCTION holdfast.fork_agent(
    p_project uuid, p_agent uuid, p_seq bigint DEFAULT NULL, p_turn bigint DEFAULT NULL,
    p_patch jsonb DEFAULT NULL, p_version integer DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_source holdfast.agents;
    v_seq bigint;
    v_cut timestamptz;
    v_fork uuid;
    v_steps jsonb;
    v_compacted jsonb;
    v_turns bigint;
    v_messages bigint;
    v_calls bigint;
    v_call holdfast.tool_calls;
    v_interrupted integer := 0;
BEGIN
    SELECT * INTO v_source FROM holdfast.agents WHERE id = p_agent AND project_id = p_project FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('agent %s not found', p_agent));
    END IF;
    IF p_seq IS NOT NULL AND p_turn IS NOT NULL THEN
        PERFORM holdfast.raise('HF422', 'give at.seq or at.turn, not both', 'at');
    END IF;
    IF p_seq IS NOT NULL THEN
        IF p_seq < 1 OR p_seq > v_source.last_event_seq THEN
            PERFORM holdfast.raise('HF422', format('at.seq %s is not on the timeline of agent %s (its events are 1 to %s)', p_seq, p_agent, v_source.last_event_seq), 'at.seq');
        END IF;
        v_seq := p_seq;
    ELSIF p_turn IS NOT NULL THEN
        IF p_turn < 1 THEN
            PERFORM holdfast.raise('HF422', 'at.turn must be at least 1', 'at.turn');
        END IF;
        SELECT e.seq INTO v_seq FROM holdfast.events e
         WHERE e.agent_id = p_agent AND e.type IN ('turn.completed', 'turn.failed', 'turn.cancelled')
         ORDER BY e.seq OFFSET p_turn - 1 LIMIT 1;
        IF NOT FOUND THEN
            PERFORM holdfast.raise('HF422', format('agent %s has no finished turn %s', p_agent, p_turn), 'at.turn');
        END IF;
    ELSE
        v_seq := v_source.last_event_seq;
    END IF;

    IF v_seq > 0 THEN
        SELECT e.created_at INTO v_cut FROM holdfast.events e WHERE e.agent_id = p_agent AND e.seq = v_seq;
        IF NOT FOUND THEN
            PERFORM holdfast.raise('HF422', format('event %s of agent %s was removed by retention', v_seq, p_agent), CASE WHEN p_turn IS NULL THEN 'at.seq' ELSE 'at.turn' END);
        END IF;
    ELSE
        v_cut := '-infinity';
    END IF;

    v_fork := holdfast.create_agent(p_project, holdfast.patched_config(holdfast.source_config(v_source, p_version), p_patch, 'config'));

    -- Everything saved up to the cut: a row written in the event's
    -- transaction was written before the event, and every write of the
    -- source is serialized by its row lock, so created_at orders them.
    SELECT coalesce(jsonb_object_agg(s.id, holdfast.uuid_v7()), '{}') INTO v_steps
      FROM holdfast.steps s WHERE s.agent_id = p_agent AND s.created_at <= v_cut;
    INSERT INTO holdfast.steps (id, agent_id, step_seq, kind, epoch, created_at, turn_seq, provider, model, usage)
    SELECT (v_steps ->> s.id::text)::uuid, v_fork, s.step_seq, s.kind, s.epoch, s.created_at, s.turn_seq,
           s.provider, s.model, s.usage
      FROM holdfast.steps s WHERE s.agent_id = p_agent AND s.created_at <= v_cut;
    INSERT INTO holdfast.messages (agent_id, seq, role, content, step_id, created_at)
    SELECT v_fork, m.seq, m.role, m.content, (v_steps ->> m.step_id::text)::uuid, m.created_at
      FROM holdfast.messages m WHERE m.agent_id = p_agent AND m.created_at <= v_cut;
    GET DIAGNOSTICS v_messages = ROW_COUNT;
    INSERT INTO holdfast.tool_calls (agent_id, step_id, position, provider_id, name, input, kind, status,
                                     output, is_error, result_step_id, created_at, completed_at, child_agent_id)
    SELECT v_fork, (v_steps ->> t.step_id::text)::uuid, t.position, t.provider_id, t.name, t.input, t.kind,
           CASE WHEN t.status = 'cancelled' THEN 'cancelled'
                WHEN t.completed_at <= v_cut THEN 'completed' ELSE 'pending' END,
           CASE WHEN t.completed_at <= v_cut THEN t.output END,
           CASE WHEN t.completed_at <= v_cut THEN t.is_error END,
           CASE WHEN t.completed_at <= v_cut THEN (v_steps ->> t.result_step_id::text)::uuid END,
           t.created_at,
           CASE WHEN t.completed_at <= v_cut THEN t.completed_at END,
           t.child_agent_id
      FROM holdfast.tool_calls t WHERE t.agent_id = p_agent AND t.created_at <= v_cut;
    GET DIAGNOSTICS v_calls = ROW_COUNT;

    -- The summary in force at the cut: the last compaction before it.
    SELECT e.data INTO v_compacted FROM holdfast.events e
     WHERE e.agent_id = p_agent AND e.type = 'context.compacted' AND e.seq <= v_seq
     ORDER BY e.seq DESC LIMIT 1;
    SELECT count(*) INTO v_turns FROM holdfast.events e
     WHERE e.agent_id = p_agent AND e.type = 'turn.started' AND e.seq <= v_seq;

    UPDATE holdfast.agents a
       SET forked_from_agent_id = p_agent, forked_from_seq = v_seq,
           attachment_sources = v_source.attachment_sources || p_agent,
           -- Copied model steps keep their epochs (unique per agent): the
           -- fork's own claims come after them.
           lease_epoch = v_source.lease_epoch,
           turn_seq = v_turns,
           last_step_seq = coalesce((SELECT max(s.step_seq) FROM holdfast.steps s WHERE s.agent_id = v_fork), 0),
           last_message_seq = coalesce((SELECT max(m.seq) FROM holdfast.messages m WHERE m.agent_id = v_fork), 0),
           context_summary = v_compacted ->> 'summary',
           context_start_seq = coalesce((v_compacted ->> 'keep_from_seq')::bigint, 0)
     WHERE a.id = v_fork;

    SELECT count(*) INTO v_interrupted FROM holdfast.tool_calls WHERE agent_id = v_fork AND status = 'pending';
    PERFORM holdfast.append_event(v_fork, 'agent.forked', jsonb_build_object(
        'forked_from', jsonb_build_object('agent_id', p_agent, 'seq', v_seq),
        'turn', v_turns, 'messages', v_messages, 'tool_calls', v_calls,
        'interrupted_tool_calls', v_interrupted,
        'config_patch', holdfast.mask_config_secrets(coalesce(p_patch, '{}'))));
    -- Calls open at the cut: for the fork, their outcome is unknown.
    FOR v_call IN SELECT * FROM holdfast.tool_calls WHERE agent_id = v_fork AND status = 'pending'
                   ORDER BY created_at, step_id, position LOOP
        UPDATE holdfast.tool_calls
           SET status = 'completed', output = holdfast.interrupted_output(), is_error = true,
               completed_at = holdfast.now()
         WHERE id = v_call.id;
        PERFORM holdfast.append_event(v_fork, 'tool_call.interrupted', jsonb_build_object(
            'tool_call_id', v_call.id, 'name', v_call.name,
            'output', holdfast.interrupted_output(), 'is_error', true));
    END LOOP;
    RETURN v_fork;
END
$$;

-- The text of p_agent's final answer in its turn p_turn: the text blocks
-- of the turn's last assistant message (NULL when it has none). Reads only.
CREATE OR REPLACE FUNCTION holdfast.turn_answer(p_agent uuid, p_turn bigint)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT string_agg(b.value ->> 'text', E'\n' ORDER BY b.ordinality)
      FROM (SELECT m.content FROM holdfast.messages m JOIN holdfast.steps s ON s.id = m.step_id
             WHERE m.agent_id = p_agent AND s.agent_id = p_agent AND s.turn_seq = p_turn AND m.role = 'assistant'
             ORDER BY m.seq DESC LIMIT 1) m,
           jsonb_array_elements(m.content) WITH ORDINALITY b
     WHERE b.value ->> 'type' = 'text'
$$;

-- p_agent's tool calls in its turn p_turn, in the order they were made:
-- [{"tool_call_id", "name", "input", "status", "output", "is_error"}].
-- Reads only.
CREATE OR REPLACE FUNCTION holdfast.turn_tool_calls(p_agent uuid, p_turn bigint)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'tool_call_id', t.id, 'name', t.name, 'input', t.input, 'status', t.status,
               'output', t.output, 'is_error', t.is_error) ORDER BY s.step_seq, t.position), '[]')
      FROM holdfast.tool_calls t JOIN holdfast.steps s ON s.id = t.step_id
     WHERE t.agent_id = p_agent AND s.agent_id = p_agent AND s.turn_seq = p_turn
$$;

-- p_agent's model usage in its turn p_turn (model and compaction steps).
-- Reads only.
CREATE OR REPLACE FUNCTION holdfast.turn_model_usage(p_agent uuid, p_turn bigint)
RETURNS holdfast.token_usage LANGUAGE sql STABLE AS $$
    SELECT ROW(coalesce(sum((s.usage).input_tokens), 0), coalesce(sum((s.usage).output_tokens), 0),
               coalesce(sum((s.usage).cache_read_tokens), 0), coalesce(sum((s.usage).cache_write_tokens), 0),
               coalesce(sum((s.usage).reasoning_tokens), 0), sum((s.usage).cost_usd),
               coalesce(sum((s.usage).server_tool_requests), 0), coalesce(sum((s.usage).web_search_requests), 0)
              )::holdfast.token_usage
      FROM holdfast.steps s
     WHERE s.agent_id = p_agent AND s.kind IN ('model', 'compaction') AND s.turn_seq = p_turn
$$;

-- Send a running replay's next source turn to its child: the source's user
-- messages of that turn become the child's inputs, in order. The caller
-- holds the child's row lock and the replay's.
CREATE OR REPLACE FUNCTION holdfast.send_replay_turn(p_replay holdfast.replays)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_content jsonb;
BEGIN
    FOR v_content IN
        SELECT m.content FROM holdfast.messages m JOIN holdfast.steps s ON s.id = m.step_id
         WHERE m.agent_id = p_replay.source_agent_id AND s.agent_id = p_replay.source_agent_id
           AND s.turn_seq = p_replay.source_turns[p_replay.turns_sent + 1] AND m.role = 'user'
         ORDER BY m.seq
    LOOP
        PERFORM holdfast.insert_input((SELECT a FROM holdfast.agents a WHERE a.id = p_replay.agent_id),
                                      v_content, NULL, NULL, NULL, 'steer');
    END LOOP;
    UPDATE holdfast.replays SET turns_sent = turns_sent + 1 WHERE id = p_replay.id;
END
$$;

-- Replay p_agent's (of p_project) recorded turns p_from_turn..p_to_turn
-- (NULL: from the first, to the last) with its config (or its config
-- version p_version) changed by p_patch:
-- creates the hidden child agent (the source's config patched, validated
-- as create_agent does; it shares the source's stored files) and the
-- replay, and sends the first turn's inputs. Locks the source's row, then
-- the child's. Raises HF404 (no such agent in the project), HF422 (a bad
-- range naming turns.from / turns.to, no recorded turn in it naming turns,
-- an invalid patched config naming the field). Returns the replay's id.
CREATE OR REPLACE FUNCTION holdfast.create_replay(
    p_project uuid, p_agent uuid, p_patch jsonb, p_from_turn bigint DEFAULT NULL, p_to_turn bigint DEFAULT NULL,
    p_version integer DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_source holdfast.agents;
    v_turns bigint[];
    v_child uuid;
    v_replay holdfast.replays;
BEGIN
    SELECT * INTO v_source FROM holdfast.agents WHERE id = p_agent AND project_id = p_project FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('agent %s not found', p_agent));
    END IF;
    IF p_from_turn < 1 THEN
        PERFORM holdfast.raise('HF422', 'turns.from must be at least 1', 'turns.from');
    END IF;
    IF p_to_turn < coalesce(p_from_turn, 1) THEN
        PERFORM holdfast.raise('HF422', 'turns.to must not be before turns.from', 'turns.to');
    END IF;
    -- The turns whose inputs were recorded (a turn's first model step
    -- saved them), in order.
    SELECT coalesce(array_agg(DISTINCT s.turn_seq ORDER BY s.turn_seq), '{}') INTO v_turns
      FROM holdfast.messages m JOIN holdfast.steps s ON s.id = m.step_id
     WHERE m.agent_id = p_agent AND s.agent_id = p_agent AND m.role = 'user'
       AND s.turn_seq BETWEEN coalesce(p_from_turn, 1) AND coalesce(p_to_turn, v_source.turn_seq);
    IF cardinality(v_turns) = 0 THEN
        PERFORM holdfast.raise('HF422', format('agent %s has no recorded turn to replay in that range', p_agent),
                               'turns');
    END IF;
    v_child := holdfast.create_agent(p_project, holdfast.patched_config(holdfast.source_config(v_source, p_version), p_patch, 'config'));
    INSERT INTO holdfast.replays (project_id, source_agent_id, agent_id, config_patch, source_turns)
    VALUES (p_project, p_agent, v_child, coalesce(p_patch, '{}'), v_turns)
    RETURNING * INTO v_replay;
    PERFORM holdfast.lock_agent(v_child);
    UPDATE holdfast.agents
       SET replay_id = v_replay.id, attachment_sources = v_source.attachment_sources || p_agent
     WHERE id = v_child;
    PERFORM holdfast.send_replay_turn(v_replay);
    RETURN v_replay.id;
END
$$;

-- What the model is told about a call the recording does not have.
CREATE OR REPLACE FUNCTION holdfast.not_in_recording_output(p_recorded jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT to_jsonb(CASE WHEN p_recorded IS NULL
        THEN 'Tool call not in the recording: the recorded turn made no call at this point. This is a replay; nothing was run.'
        ELSE format('Tool call not in the recording: the recorded call at this point was %s with input %s. This is a replay; nothing was run.',
                    p_recorded ->> 'name', p_recorded -> 'input') END)
$$;

-- Answer every runnable call of a replay's child from the recording,
-- instead of running it: the call at the same position of the same turn of
-- the source (its k-th call of the turn, counting every step of it), when
-- it has the same name and the same input and a result, gives its recorded
-- result; any other call gets an error result (not_in_recording_output)
-- and `replay.diverged` {"replay_id", "turn", "source_turn", "position",
-- "tool_call_id", "name", "input", "recorded": {"name", "input"} | null}.
-- Nothing leaves Holdfast: no command is queued, no client waits, no
-- server is called. Each answer is committed as commit_tool_result commits
-- a run call's (fenced by p_epoch, the agent stays leased); the answers
-- depend on saved rows only, so a step cut off midway answers the rest
-- the same way on its retry. Locks the child's row, then the calls.
-- Raises HF001 (lease lost), HF404 (not a replay's agent). Returns the
-- number of calls answered.
CREATE OR REPLACE FUNCTION holdfast.answer_replay_calls(p_agent uuid, p_epoch bigint)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_agent holdfast.agents;
    v_replay holdfast.replays;
    v_call record;
    v_recorded jsonb;
    v_source_turn bigint;
    v_count integer := 0;
BEGIN
    v_agent := holdfast.lock_leased_agent(p_agent, p_epoch);
    SELECT * INTO v_replay FROM holdfast.replays WHERE id = v_agent.replay_id;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('agent %s is not a replay''s', p_agent));
    END IF;
    FOR v_call IN
        SELECT c.* FROM (
            SELECT t.id, t.name, t.input, t.status, s.turn_seq,
                   (row_number() OVER (PARTITION BY s.turn_seq ORDER BY s.step_seq, t.position) - 1)::integer AS turn_position
              FROM holdfast.tool_calls t JOIN holdfast.steps s ON s.id = t.step_id
             WHERE t.agent_id = p_agent AND s.agent_id = p_agent AND s.turn_seq = v_agent.turn_seq) c
         WHERE c.status = 'pending'
         ORDER BY c.turn_position
    LOOP
        v_source_turn := v_replay.source_turns[v_call.turn_seq];
        v_recorded := holdfast.turn_tool_calls(v_replay.source_agent_id, v_source_turn) -> v_call.turn_position;
        IF v_recorded IS NOT NULL AND v_recorded ->> 'name' = v_call.name AND v_recorded -> 'input' = v_call.input
           AND v_recorded ->> 'status' = 'completed' THEN
            PERFORM holdfast.commit_tool_result(p_agent, p_epoch, v_call.id, v_recorded -> 'output',
                                                (v_recorded ->> 'is_error')::boolean);
        ELSE
            PERFORM holdfast.commit_tool_result(p_agent, p_epoch, v_call.id,
                                                holdfast.not_in_recording_output(v_recorded), true);
            PERFORM holdfast.append_event(p_agent, 'replay.diverged', jsonb_build_object(
                'replay_id', v_replay.id, 'turn', v_call.turn_seq, 'source_turn', v_source_turn,
                'position', v_call.turn_position, 'tool_call_id', v_call.id, 'name', v_call.name,
                'input', v_call.input,
                'recorded', CASE WHEN v_recorded IS NULL THEN NULL
                                 ELSE jsonb_build_object('name', v_recorded -> 'name', 'input', v_recorded -> 'input') END));
        END IF;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;

-- One replayed turn of the report: the source's and the replay's final
-- answers, tool calls ({"name", "input"} each) and usage, and the first
-- position where the calls differ. Reads only.
CREATE OR REPLACE FUNCTION holdfast.replay_turn_report(p_replay holdfast.replays, p_turn integer)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_source_turn bigint := p_replay.source_turns[p_turn];
    v_source_calls jsonb := holdfast.turn_tool_calls(p_replay.source_agent_id, v_source_turn);
    v_replay_calls jsonb := holdfast.turn_tool_calls(p_replay.agent_id, p_turn);
    v_source_answer text := holdfast.turn_answer(p_replay.source_agent_id, v_source_turn);
    v_replay_answer text := holdfast.turn_answer(p_replay.agent_id, p_turn);
    v_divergence jsonb;
    v_source jsonb;
    v_replayed jsonb;
BEGIN
    FOR v_position IN 0 .. greatest(jsonb_array_length(v_source_calls), jsonb_array_length(v_replay_calls)) - 1 LOOP
        v_source := v_source_calls -> v_position;
        v_replayed := v_replay_calls -> v_position;
        IF v_source IS NULL OR v_replayed IS NULL OR v_source -> 'name' <> v_replayed -> 'name'
           OR v_source -> 'input' <> v_replayed -> 'input' THEN
            v_divergence := jsonb_build_object(
                'position', v_position,
                'source', CASE WHEN v_source IS NULL THEN NULL
                               ELSE jsonb_build_object('name', v_source -> 'name', 'input', v_source -> 'input') END,
                'replay', CASE WHEN v_replayed IS NULL THEN NULL
                               ELSE jsonb_build_object('name', v_replayed -> 'name', 'input', v_replayed -> 'input') END);
            EXIT;
        END IF;
    END LOOP;
    RETURN jsonb_build_object(
        'turn', p_turn, 'source_turn', v_source_turn,
        'source', jsonb_build_object(
            'answer', v_source_answer,
            'tool_calls', (SELECT coalesce(jsonb_agg(jsonb_build_object('name', c -> 'name', 'input', c -> 'input',
                                                                        'output', c -> 'output', 'is_error', c -> 'is_error')), '[]')
                             FROM jsonb_array_elements(v_source_calls) c),
            'usage', holdfast.usage_json(holdfast.turn_model_usage(p_replay.source_agent_id, v_source_turn))),
        'replay', jsonb_build_object(
            'answer', v_replay_answer,
            'tool_calls', (SELECT coalesce(jsonb_agg(jsonb_build_object('name', c -> 'name', 'input', c -> 'input',
                                                                        'output', c -> 'output', 'is_error', c -> 'is_error')), '[]')
                             FROM jsonb_array_elements(v_replay_calls) c),
            'usage', holdfast.usage_json(holdfast.turn_model_usage(p_replay.agent_id, p_turn))),
        'diverged', v_divergence IS NOT NULL,
        'first_divergence', v_divergence,
        'answer_equal', v_source_answer IS NOT DISTINCT FROM v_replay_answer);
END
$$;

-- A replay's report (GET /v1/replays/{id}), NULL when it is not in
-- p_project: {"id", "source_agent_id", "agent_id", "status", "error",
-- "config_patch", "created_at", "completed_at", "turns_total",
-- "turns_replayed", "turns": [replay_turn_report for each turn sent],
-- "totals": {"turns_equal", "turns_diverged", "source": usage, "replay":
-- usage}}. A turn is equal when its calls and its final answer are the
-- source's. Reads only.
CREATE OR REPLACE FUNCTION holdfast.replay_report(p_project uuid, p_replay uuid)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_replay holdfast.replays;
    v_turns jsonb := '[]';
    v_source_usage holdfast.token_usage := holdfast.zero_usage();
    v_replay_usage holdfast.token_usage := holdfast.zero_usage();
    v_equal integer := 0;
    v_diverged integer := 0;
    v_turn jsonb;
BEGIN
    SELECT * INTO v_replay FROM holdfast.replays WHERE id = p_replay AND project_id = p_project;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    FOR v_k IN 1 .. v_replay.turns_sent LOOP
        v_turn := holdfast.replay_turn_report(v_replay, v_k);
        v_turns := v_turns || jsonb_build_array(v_turn);
        v_source_usage := holdfast.add_usage(v_source_usage,
            holdfast.turn_model_usage(v_replay.source_agent_id, v_replay.source_turns[v_k]));
        v_replay_usage := holdfast.add_usage(v_replay_usage, holdfast.turn_model_usage(v_replay.agent_id, v_k));
        IF (v_turn ->> 'diverged')::boolean THEN
            v_diverged := v_diverged + 1;
        ELSIF (v_turn ->> 'answer_equal')::boolean THEN
            v_equal := v_equal + 1;
        END IF;
    END LOOP;
    RETURN jsonb_build_object(
        'id', v_replay.id, 'source_agent_id', v_replay.source_agent_id, 'agent_id', v_replay.agent_id,
        'status', v_replay.status, 'error', v_replay.error,
        'config_patch', holdfast.mask_config_secrets(v_replay.config_patch),
        'created_at', v_replay.created_at, 'completed_at', v_replay.completed_at,
        'turns_total', cardinality(v_replay.source_turns), 'turns_replayed', v_replay.turns_sent,
        'turns', v_turns,
        'totals', jsonb_build_object('turns_equal', v_equal, 'turns_diverged', v_diverged,
                                     'source', holdfast.usage_json(v_source_usage),
                                     'replay', holdfast.usage_json(v_replay_usage)));
END
$$;

-- A source agent's replays, oldest first, without their turns
-- (GET /v1/agents/{id}/replays): {"replays": [{"id", "agent_id", "status",
-- "error", "config_patch", "turns_total", "turns_replayed", "created_at",
-- "completed_at"}]}; NULL when the agent is not in p_project. Reads only.
CREATE OR REPLACE FUNCTION holdfast.list_replays(p_project uuid, p_agent uuid)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('replays', coalesce((
        SELECT jsonb_agg(jsonb_build_object(
                   'id', r.id, 'agent_id', r.agent_id, 'status', r.status, 'error', r.error,
                   'config_patch', holdfast.mask_config_secrets(r.config_patch),
                   'turns_total', cardinality(r.source_turns), 'turns_replayed', r.turns_sent,
                   'created_at', r.created_at, 'completed_at', r.completed_at) ORDER BY r.id)
          FROM holdfast.replays r WHERE r.source_agent_id = a.id), '[]'))
      FROM holdfast.agents a WHERE a.id = p_agent AND a.project_id = p_project
$$;

-- When a replay's child ends a turn: the next recorded turn is sent, or,
-- after the last one, the replay is completed; a failed or cancelled turn
-- ends the replay as failed (with the turn's error). The end is recorded
-- on the child's timeline as `replay.completed` {"replay_id",
-- "source_agent_id", "status", "error", "turns_replayed", "turns_total"}
-- (webhooks deliver it like any event). Lock order: the child (held by the
-- transaction that ended its turn), then the replay.
CREATE OR REPLACE FUNCTION holdfast.tg_events_advance_replay() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_replay holdfast.replays;
BEGIN
    SELECT r.* INTO v_replay FROM holdfast.replays r
     WHERE r.agent_id = NEW.agent_id AND r.status = 'running' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF NEW.type = 'turn.completed' AND v_replay.turns_sent < cardinality(v_replay.source_turns) THEN
        PERFORM holdfast.send_replay_turn(v_replay);
        RETURN NULL;
    END IF;
    UPDATE holdfast.replays
       SET status = CASE WHEN NEW.type = 'turn.completed' THEN 'completed' ELSE 'failed' END,
           error = CASE WHEN NEW.type = 'turn.completed' THEN NULL
                        ELSE coalesce(NEW.data -> 'error', jsonb_build_object('type', NEW.type)) END,
           completed_at = holdfast.now()
     WHERE id = v_replay.id
    RETURNING * INTO v_replay;
    PERFORM holdfast.append_event(NEW.agent_id, 'replay.completed', jsonb_build_object(
        'replay_id', v_replay.id, 'source_agent_id', v_replay.source_agent_id, 'status', v_replay.status,
        'error', v_replay.error, 'turns_replayed', v_replay.turns_sent,
        'turns_total', cardinality(v_replay.source_turns)));
    RETURN NULL;
END
$$;
CREATE TRIGGER _310_advance_replay AFTER INSERT ON holdfast.events
    FOR EACH ROW WHEN (NEW.type IN ('turn.completed', 'turn.failed', 'turn.cancelled'))
    EXECUTE FUNCTION holdfast.tg_events_advance_replay();
