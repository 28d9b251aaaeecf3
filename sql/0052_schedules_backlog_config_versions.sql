-- 0052_schedules_backlog_config_versions.sql — agents that run on a
-- schedule, a queued backlog people can reorder, and numbered, immutable
-- agent config versions.
--
-- holdfast.schedules (schedules.sql): a schedule sends its agent an input
-- at each slot of a cron expression in an IANA time zone, or every fixed
-- interval; maintenance fires the due ones (claim_due_schedules,
-- fire_schedule).
--
-- inputs.queue_position: the place a person gave a queued input among its
-- agent's queued inputs (move_input); NULL until the first move, and such
-- inputs follow the placed ones in arrival order.
--
-- holdfast.agent_config_versions: every config an agent had, numbered from
-- 1; agents.config_version is the one in force, next_turn_config_version a
-- newer one waiting for the open turn to end. An existing agent's config
-- becomes its version 1.

CREATE TABLE holdfast.agent_config_versions (
    agent_id uuid NOT NULL,
    version integer NOT NULL,
    config jsonb NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT agent_config_versions_version_check CHECK (version >= 1),
    CONSTRAINT agent_config_versions_pkey PRIMARY KEY (agent_id, version),
    CONSTRAINT agent_config_versions_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id)
);

INSERT INTO holdfast.agent_config_versions (agent_id, version, config, created_at)
SELECT id, 1, config, created_at FROM holdfast.agents;

ALTER TABLE holdfast.agents
    ADD COLUMN config_version integer DEFAULT 1 NOT NULL,
    ADD COLUMN next_turn_config_version integer,
    ADD CONSTRAINT agents_next_turn_config_version_check CHECK (next_turn_config_version > config_version);

ALTER TABLE holdfast.inputs
    ADD COLUMN queue_position integer;

CREATE TABLE holdfast.schedules (
    id uuid DEFAULT holdfast.uuid_v7() NOT NULL,
    project_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    cron text,
    timezone text DEFAULT 'UTC' NOT NULL,
    every interval,
    content jsonb NOT NULL,
    mode text DEFAULT 'queue' NOT NULL,
    start_at timestamptz,
    end_at timestamptz,
    missed text DEFAULT 'skip' NOT NULL,
    paused_at timestamptz,
    next_fire_at timestamptz,
    ended_at timestamptz,
    last_fired_at timestamptz,
    fire_count bigint DEFAULT 0 NOT NULL,
    created_at timestamptz DEFAULT holdfast.now() NOT NULL,
    updated_at timestamptz DEFAULT holdfast.now() NOT NULL,
    CONSTRAINT schedules_cron_or_every CHECK ((cron IS NULL) <> (every IS NULL)),
    CONSTRAINT schedules_cron_check CHECK (cron <> '' AND length(cron) <= 256),
    CONSTRAINT schedules_every_check CHECK (every >= '00:00:01'::interval),
    CONSTRAINT schedules_end_after_start CHECK (end_at > start_at),
    CONSTRAINT schedules_mode_check CHECK (mode IN ('steer', 'queue')),
    CONSTRAINT schedules_missed_check CHECK (missed IN ('skip', 'once')),
    CONSTRAINT schedules_next_unless_ended CHECK ((ended_at IS NULL) OR (next_fire_at IS NULL)),
    CONSTRAINT schedules_pkey PRIMARY KEY (id),
    CONSTRAINT schedules_agent_id_fkey FOREIGN KEY (agent_id) REFERENCES holdfast.agents(id),
    CONSTRAINT schedules_project_id_fkey FOREIGN KEY (project_id) REFERENCES holdfast.projects(id)
);

CREATE INDEX schedules_agent_idx ON holdfast.schedules (agent_id, id);

CREATE INDEX schedules_due_idx ON holdfast.schedules (next_fire_at) WHERE (paused_at IS NULL);
