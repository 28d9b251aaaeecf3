-- Experiment: 200,000 finished (idle) agents in a project of their own,
-- so that the agents table is an established installation's size rather
-- than a new one's: with sql_steps and --vacuum-agents-every-ms, whether a
-- frequent VACUUM still clears the dead versions the live agents leave
-- once they are a small part of a large table (VACUUM skips its index
-- pass when fewer than 2% of the table's pages hold dead items). Rows
-- only: no history, no triggers' side effects (idle agents notify no one).
INSERT INTO holdfast.agents (project_id, config, state)
SELECT p.id,
       '{"model": {"provider": "anthropic", "name": "bench-model", "max_tokens": 256},
         "system": "You are a benchmark agent.",
         "tools": [{"type": "custom", "name": "lookup", "description": "Look something up.",
                    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}},
                                     "required": ["q"]}}]}',
       'idle'
  FROM holdfast.ensure_project('finished') AS p (id), generate_series(1, 200000);
