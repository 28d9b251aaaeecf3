-- 0049_lease_session_lock.sql — a lease's session known by a lock as well as
-- by its backend pid, so crash detection works behind a session-mode pooler.
--
-- A pooler in session mode (PgBouncer's pool_mode = session) keeps the
-- backend when its client goes: the pid a dead worker's leases recorded
-- stays in pg_stat_activity, and its agents waited for lease expiry. A
-- claim now also takes a session-level advisory lock keyed by its pid
-- (holdfast.hold_lease_session_lock, in sql/functions/leases.sql); the
-- backend loses it when it ends and when the pooler resets it for the next
-- client (DISCARD ALL), and maintenance_tick releases the agents of a
-- session that no longer holds it.
--
-- agents.lease_session_locked: the lease's claim or last renewal took the
-- lock, so its absence means the session is gone. False for leases taken
-- before this migration (their renewal sets it), which keep the pid check
-- alone.

ALTER TABLE holdfast.agents
    ADD COLUMN lease_session_locked boolean NOT NULL DEFAULT false;
