-- 0013_machine_credentials.sql — deleting machines, rotating their tokens,
-- and a NOTIFY when a command is queued for a machine.
--
-- Adds: machines.deleted_at (a deleted machine keeps its row, so its
-- commands keep their history, but its token authenticates nothing and its
-- name is free again: the per-project name constraint becomes a unique
-- index over live machines); delete_machine (its queued and accepted
-- commands end at once, and the agents waiting on them get a clear result);
-- rotate_machine_token (a new token; the old one is refused at once and the
-- daemon session it served ends); new_machine_token (the one token
-- generator, for registration and rotation); and the trigger
-- _900_notify_queued, which NOTIFYs `holdfast_commands` with the machine id
-- when a command is queued, so a daemon's claim long-poll wakes at once
-- instead of polling.
--
-- The functions (new, and changed: register_machine takes its token from
-- new_machine_token and its name conflict is over live machines;
-- authenticate_machine, list_machines, start_machine_wake and queue_command
-- find no deleted machine) and the _900_notify_queued trigger are in
-- sql/functions/machines.sql. Here: the column, the index, and the
-- machine_overview view (a deleted_at column).
--
-- Why in SQL: "the token stops working at once" and "the waiting agents move
-- on" are one transaction: the row that authenticates the daemon and the
-- commands its agents wait on change together, under the same locks a claim
-- takes.
--
-- Lock order, as in 0008: a machine row before agent rows. delete_machine
-- takes its machine FOR NO KEY UPDATE (deleted_at is not a key column), which
-- does not conflict with the FOR KEY SHARE a concurrent INSERT of a command
-- takes through its foreign key while holding its agent's lock: the two
-- cannot deadlock. Such a command, queued by a transaction that read the
-- machine as live just before the delete committed, stays queued on a
-- deleted machine; nothing can claim it (the token is refused) and
-- machine_tick fails it as machine_offline once the offline window has
-- passed (the delete ends any wake attempt).

ALTER TABLE holdfast.machines ADD COLUMN deleted_at timestamptz;
ALTER TABLE holdfast.machines DROP CONSTRAINT machines_name_unique;
CREATE UNIQUE INDEX machines_live_name_unique ON holdfast.machines (project_id, name)
    WHERE deleted_at IS NULL;

-- Machines and their commands, for DBAs: online state, the daemon serving
-- each, commands waiting and running, and when it was deleted.
CREATE OR REPLACE VIEW holdfast.machine_overview AS
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
