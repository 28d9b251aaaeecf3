-- 0031_distributable.sql — keep every hot statement on one agent's rows.
--
-- record_webhook_attempt now takes the delivery's agent first
-- (p_agent, p_delivery, ...): it found the delivery by its id alone, which
-- on a database distributed by agent_id (Citus, docs/scaling.md) is a query
-- of every shard. The dispatcher has the agent from its claim.
--
-- The new definition is in sql/functions/webhooks.sql; here the old
-- signature goes, so that only one remains.

DROP FUNCTION IF EXISTS holdfast.record_webhook_attempt(uuid, integer, integer, text, interval, interval);
