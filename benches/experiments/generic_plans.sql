-- Experiment: plan every statement of this database's sessions once per
-- session (generic plans), instead of letting the plan cache re-plan
-- statements with parameters (custom plans) on many calls. Most of the
-- step functions' statements are keyed lookups whose generic plan is the
-- custom plan. Applies to sessions opened after it (the processes').
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET plan_cache_mode = force_generic_plan', current_database());
END
$$;
