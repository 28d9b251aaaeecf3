-- sql/schema/tools.sql — tool-call waits: approvals, questions, custom tool results, subagents.
--
-- This area's current schema: its tables, indexes and views first, then,
-- after the line below, its functions and triggers.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

CREATE TYPE holdfast.tool_result AS (
	tool_call_id uuid,
	output jsonb,
	is_error boolean
);

-- Tool calls, with their state machine (docs/state-machines.md):
--   pending            a worker may run it (external, internal)
--   awaiting_approval  waits for approve/deny
--   waiting            waits for a client result, an answer or a machine
--   running            an external call is in flight under lease epoch running_epoch
--   completed          has output
--   cancelled          its turn was cancelled
-- agent_id, step_id and result_step_id have no foreign keys (per-row checks
-- on the step path): the functions that write them hold the agent's lock
-- and name the step they have just inserted; neither is ever deleted.
CREATE TABLE holdfast.tool_calls (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    agent_id uuid NOT NULL,
    step_id uuid NOT NULL,
    "position" integer NOT NULL,
    -- The provider's id of the call (tool_use id / call_id).
    provider_id text NOT NULL,
    name text NOT NULL,
    input jsonb NOT NULL,
    kind text NOT NULL,
    status text NOT NULL,
    -- The lease epoch whose worker runs its external IO (set while running).
    running_epoch bigint,
    output jsonb,
    is_error boolean,
    result_step_id uuid,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    completed_at timestamptz,
    child_agent_id uuid,
    -- When retention replaced the output with JSON null.
    output_pruned_at timestamptz,
    CONSTRAINT tool_calls_completed_has_output CHECK ((status = 'completed') = ((output IS NOT NULL) AND (is_error IS NOT NULL) AND (completed_at IS NOT NULL))),
    CONSTRAINT tool_calls_kind_check CHECK (kind IN ('external', 'internal', 'custom', 'question', 'command')),
    CONSTRAINT tool_calls_running_has_epoch CHECK ((status = 'running') = (running_epoch IS NOT NULL)),
    CONSTRAINT tool_calls_status_check CHECK (status IN ('pending', 'awaiting_approval', 'waiting', 'running', 'completed', 'cancelled')),
    CONSTRAINT tool_calls_pkey PRIMARY KEY (id),
    CONSTRAINT tool_calls_step_id_position_key UNIQUE (step_id, "position"),
    CONSTRAINT tool_calls_child_agent_id_fkey FOREIGN KEY (child_agent_id) REFERENCES holdfast.agents(id)
);

-- An agent's tool calls in the order the context load reads them.
CREATE INDEX tool_calls_agent_idx ON holdfast.tool_calls (agent_id, created_at, step_id, "position");

CREATE INDEX tool_calls_open_idx ON holdfast.tool_calls (agent_id, status) WHERE (status <> ALL (ARRAY['completed', 'cancelled']));

ALTER TABLE holdfast.agents ADD CONSTRAINT agents_parent_tool_call_id_fkey FOREIGN KEY (parent_tool_call_id) REFERENCES holdfast.tool_calls(id);

-- A person's decision on one tool call (kind tool_call) or on a turn going
-- past a reached budget (kind budget, with `budget`: the {"budget",
-- "limit", "value"} reached; at most one pending per agent).
CREATE TABLE holdfast.approvals (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    agent_id uuid NOT NULL,
    tool_call_id uuid,
    status text DEFAULT 'pending' NOT NULL,
    decided_by text,
    reason text,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    decided_at timestamptz,
    kind text DEFAULT 'tool_call' NOT NULL,
    budget jsonb,
    CONSTRAINT approvals_decided_has_decider CHECK ((status IN ('approved', 'denied')) = ((decided_by IS NOT NULL) AND (decided_at IS NOT NULL))),
    CONSTRAINT approvals_kind_check CHECK (kind IN ('tool_call', 'budget')),
    CONSTRAINT approvals_kind_has_subject CHECK (
        CASE kind WHEN 'tool_call' THEN tool_call_id IS NOT NULL AND budget IS NULL
                  ELSE tool_call_id IS NULL AND budget IS NOT NULL END),
    CONSTRAINT approvals_status_check CHECK (status IN ('pending', 'approved', 'denied', 'cancelled')),
    CONSTRAINT approvals_pkey PRIMARY KEY (id),
    CONSTRAINT approvals_tool_call_id_key UNIQUE (tool_call_id),
    CONSTRAINT approvals_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id),
    CONSTRAINT approvals_tool_call_id_fkey FOREIGN KEY (tool_call_id) REFERENCES holdfast.tool_calls(id)
);

CREATE INDEX approvals_pending_idx ON holdfast.approvals (agent_id, created_at) WHERE (status = 'pending');

CREATE UNIQUE INDEX approvals_one_pending_budget_idx ON holdfast.approvals (agent_id) WHERE ((kind = 'budget') AND (status = 'pending'));

-- An ask_user call waiting for its answer.
CREATE TABLE holdfast.questions (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    agent_id uuid NOT NULL,
    tool_call_id uuid NOT NULL,
    question text NOT NULL,
    status text DEFAULT 'pending' NOT NULL,
    answer text,
    answered_by text,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    answered_at timestamptz,
    CONSTRAINT questions_answered_has_answer CHECK ((status = 'answered') = ((answer IS NOT NULL) AND (answered_by IS NOT NULL) AND (answered_at IS NOT NULL))),
    CONSTRAINT questions_status_check CHECK (status IN ('pending', 'answered', 'cancelled')),
    CONSTRAINT questions_pkey PRIMARY KEY (id),
    CONSTRAINT questions_tool_call_id_key UNIQUE (tool_call_id),
    CONSTRAINT questions_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id),
    CONSTRAINT questions_tool_call_id_fkey FOREIGN KEY (tool_call_id) REFERENCES holdfast.tool_calls(id)
);

CREATE INDEX questions_pending_idx ON holdfast.questions (agent_id, created_at) WHERE (status = 'pending');

-- ==== functions and triggers ====

-- Open the wait a call's status asks for: an approval for awaiting_approval,
-- a question for a waiting `question` call, and for a waiting run_command
-- call its command (queue_command). Idempotent (unique tool_call_id). The
-- caller holds the agent's row lock.
CREATE OR REPLACE FUNCTION holdfast.open_tool_wait(p_call_id uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_call holdfast.tool_calls;
    v_id uuid;
    v_question text;
BEGIN
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_call_id;
    IF v_call.status = 'awaiting_approval' THEN
        INSERT INTO holdfast.approvals (agent_id, tool_call_id) VALUES (v_call.agent_id, v_call.id)
        ON CONFLICT (tool_call_id) DO NOTHING RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM holdfast.append_event(v_call.agent_id, 'approval.requested', jsonb_build_object(
                'approval_id', v_id, 'kind', 'tool_call', 'tool_call_id', v_call.id, 'name', v_call.name,
                'input', v_call.input));
        END IF;
    ELSIF v_call.status = 'waiting' AND v_call.kind = 'question' THEN
        v_question := coalesce(v_call.input ->> 'question', v_call.input #>> '{}', v_call.input::text);
        INSERT INTO holdfast.questions (agent_id, tool_call_id, question)
        VALUES (v_call.agent_id, v_call.id, v_question)
        ON CONFLICT (tool_call_id) DO NOTHING RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM holdfast.append_event(v_call.agent_id, 'question.asked', jsonb_build_object(
                'question_id', v_id, 'tool_call_id', v_call.id, 'question', v_question));
        END IF;
    ELSIF v_call.status = 'waiting' AND v_call.kind = 'command' THEN
        PERFORM holdfast.queue_command(v_call);
    END IF;
END
$$;

-- The data of a `tool_call.completed` event: {"tool_call_id", "name",
-- "output", "is_error"}. An output whose JSON text is over 16 KiB is left
-- out, so a timeline row (and each webhook body and stream frame) stays
-- small however much a tool returns: "output_omitted": true,
-- "output_bytes" (its size) and "output_preview" (its first 1,024
-- characters) stand for it. The whole output stays on the tool call (GET
-- /v1/agents/{id}/tool-calls) and in the model's history. Every writer of
-- the event builds it here. Pure.
CREATE OR REPLACE FUNCTION holdfast.tool_call_completed_data(
    p_call_id uuid, p_name text, p_output jsonb, p_is_error boolean)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN octet_length(p_output::text) <= 16384 THEN
            jsonb_build_object('tool_call_id', p_call_id, 'name', p_name, 'output', p_output,
                               'is_error', p_is_error)
        ELSE
            jsonb_build_object('tool_call_id', p_call_id, 'name', p_name, 'is_error', p_is_error,
                               'output_omitted', true, 'output_bytes', octet_length(p_output::text),
                               'output_preview', left(p_output #>> '{}', 1024))
    END
$$;

-- Complete a waiting tool call with an output, record its event, and settle
-- the agent if no worker holds it (a leased agent settles on release). The
-- caller holds the agent's row lock and the call's.
CREATE OR REPLACE FUNCTION holdfast.complete_waiting_call(
    p_call holdfast.tool_calls, p_output jsonb, p_is_error boolean, p_event text, p_event_data jsonb)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE holdfast.tool_calls
       SET status = 'completed', output = p_output, is_error = p_is_error, completed_at = holdfast.now()
     WHERE id = p_call.id;
    IF p_event IS NOT NULL THEN
        PERFORM holdfast.append_event(p_call.agent_id, p_event, p_event_data);
    END IF;
    PERFORM holdfast.append_event(p_call.agent_id, 'tool_call.completed',
        holdfast.tool_call_completed_data(p_call.id, p_call.name, p_output, p_is_error));
    IF (SELECT state FROM holdfast.agents WHERE id = p_call.agent_id) <> 'running' THEN
        PERFORM holdfast.settle_agent(p_call.agent_id);
    END IF;
END
$$;

-- Trigger _200_open_tool_wait on events (AFTER INSERT, only for the
-- tool_call.created events of calls that open a wait: awaiting_approval, or a
-- waiting question or command call): open that call's wait.
CREATE OR REPLACE FUNCTION holdfast.tg_events_open_tool_wait() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM holdfast.open_tool_wait((NEW.data ->> 'id')::uuid);
    RETURN NULL;
END
$$;
CREATE TRIGGER _200_open_tool_wait AFTER INSERT ON holdfast.events
    FOR EACH ROW WHEN (NEW.type = 'tool_call.created'
                       AND (NEW.data ->> 'status' = 'awaiting_approval'
                            OR (NEW.data ->> 'status' = 'waiting'
                                AND NEW.data ->> 'kind' IN ('question', 'command'))))
    EXECUTE FUNCTION holdfast.tg_events_open_tool_wait();

-- A cancelled call's approval or question is cancelled with it, so a late
-- answer gets HF409.
CREATE OR REPLACE FUNCTION holdfast.tg_tool_calls_cancel_waits() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE holdfast.approvals SET status = 'cancelled' WHERE tool_call_id = NEW.id AND status = 'pending';
    UPDATE holdfast.questions SET status = 'cancelled' WHERE tool_call_id = NEW.id AND status = 'pending';
    RETURN NULL;
END
$$;
CREATE TRIGGER _200_cancel_waits AFTER UPDATE OF status ON holdfast.tool_calls
    FOR EACH ROW WHEN (NEW.status = 'cancelled' AND OLD.status <> 'cancelled')
    EXECUTE FUNCTION holdfast.tg_tool_calls_cancel_waits();

-- Decide an approval. p_decision: 'approve' | 'deny'. The first decision
-- wins; the same decision again by the same person returns the approval
-- unchanged (idempotent); any other decision raises HF409. A tool-call
-- approval: approving lets the call run (pending) or wait for its outside
-- party; denying completes it with an error output the model sees. A
-- budget approval: answer_budget_approval. Locks: the agent, then the call
-- (tool-call approvals), then the approval. Raises HF404, HF409, HF422.
CREATE OR REPLACE FUNCTION holdfast.answer_approval(p_approval uuid, p_decision text, p_by text, p_reason text DEFAULT NULL)
RETURNS holdfast.approvals LANGUAGE plpgsql AS $$
DECLARE
    v_approval holdfast.approvals;
    v_call holdfast.tool_calls;
    v_status text;
BEGIN
    IF p_decision IS NULL OR p_decision NOT IN ('approve', 'deny') THEN
        PERFORM holdfast.raise('HF422', 'decision must be "approve" or "deny"', 'decision');
    END IF;
    IF p_by IS NULL OR btrim(p_by) = '' THEN
        PERFORM holdfast.raise('HF422', 'by must name who decides', 'by');
    END IF;
    SELECT * INTO v_approval FROM holdfast.approvals WHERE id = p_approval;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('approval %s not found', p_approval));
    END IF;
    PERFORM holdfast.lock_agent(v_approval.agent_id);
    IF v_approval.kind = 'tool_call' THEN
        SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = v_approval.tool_call_id FOR UPDATE;
    END IF;
    SELECT * INTO v_approval FROM holdfast.approvals WHERE id = p_approval FOR UPDATE;
    v_status := CASE p_decision WHEN 'approve' THEN 'approved' ELSE 'denied' END;
    IF v_approval.status <> 'pending' THEN
        IF v_approval.status = v_status AND v_approval.decided_by = p_by THEN
            RETURN v_approval;
        END IF;
        PERFORM holdfast.raise('HF409', format('approval %s is already %s', p_approval, v_approval.status));
    END IF;
    UPDATE holdfast.approvals
       SET status = v_status, decided_by = p_by, reason = p_reason, decided_at = holdfast.now()
     WHERE id = p_approval RETURNING * INTO v_approval;
    PERFORM holdfast.append_event(v_approval.agent_id, 'approval.answered', jsonb_build_object(
        'approval_id', p_approval, 'kind', v_approval.kind, 'tool_call_id', v_approval.tool_call_id,
        'decision', p_decision, 'by', p_by, 'reason', p_reason));
    IF v_approval.kind = 'budget' THEN
        PERFORM holdfast.answer_budget_approval(v_approval);
    ELSIF v_status = 'denied' THEN
        PERFORM holdfast.complete_waiting_call(v_call,
            to_jsonb(format('The user denied this tool call.%s',
                            coalesce(' Reason: ' || p_reason, ''))),
            true, NULL, NULL);
    ELSE
        UPDATE holdfast.tool_calls
           SET status = CASE WHEN kind IN ('custom', 'question', 'command') THEN 'waiting' ELSE 'pending' END
         WHERE id = v_call.id;
        PERFORM holdfast.open_tool_wait(v_call.id);
        IF (SELECT state FROM holdfast.agents WHERE id = v_call.agent_id) <> 'running' THEN
            PERFORM holdfast.settle_agent(v_call.agent_id);
        END IF;
    END IF;
    RETURN v_approval;
END
$$;

-- Answer a question. The first answer wins; the same answer again by the
-- same person returns the question unchanged; anything else raises HF409.
-- The answer completes the ask_user call. Locks: agent, call, question.
CREATE OR REPLACE FUNCTION holdfast.answer_question(p_question uuid, p_answer text, p_by text)
RETURNS holdfast.questions LANGUAGE plpgsql AS $$
DECLARE
    v_question holdfast.questions;
    v_call holdfast.tool_calls;
BEGIN
    IF p_answer IS NULL THEN
        PERFORM holdfast.raise('HF422', 'answer must be a string', 'answer');
    END IF;
    IF p_by IS NULL OR btrim(p_by) = '' THEN
        PERFORM holdfast.raise('HF422', 'by must name who answers', 'by');
    END IF;
    SELECT * INTO v_question FROM holdfast.questions WHERE id = p_question;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('question %s not found', p_question));
    END IF;
    PERFORM holdfast.lock_agent(v_question.agent_id);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = v_question.tool_call_id FOR UPDATE;
    SELECT * INTO v_question FROM holdfast.questions WHERE id = p_question FOR UPDATE;
    IF v_question.status <> 'pending' THEN
        IF v_question.status = 'answered' AND v_question.answer = p_answer AND v_question.answered_by = p_by THEN
            RETURN v_question;
        END IF;
        PERFORM holdfast.raise('HF409', format('question %s is already %s', p_question, v_question.status));
    END IF;
    UPDATE holdfast.questions
       SET status = 'answered', answer = p_answer, answered_by = p_by, answered_at = holdfast.now()
     WHERE id = p_question RETURNING * INTO v_question;
    PERFORM holdfast.complete_waiting_call(v_call, to_jsonb(p_answer), false, 'question.answered',
        jsonb_build_object('question_id', p_question, 'tool_call_id', v_call.id,
                           'answer', p_answer, 'by', p_by));
    RETURN v_question;
END
$$;

-- Record the results of custom tool calls, posted by clients' backends
-- (first result wins: docs/api.md), in one transaction: the API's group
-- commit. Locks every agent of the batch (FOR UPDATE, in id order, so two
-- batches cannot deadlock on each other), then, row by row in agent id
-- order, each call. Only a call of kind 'custom' in status 'waiting'
-- accepts a result: it becomes completed with tool_call.completed. An
-- unleased agent is settled (ready once nothing else waits), its event
-- written with the settle in one agent UPDATE; a leased one (its worker is
-- running other calls of the batch) is settled by its release. No step row
-- is written: a step is a worker's unit of work, and no worker took part.
-- A refused row writes nothing and aborts nothing: no savepoint, no
-- exception; rows are applied in order, so a second result for a call in
-- the same batch sees the first and is a conflict, as it would be alone.
-- Returns one row per result, with its position in p_results (ord, from 1):
-- outcome 'completed' (with the completed call, tool_call), 'not_found', 'conflict'
-- (the call already has a result, was cancelled, or is not a custom call
-- waiting for one; identical payloads included) or 'invalid' (output is
-- SQL NULL; JSON null is a valid output; or its image or document blocks
-- are malformed or not for the agent's provider: store_tool_output, which
-- stores their files once), with message and field. Raises
-- nothing of its own; any other error aborts the whole batch, and the API
-- then submits its results one by one.
CREATE OR REPLACE FUNCTION holdfast.submit_tool_results(p_results holdfast.tool_result[])
RETURNS TABLE (ord integer, outcome text, message text, field text, tool_call holdfast.tool_calls)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_row record;
    v_agent holdfast.agents;
    v_data jsonb;
    v_stored record;
    v_agents uuid[];
BEGIN
    -- Each result's agent (NULL for no such call), in p_results' order,
    -- looked up once by the call's key: a scalar subquery per result,
    -- never a join whose plan the session's first call fixed (see
    -- lock_agents). A call's agent never changes, so it holds after the lock.
    v_agents := ARRAY(
        SELECT (SELECT t.agent_id FROM holdfast.tool_calls t WHERE t.id = r.tool_call_id)
          FROM unnest(p_results) WITH ORDINALITY AS r(tool_call_id, output, is_error, ord)
         ORDER BY r.ord);
    PERFORM 1 FROM holdfast.lock_agents(v_agents);
    FOR v_row IN
        SELECT u.ord::integer AS ord, u.tool_call_id, u.output, u.is_error, u.agent_id
          FROM unnest(p_results, v_agents) WITH ORDINALITY AS u(tool_call_id, output, is_error, agent_id, ord)
         ORDER BY u.agent_id, u.ord
    LOOP
        ord := v_row.ord;
        message := NULL;
        field := NULL;
        tool_call := NULL;
        IF v_row.output IS NULL THEN
            outcome := 'invalid';
            message := 'output must not be null';
            field := 'output';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF v_row.agent_id IS NULL THEN
            outcome := 'not_found';
            message := format('tool call %s not found', v_row.tool_call_id);
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT * INTO tool_call FROM holdfast.tool_calls
         WHERE agent_id = v_row.agent_id AND id = v_row.tool_call_id FOR UPDATE;
        IF tool_call.kind <> 'custom' THEN
            outcome := 'conflict';
            message := format('tool call %s is a %s call, not a custom one', tool_call.id, tool_call.kind);
        ELSIF tool_call.status <> 'waiting' THEN
            outcome := 'conflict';
            message := format('tool call %s is %s', tool_call.id, tool_call.status);
        ELSE
            -- Image and document blocks: checked, their files stored once.
            SELECT * INTO v_agent FROM holdfast.agents WHERE id = tool_call.agent_id;
            SELECT * INTO v_stored FROM holdfast.store_tool_output(v_agent, v_row.output);
            outcome := CASE WHEN v_stored.message IS NULL THEN 'completed' ELSE 'invalid' END;
            message := v_stored.message;
            field := v_stored.field;
        END IF;
        IF outcome = 'completed' THEN
            UPDATE holdfast.tool_calls
               SET status = 'completed', output = v_stored.output,
                   is_error = coalesce(v_row.is_error, false), completed_at = holdfast.now()
             WHERE agent_id = tool_call.agent_id AND id = tool_call.id
            RETURNING * INTO tool_call;
            v_data := holdfast.tool_call_completed_data(tool_call.id, tool_call.name, v_stored.output,
                                                        tool_call.is_error);
            -- v_agent was read for store_tool_output above; nothing since
            -- has written the agent row.
            IF v_agent.state <> 'running' THEN
                PERFORM holdfast.settle_agent(tool_call.agent_id, ARRAY['tool_call.completed'], ARRAY[v_data], NULL);
            ELSE
                PERFORM holdfast.append_event(tool_call.agent_id, 'tool_call.completed', v_data);
            END IF;
        END IF;
        IF outcome <> 'completed' THEN
            tool_call := NULL;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Record the result of one custom tool call: submit_tool_results with a
-- batch of one, its refusal raised. Locks as that function does. Raises
-- HF404 (no such call), HF409 (the call already has a result, was
-- cancelled, or is not a custom call waiting for one), HF422 (output is
-- SQL NULL). Returns the completed call.
CREATE OR REPLACE FUNCTION holdfast.submit_tool_result(p_tool_call uuid, p_output jsonb, p_is_error boolean)
RETURNS holdfast.tool_calls LANGUAGE plpgsql AS $$
DECLARE
    v_result record;
BEGIN
    SELECT * INTO v_result
      FROM holdfast.submit_tool_results(ARRAY[ROW(p_tool_call, p_output, p_is_error)::holdfast.tool_result]);
    CASE v_result.outcome
        WHEN 'completed' THEN RETURN v_result.tool_call;
        WHEN 'not_found' THEN PERFORM holdfast.raise('HF404', v_result.message);
        WHEN 'conflict' THEN PERFORM holdfast.raise('HF409', v_result.message);
        ELSE PERFORM holdfast.raise('HF422', v_result.message, v_result.field);
    END CASE;
    RETURN NULL;
END
$$;

-- Spawn a subagent for a spawn_subagent call, within the tree's limits: the child's depth
-- (parent's + 1) at most the root's max_subagent_depth; the parent's live
-- children (its spawn calls still waiting on a child) fewer than its
-- max_live_children; the root's tree smaller than its max_descendants. An
-- over-limit spawn creates nothing: the call completes with an error result
-- (commit_tool_result) `{"type": "limit_exceeded", "limit", "value",
-- "message"}` and NULL is returned. Otherwise: the child, its
-- first input and the parent's waiting call in one transaction; returns the
-- child's id. Locks the parent (fenced, HF001), its call, then the tree's
-- root (descendants are counted under the root's lock, so concurrent spawns
-- in one tree cannot overshoot). Raises HF404, HF409, HF422.
CREATE OR REPLACE FUNCTION holdfast.spawn_subagent(
    p_agent uuid, p_epoch bigint, p_tool_call uuid, p_config jsonb, p_prompt text)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_parent holdfast.agents;
    v_root holdfast.agents;
    v_call holdfast.tool_calls;
    v_child uuid;
    v_limit text;
    v_value integer;
    v_message text;
BEGIN
    v_parent := holdfast.lock_leased_agent(p_agent, p_epoch);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = p_tool_call AND agent_id = p_agent FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM holdfast.raise('HF404', format('tool call %s not found', p_tool_call));
    END IF;
    IF v_call.status <> 'pending' THEN
        PERFORM holdfast.raise('HF409', format('tool call %s is %s', p_tool_call, v_call.status));
    END IF;
    IF p_prompt IS NULL OR btrim(p_prompt) = '' THEN
        PERFORM holdfast.raise('HF422', 'prompt must be a non-empty string', 'prompt');
    END IF;
    IF v_parent.root_agent_id IS NULL THEN
        v_root := v_parent;
    ELSE
        v_root := holdfast.lock_agent(v_parent.root_agent_id);
    END IF;

    v_value := holdfast.agent_limit(v_root.config, 'max_subagent_depth');
    IF v_parent.subagent_depth + 1 > v_value THEN
        v_limit := 'max_subagent_depth';
        v_message := format('this agent is at subagent depth %s; its tree may be at most %s deep',
                            v_parent.subagent_depth, v_value);
    END IF;
    IF v_limit IS NULL THEN
        v_value := holdfast.agent_limit(v_parent.config, 'max_live_children');
        IF (SELECT count(*) FROM holdfast.tool_calls t
             WHERE t.agent_id = p_agent AND t.status = 'waiting' AND t.child_agent_id IS NOT NULL) >= v_value THEN
            v_limit := 'max_live_children';
            v_message := format('this agent already has %s subagents running, the most it may have at once', v_value);
        END IF;
    END IF;
    IF v_limit IS NULL THEN
        v_value := holdfast.agent_limit(v_root.config, 'max_descendants');
        IF (SELECT count(*) FROM holdfast.agents d WHERE d.root_agent_id = v_root.id) >= v_value THEN
            v_limit := 'max_descendants';
            v_message := format('this agent''s tree already has %s subagents, the most it may have', v_value);
        END IF;
    END IF;
    IF v_limit IS NOT NULL THEN
        PERFORM holdfast.commit_tool_result(p_agent, p_epoch, p_tool_call, jsonb_build_object(
            'type', 'limit_exceeded', 'limit', v_limit, 'value', v_value,
            'message', format('The subagent was not started: %s (limits.%s).', v_message, v_limit)), true);
        RETURN NULL;
    END IF;

    v_child := holdfast.create_agent(v_parent.project_id, p_config);
    UPDATE holdfast.agents
       SET parent_tool_call_id = p_tool_call, subagent_depth = v_parent.subagent_depth + 1,
           root_agent_id = v_root.id
     WHERE id = v_child;
    UPDATE holdfast.tool_calls SET status = 'waiting', child_agent_id = v_child WHERE id = p_tool_call;
    PERFORM holdfast.append_event(p_agent, 'subagent.started', jsonb_build_object(
        'tool_call_id', p_tool_call, 'child_agent_id', v_child, 'prompt', p_prompt));
    PERFORM holdfast.create_input(v_child, to_jsonb(p_prompt), NULL);
    RETURN v_child;
END
$$;

-- When a child's turn ends, its parent's waiting call completes with the
-- child's last answer (or its error), with `subagent.finished`. Lock order:
-- the child (held by the transaction that ended its turn), then the parent.
CREATE OR REPLACE FUNCTION holdfast.tg_events_finish_subagent() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_call holdfast.tool_calls;
    v_answer text;
    v_is_error boolean := NEW.type <> 'turn.completed';
BEGIN
    SELECT t.* INTO v_call FROM holdfast.tool_calls t
      JOIN holdfast.agents c ON c.parent_tool_call_id = t.id
     WHERE c.id = NEW.agent_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM holdfast.lock_agent(v_call.agent_id);
    SELECT * INTO v_call FROM holdfast.tool_calls WHERE id = v_call.id FOR UPDATE;
    IF v_call.status <> 'waiting' THEN
        RETURN NULL;  -- the parent's turn moved on (cancelled): nothing to deliver
    END IF;
    SELECT string_agg(b.value ->> 'text', E'\n' ORDER BY b.ordinality) INTO v_answer
      FROM (SELECT content FROM holdfast.messages
             WHERE agent_id = NEW.agent_id AND role = 'assistant' ORDER BY seq DESC LIMIT 1) m,
           jsonb_array_elements(m.content) WITH ORDINALITY b
     WHERE b.value ->> 'type' = 'text';
    IF v_is_error THEN
        v_answer := format('The subagent''s turn ended with %s: %s', NEW.type,
                           coalesce(NEW.data #>> '{error,message}', 'no answer'));
    END IF;
    PERFORM holdfast.complete_waiting_call(v_call, to_jsonb(coalesce(v_answer, '')), v_is_error,
        'subagent.finished', jsonb_build_object('tool_call_id', v_call.id, 'child_agent_id', NEW.agent_id,
                                                'outcome', NEW.type));
    RETURN NULL;
END
$$;
CREATE TRIGGER _300_finish_subagent AFTER INSERT ON holdfast.events
    FOR EACH ROW WHEN (NEW.type IN ('turn.completed', 'turn.failed', 'turn.cancelled'))
    EXECUTE FUNCTION holdfast.tg_events_finish_subagent();

-- Everything in p_project that waits on a person or a client, oldest first
-- (GET /v1/inbox): pending approvals (`approval`) and budget approvals
-- (`budget_approval`), pending questions (`question`), custom tool calls
-- waiting for their result (`tool_call`), and commands no machine has
-- accepted yet (`command`). Narrowed to one kind and to agents whose
-- config.metadata contains p_metadata, after the item (p_after_at,
-- p_after_id) of a previous page, at most p_limit:
-- {"items": [{"kind", "id", "agent_id", "agent_metadata", "summary",
-- "detail", "created_at", "age_seconds"}], "total": n}, where total counts
-- every item the kind and metadata match, on any page. Reads only, and only
-- p_project's rows: each kind is read from the project's agents
-- (agents_project_idx) through its partial index of open rows by agent,
-- commands from the project's machines (commands_queued_idx), so other
-- projects' waiting items are never read.
CREATE OR REPLACE FUNCTION holdfast.inbox(
    p_project uuid, p_kind text, p_metadata jsonb, p_after_at timestamptz, p_after_id uuid,
    p_limit integer)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    WITH project_agents AS MATERIALIZED (
        SELECT a.id, a.config -> 'metadata' AS metadata
          FROM holdfast.agents a
         WHERE a.project_id = p_project
           AND (p_metadata IS NULL OR a.config -> 'metadata' @> p_metadata)),
    waiting AS (
        SELECT CASE ap.kind WHEN 'budget' THEN 'budget_approval' ELSE 'approval' END AS kind,
               ap.id, ap.agent_id,
               CASE ap.kind
                   WHEN 'budget' THEN format('Continue past %s (%s of %s)?', ap.budget ->> 'budget',
                                             ap.budget ->> 'value', ap.budget ->> 'limit')
                   ELSE format('Approve %s %s?', tc.name, tc.input::text) END AS summary,
               CASE ap.kind
                   WHEN 'budget' THEN jsonb_build_object('budget', ap.budget)
                   ELSE jsonb_build_object('tool_call_id', tc.id, 'name', tc.name, 'input', tc.input) END
                   AS detail,
               ap.created_at
          FROM project_agents a
          JOIN holdfast.approvals ap ON ap.agent_id = a.id AND ap.status = 'pending'
          LEFT JOIN holdfast.tool_calls tc ON tc.id = ap.tool_call_id
         WHERE p_kind IS NULL OR p_kind IN ('approval', 'budget_approval')
        UNION ALL
        SELECT 'question', q.id, q.agent_id, q.question,
               jsonb_build_object('tool_call_id', q.tool_call_id, 'question', q.question), q.created_at
          FROM project_agents a
          JOIN holdfast.questions q ON q.agent_id = a.id AND q.status = 'pending'
         WHERE p_kind IS NULL OR p_kind = 'question'
        UNION ALL
        SELECT 'tool_call', tc.id, tc.agent_id, format('Result for %s %s', tc.name, tc.input::text),
               jsonb_build_object('name', tc.name, 'input', tc.input), tc.created_at
          FROM project_agents a
          JOIN holdfast.tool_calls tc
            ON tc.agent_id = a.id AND tc.status NOT IN ('completed', 'cancelled')
         WHERE tc.status = 'waiting' AND tc.kind = 'custom'
           AND (p_kind IS NULL OR p_kind = 'tool_call')
        UNION ALL
        SELECT 'command', c.id, c.agent_id, format('Run %s on %s', c.command, m.name),
               jsonb_build_object('tool_call_id', c.tool_call_id, 'command', c.command,
                                  'machine', m.name, 'machine_online',
                                  coalesce(m.last_heartbeat_at > holdfast.now() - s.offline_after, false)),
               c.queued_at
          FROM holdfast.machines m
          JOIN holdfast.commands c ON c.machine_id = m.id AND c.state = 'queued'
          JOIN project_agents a ON a.id = c.agent_id
          CROSS JOIN holdfast.machine_settings s
         WHERE m.project_id = p_project
           AND (p_kind IS NULL OR p_kind = 'command')),
    matching AS (
        SELECT w.*, a.metadata AS agent_metadata
          FROM waiting w
          JOIN project_agents a ON a.id = w.agent_id
         WHERE p_kind IS NULL OR w.kind = p_kind),
    page AS (
        SELECT * FROM matching m
         WHERE p_after_at IS NULL OR (m.created_at, m.id) > (p_after_at, p_after_id)
         ORDER BY m.created_at, m.id
         LIMIT p_limit)
    SELECT jsonb_build_object(
        'items', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                       'kind', p.kind, 'id', p.id, 'agent_id', p.agent_id,
                       'agent_metadata', coalesce(p.agent_metadata, '{}'),
                       -- One line: whitespace runs (newlines too) become one space.
                       'summary', left(regexp_replace(p.summary, '\s+', ' ', 'g'), 200),
                       'detail', p.detail, 'created_at', p.created_at,
                       'age_seconds', extract(epoch FROM holdfast.now() - p.created_at)::float8)
                   ORDER BY p.created_at, p.id)
              FROM page p), '[]'),
        'total', (SELECT count(*) FROM matching))
$$;
