-- 0045_last_turn.sql — how each agent's latest turn went, on the agent's
-- row, so an agent view and the agent list (filtered by outcome) read it
-- without scanning the timeline.
--
-- agents.last_turn_started_at: its latest turn.started; last_turn_ended_at,
-- last_turn_outcome and last_turn_error: the turn.completed / turn.failed /
-- turn.cancelled that ended that turn (NULL while it is open). The outcome
-- `limit` is a turn.failed for a limit or budget (error types
-- limit_exceeded, budget_exceeded); `failed` any other turn.failed. The
-- trigger that keeps them (tg_events_record_last_turn) is in
-- sql/functions/agents.sql; existing agents get them from their events here.

ALTER TABLE holdfast.agents
    ADD COLUMN last_turn_started_at timestamptz,
    ADD COLUMN last_turn_ended_at timestamptz,
    ADD COLUMN last_turn_outcome text
        CHECK (last_turn_outcome IN ('completed', 'failed', 'cancelled', 'limit')),
    ADD COLUMN last_turn_error jsonb,
    ADD CONSTRAINT agents_last_turn_outcome_iff_ended CHECK (
        (last_turn_outcome IS NULL) = (last_turn_ended_at IS NULL));

UPDATE holdfast.agents a
   SET last_turn_started_at = s.created_at,
       last_turn_ended_at = e.created_at,
       last_turn_outcome = CASE e.type
           WHEN 'turn.completed' THEN 'completed'
           WHEN 'turn.cancelled' THEN 'cancelled'
           WHEN 'turn.failed' THEN
               CASE WHEN e.data #>> '{error,type}' IN ('limit_exceeded', 'budget_exceeded')
                    THEN 'limit' ELSE 'failed' END
           END,
       last_turn_error = e.data -> 'error'
  FROM (SELECT DISTINCT ON (agent_id) agent_id, seq, created_at
          FROM holdfast.events
         WHERE type = 'turn.started'
         ORDER BY agent_id, seq DESC) s
  LEFT JOIN LATERAL (
        SELECT ev.type, ev.data, ev.created_at
          FROM holdfast.events ev
         WHERE ev.agent_id = s.agent_id AND ev.seq > s.seq
           AND ev.type IN ('turn.completed', 'turn.failed', 'turn.cancelled')
         ORDER BY ev.seq
         LIMIT 1) e ON true
 WHERE a.id = s.agent_id;
