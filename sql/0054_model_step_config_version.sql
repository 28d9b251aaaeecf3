-- 0054_model_step_config_version.sql — a model step carries the config
-- version its request was built from (read with the step's context), so
-- its model.response names that version even when an "apply": "now"
-- change lands while the call is in flight.

ALTER TYPE holdfast.model_step ADD ATTRIBUTE config_version integer;

-- load_step_context returns that version as a new column; a function's
-- result columns cannot be replaced in place, so the old one goes here and
-- the area's code (steps.sql) defines it again.
DROP FUNCTION IF EXISTS holdfast.load_step_context(uuid);
