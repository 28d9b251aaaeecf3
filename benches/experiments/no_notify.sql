-- Experiment (not a fix): what would steps cost without NOTIFY in the
-- commit path? Every transaction that NOTIFYs takes one cluster-wide lock
-- at commit (PreCommit_Notify), so NOTIFYing commits run one at a time.
-- Here the two notify triggers do nothing; run workers with a short poll
-- (--worker-env HOLDFAST_POLL_INTERVAL=10ms) so they still find work:
--   holdfast-bench throughput --sql benches/experiments/no_notify.sql \
--       --worker-env HOLDFAST_POLL_INTERVAL=10ms --json out.json
CREATE OR REPLACE FUNCTION holdfast.tg_events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION holdfast.tg_agents_notify_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END
$$;
