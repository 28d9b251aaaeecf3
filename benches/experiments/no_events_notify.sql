-- Experiment (not a fix): what would a step cost if commits sent
-- `holdfast_events` only for agents someone streams (BENCHMARKS.md, item 4)?
-- In the throughput scenario nobody streams, so here the events trigger
-- does nothing; `holdfast_ready` still wakes the workers as in production:
--   holdfast-bench throughput --sql benches/experiments/no_events_notify.sql --json out.json
CREATE OR REPLACE FUNCTION holdfast.tg_events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END
$$;
