-- benches/experiments/batch_end_cost.sql — what one end_tool_batch costs in
-- CPU: a worker-run batch's last result saved with the batch's end, the
-- lease kept and the next step's context read (the worker-run hot path).
--
-- Not a scenario: a psql script against a migrated database. 400 agents are
-- claimed, each commits a model step calling one external tool (the lease
-- kept) and starts the call; then each batch's end is timed, and its WAL
-- counted, in a PL/pgSQL loop inside the same transaction (no commit, so
-- no WAL flush: CPU only), rolled back at the end. The time is noisy on a
-- shared machine; the WAL bytes are not. To compare two definitions of the functions,
-- apply each in turn (from `git show REV:sql/schema/steps.sql`) and run the
-- script after each, alternating; compare within one machine and run.
--
--   holdfast migrate --database-url URL
--   psql URL -X -q -v ON_ERROR_STOP=1 -f benches/experiments/batch_end_cost.sql

BEGIN;
SET LOCAL client_min_messages = notice;
SELECT holdfast.ensure_project('mb-' || gen_random_uuid()) AS project \gset
CREATE TEMP TABLE mb ON COMMIT DROP AS
  SELECT holdfast.create_agent(:'project', '{"model": {"provider": "anthropic", "name": "claude-x"}}') AS id
    FROM generate_series(1, 400);
SELECT count(holdfast.create_input(id, '"go"')) AS inputs FROM mb \gset
CREATE TEMP TABLE mbc ON COMMIT DROP AS SELECT * FROM holdfast.claim_agents('mb', 400, '1 hour');
CREATE TEMP TABLE mbk ON COMMIT DROP AS
SELECT c.agent_id, c.outcome, c.lease_kept FROM holdfast.commit_model_step_batch(
  ARRAY(SELECT ROW(k.agent_id, k.epoch,
                   ARRAY(SELECT i.id FROM holdfast.inputs i WHERE i.agent_id = k.agent_id),
                   '[{"type":"text","text":"calling"}]'::jsonb,
                   '[{"provider_id":"toolu_1","name":"lookup","input":{},"kind":"external"}]'::jsonb,
                   '{}'::jsonb, 'tool_use', NULL)::holdfast.model_step FROM mbc k),
  '1 hour') c;
SELECT count(*) FILTER (WHERE lease_kept) AS kept FROM mbk \gset
SELECT count(holdfast.start_tool_call(c.agent_id, c.epoch + 1, t.id)) AS started
  FROM mbc c JOIN holdfast.tool_calls t ON t.agent_id = c.agent_id AND t.status = 'pending' \gset
DO $$
DECLARE r record; t0 timestamptz := clock_timestamp(); w0 pg_lsn := pg_current_wal_insert_lsn(); n int := 0;
BEGIN
  FOR r IN SELECT c.agent_id, c.epoch + 1 AS epoch, t.id AS call
             FROM mbc c JOIN holdfast.tool_calls t ON t.agent_id = c.agent_id AND t.status = 'running' LOOP
    PERFORM holdfast.end_tool_batch(r.agent_id, r.epoch, r.call, '"done"', false, '1 hour');
    n := n + 1;
  END LOOP;
  RAISE NOTICE 'end_tool_batch % us and % WAL bytes each over % calls',
    round(extract(epoch FROM clock_timestamp() - t0)::numeric * 1e6 / n, 1),
    round((pg_current_wal_insert_lsn() - w0) / n), n;
END $$;
ROLLBACK;
