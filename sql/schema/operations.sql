-- sql/schema/operations.sql — the views an operator reads: agents at a glance, the queue, leases, stuck agents, audits, usage, machines, the webhook outbox.
--
-- This area's current schema: its views.
-- Each object is defined here once, as it is now. See docs/sql.md for how
-- a fresh install applies these files and how a change is added.

-- One row per agent: its state, lease and counts; pending_inputs leaves out
-- removed inputs (queued ones count: they are waiting work).
CREATE VIEW holdfast.agent_overview AS
SELECT a.id AS agent_id,
       a.project_id,
       a.state,
       a.turn_open,
       a.lease_owner,
       a.lease_epoch,
       a.lease_expires_at,
       a.lease_pid,
       a.run_after,
       (SELECT count(*) FROM holdfast.tool_calls t
         WHERE t.agent_id = a.id AND t.status NOT IN ('completed', 'cancelled')) AS pending_tool_calls,
       (SELECT count(*) FROM holdfast.inputs i
         WHERE i.agent_id = a.id AND i.consumed_at IS NULL AND i.removed_at IS NULL) AS pending_inputs,
       a.last_event_seq,
       a.last_event_at,
       a.state_changed_at,
       a.created_at
  FROM holdfast.agents a;

CREATE VIEW holdfast.queue_depth AS
SELECT s.state, count(a.id) AS agents
  FROM unnest(ARRAY['idle', 'ready', 'running', 'waiting', 'archived']) AS s (state)
  LEFT JOIN holdfast.agents a ON a.state = s.state
 GROUP BY s.state;

CREATE VIEW holdfast.worker_leases AS
SELECT a.lease_owner AS worker,
       count(*) AS agents_held,
       min(a.lease_expires_at) AS oldest_lease_expires_at,
       max(a.state_changed_at) AS last_claim_at,
       array_agg(DISTINCT a.lease_pid) AS backend_pids
  FROM holdfast.agents a
 WHERE a.state = 'running'
 GROUP BY a.lease_owner;

-- Agents that need a look: ready but unclaimed for over a minute, leases past
-- expiry (maintenance is not running?), running on a session that is gone.
CREATE VIEW holdfast.stuck_agents AS
SELECT a.id AS agent_id, a.state, a.lease_owner, a.lease_expires_at, a.state_changed_at,
       CASE
           WHEN a.state = 'ready' THEN 'ready but unclaimed since ' || a.state_changed_at
           WHEN a.lease_expires_at <= holdfast.now() THEN 'lease expired at ' || a.lease_expires_at
           ELSE 'claiming session ' || a.lease_pid || ' is gone'
       END AS reason
  FROM holdfast.agents a
 WHERE (a.state = 'ready' AND a.run_after < holdfast.now() - interval '1 minute'
        AND a.state_changed_at < holdfast.now() - interval '1 minute')
    OR (a.state = 'running' AND a.lease_expires_at <= holdfast.now())
    OR (a.state = 'running' AND a.lease_pid IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM pg_stat_activity s WHERE s.pid = a.lease_pid));

-- What happened to each agent and each tool call, counted from the tables
-- (the demo's verdict reads them).
CREATE VIEW holdfast.agent_audit AS
SELECT a.id AS agent_id,
       e.events,
       e.last_seq,
       e.events = e.last_seq AS gap_free,
       e.turns_completed,
       e.turns_failed,
       e.turns_cancelled,
       (SELECT count(*) FROM holdfast.steps s
         WHERE s.agent_id = a.id AND s.kind = 'model') AS model_steps,
       e.model_responses,
       (SELECT count(*) FROM holdfast.inputs i WHERE i.agent_id = a.id) AS inputs,
       (SELECT count(*) FROM holdfast.messages m
         WHERE m.agent_id = a.id AND m.input_id IS NOT NULL) AS inputs_in_history,
       (SELECT count(*) FROM holdfast.tool_calls t WHERE t.agent_id = a.id) AS tool_calls,
       e.tool_calls_completed,
       e.tool_calls_interrupted,
       e.approvals_answered,
       (SELECT count(*) FROM holdfast.commands c WHERE c.agent_id = a.id) AS commands,
       (SELECT count(*) FROM holdfast.commands c
         WHERE c.agent_id = a.id AND c.state <> 'finished') AS commands_unfinished
  FROM holdfast.agents a
 CROSS JOIN LATERAL (
       SELECT count(*) AS events,
              coalesce(max(ev.seq), 0) AS last_seq,
              count(*) FILTER (WHERE ev.type = 'turn.completed') AS turns_completed,
              count(*) FILTER (WHERE ev.type = 'turn.failed') AS turns_failed,
              count(*) FILTER (WHERE ev.type = 'turn.cancelled') AS turns_cancelled,
              count(*) FILTER (WHERE ev.type = 'model.response') AS model_responses,
              count(*) FILTER (WHERE ev.type = 'tool_call.completed') AS tool_calls_completed,
              count(*) FILTER (WHERE ev.type = 'tool_call.interrupted') AS tool_calls_interrupted,
              count(*) FILTER (WHERE ev.type = 'approval.answered') AS approvals_answered
         FROM holdfast.events ev
        WHERE ev.agent_id = a.id) e;

CREATE VIEW holdfast.tool_call_audit AS
SELECT t.id AS tool_call_id,
       t.agent_id,
       t.name,
       t.kind,
       t.status,
       t.created_at,
       t.position,
       e.results_saved,
       e.interrupted,
       e.commands_accepted,
       c.state AS command_state
  FROM holdfast.tool_calls t
 CROSS JOIN LATERAL (
       SELECT count(*) FILTER (WHERE ev.type = 'tool_call.completed') AS results_saved,
              count(*) FILTER (WHERE ev.type = 'tool_call.interrupted') AS interrupted,
              count(*) FILTER (WHERE ev.type = 'command.accepted') AS commands_accepted
         FROM holdfast.events ev
        WHERE ev.agent_id = t.agent_id
          AND ev.type IN ('tool_call.completed', 'tool_call.interrupted', 'command.accepted')
          AND ev.data ->> 'tool_call_id' = t.id::text) e
  LEFT JOIN holdfast.commands c ON c.tool_call_id = t.id;

-- Per project, UTC day, provider and model: the model calls' tokens, cost
-- (NULL when none of the group's calls was priced) and server tool
-- requests. model_steps counts every model call: steps and compactions. A
-- scan of the steps table: for reports, not for a hot path.
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
       sum((s.usage).cost_usd) AS cost_usd,
       coalesce(sum((s.usage).server_tool_requests), 0)::bigint AS server_tool_requests,
       coalesce(sum((s.usage).web_search_requests), 0)::bigint AS web_search_requests
  FROM holdfast.steps s
  JOIN holdfast.agents a ON a.id = s.agent_id
 -- Model calls with a recorded turn (a step without one has no usage). Not
 -- `s.usage IS NOT NULL`: a row with a NULL field (an unpriced cost) is
 -- not NOT NULL.
 WHERE s.kind IN ('model', 'compaction') AND s.turn_seq IS NOT NULL
 GROUP BY a.project_id, (s.created_at AT TIME ZONE 'UTC')::date, s.provider, s.model;

-- Machines and their commands, for DBAs: online state, the daemon serving
-- each, commands waiting and running, and when it was deleted.
CREATE VIEW holdfast.machine_overview AS
SELECT m.id AS machine_id,
       m.project_id,
       m.name,
       m.last_heartbeat_at,
       coalesce(m.last_heartbeat_at > holdfast.now() - s.offline_after, false) AS online,
       m.daemon_session,
       m.daemon_started_at,
       CASE WHEN m.wake_until > holdfast.now() THEN m.wake_until END AS waking_until,
       (SELECT count(*) FROM holdfast.commands c WHERE c.machine_id = m.id AND c.state = 'queued') AS queued,
       (SELECT count(*) FROM holdfast.commands c WHERE c.machine_id = m.id AND c.state = 'accepted') AS accepted,
       (SELECT min(c.queued_at) FROM holdfast.commands c WHERE c.machine_id = m.id AND c.state = 'queued') AS oldest_queued_at,
       m.deleted_at
  FROM holdfast.machines m CROSS JOIN holdfast.machine_settings s;

-- Per live endpoint: deliveries waiting, due now, in flight, failed, and the
-- oldest due one (how far behind the dispatchers are).
CREATE VIEW holdfast.webhook_queue AS
SELECT e.id AS endpoint_id,
       e.project_id,
       e.url,
       count(d.id) FILTER (WHERE d.status = 'pending') AS pending,
       count(d.id) FILTER (WHERE d.status = 'pending' AND d.next_attempt_at <= holdfast.now()) AS due,
       count(d.id) FILTER (WHERE d.claimed_until > holdfast.now()) AS in_flight,
       count(d.id) FILTER (WHERE d.status = 'failed') AS failed,
       min(d.next_attempt_at) FILTER (WHERE d.status = 'pending' AND d.next_attempt_at <= holdfast.now()) AS oldest_due_at
  FROM holdfast.webhook_endpoints e
  LEFT JOIN holdfast.webhook_deliveries d ON d.endpoint_id = e.id
 WHERE e.deleted_at IS NULL
 GROUP BY e.id, e.project_id, e.url;
