-- 0021_audit.sql — the audit views: what happened to each agent and each
-- tool call, counted from the rows that record it, so that "nothing lost,
-- nothing run twice" is one query. `holdfast demo` prints its verdict from
-- them and the chaos soak's invariant checker reads them.
--
-- Adds: holdfast.agent_audit (one row per agent) and
-- holdfast.tool_call_audit (one row per tool call). Views only.

-- Per agent: its timeline (events, the last seq, whether seq is 1..n without
-- gaps), its turns, model steps against saved model responses, inputs
-- against the inputs in its history, tool call results, approvals
-- answered, commands and those that did not finish. The counts of events
-- assume an untrimmed timeline (docs/sql.md, "Event retention").
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

-- Per tool call, in the order the model asked for them: the results saved
-- for it (tool_call.completed events; exactly one for a call that ended),
-- whether it was interrupted, and for a run_command call how often a
-- machine accepted its command (a daemon runs what it accepts, once) and
-- the command's state.
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
