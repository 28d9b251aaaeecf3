-- 0017_console.sql — indexes for the web console's agent list.
--
-- The console lists a project's agents newest activity first (the time of an
-- agent's latest event, or its creation before it has any), optionally in
-- one state, and pages by keyset: (activity, id) below the last row seen.
-- Without these indexes that is a sort of every agent of the project on each
-- page; with them each page is an index scan that reads one page of rows,
-- however many agents there are (checked with EXPLAIN over 100,000 agents in
-- tests/tests/console_api.rs).
--
-- The activity expression is written exactly as the queries in
-- engine/src/store/console.rs write it, so the planner matches them.
-- Cost: the hot paths already rewrite the agent row's indexed columns (state,
-- lease) at every claim and release, so those updates are not HOT either
-- way; these add one index entry each.
-- No functions here: functions live in sql/functions/.

-- Every agent of a project, newest activity first.
CREATE INDEX agents_project_activity_idx
    ON holdfast.agents (project_id, (coalesce(last_event_at, created_at)) DESC, id DESC);

-- The same within one state (the console's state filter), and the counts by
-- state (an index-only scan on project_id, state).
CREATE INDEX agents_project_state_activity_idx
    ON holdfast.agents (project_id, state, (coalesce(last_event_at, created_at)) DESC, id DESC);
