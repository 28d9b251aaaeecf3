-- 0051_time_travel.sql — forks and replays (docs/guides/time-travel.md).
--
-- A fork is a new agent whose history is a copy of another agent's up to
-- one of its events: agents.forked_from_agent_id / forked_from_seq say
-- where it came from. It reads the files of the agent it was forked from
-- (and of that agent's own sources) instead of copying them:
-- agents.attachment_sources.
--
-- A replay sends an agent's recorded inputs, turn by turn, to a hidden
-- child agent with a changed config, and answers the child's tool calls
-- from the recording (holdfast.replays; agents.replay_id marks the child).

ALTER TABLE holdfast.agents
    ADD COLUMN forked_from_agent_id uuid,
    ADD COLUMN forked_from_seq bigint,
    ADD COLUMN attachment_sources uuid[] DEFAULT '{}'::uuid[] NOT NULL,
    ADD COLUMN replay_id uuid,
    ADD CONSTRAINT agents_forked_from_complete CHECK ((forked_from_agent_id IS NULL) = (forked_from_seq IS NULL)),
    ADD CONSTRAINT agents_forked_from_agent_id_fkey FOREIGN KEY (forked_from_agent_id) REFERENCES holdfast.agents(id);

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

CREATE INDEX replays_source_idx ON holdfast.replays (source_agent_id, id);

ALTER TABLE holdfast.agents ADD CONSTRAINT agents_replay_id_fkey FOREIGN KEY (replay_id) REFERENCES holdfast.replays(id);
