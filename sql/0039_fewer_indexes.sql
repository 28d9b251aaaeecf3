-- 0039_fewer_indexes.sql — two indexes that repeated others.
--
-- Every agents UPDATE that changes state is a non-HOT update (state is in
-- the partial indexes' predicates), so each index on agents is written on
-- every claim and every release, and each index a statement touches is one
-- more relation lock (past 16 a transaction leaves the lock fast path for
-- the shared lock table, where the workers' sessions wait on
-- LWLock: LockManager). Two indexes carried nothing of their own:
--
-- * tool_calls_step_idx (step_id, position) had the same key as the
--   UNIQUE (step_id, position) constraint's index, tool_calls_step_id_position_key,
--   which serves the same lookups.
-- * agents_running_project_idx (project_id) WHERE state = 'running', which
--   the claim's quota count read, is a prefix of
--   agents_project_state_activity_idx (project_id, state, …): the count
--   reads that one instead.
DROP INDEX IF EXISTS holdfast.tool_calls_step_idx;
DROP INDEX IF EXISTS holdfast.agents_running_project_idx;
