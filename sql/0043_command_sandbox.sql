-- 0043_command_sandbox.sql — what the machines' command sandbox reports, and
-- what an agent's commands may share.
--
-- commands.workspace: where the daemon runs the command, from the agent's
-- run_command tool entry ("machine": the machine's work directory; "agent":
-- a directory of the agent's own under it, which other agents' commands do
-- not see). commands.limit_reached: the sandbox limit that ended a command
-- (cpu_time, memory, processes); its agent gets `command.failed` naming it.
--
-- machines.daemon_sandboxed: whether the daemon serving the machine runs its
-- commands in the sandbox (false: `--sandbox none`, which `holdfast status`
-- warns about). machines.daemon_single_session: the daemon asked that no
-- other session take the machine over while it heartbeats.
ALTER TABLE holdfast.commands
    ADD COLUMN workspace text NOT NULL DEFAULT 'machine' CHECK (workspace IN ('machine', 'agent')),
    ADD COLUMN limit_reached text CHECK (limit_reached IN ('cpu_time', 'memory', 'processes')),
    ADD CONSTRAINT commands_limit_has_result CHECK (limit_reached IS NULL OR result_state = 'finished');

ALTER TABLE holdfast.machines
    ADD COLUMN daemon_sandboxed boolean,
    ADD COLUMN daemon_single_session boolean NOT NULL DEFAULT false;

-- New parameters or result columns: created again by sql/functions/machines.sql.
DROP FUNCTION IF EXISTS holdfast.claim_commands(uuid, integer, uuid);
DROP FUNCTION IF EXISTS holdfast.machine_heartbeat(uuid, jsonb, uuid, boolean);
DROP FUNCTION IF EXISTS holdfast.submit_command_result(uuid, uuid, text, integer, text, text, boolean, boolean, boolean, integer);
