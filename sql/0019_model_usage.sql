-- 0019_model_usage.sql — live thinking deltas; model usage summed.
--
-- holdfast.stream_delta gains a kind ('text' or 'thinking'): the old
-- three-argument signature is dropped here and the new one is created by
-- sql/functions/events.sql (applied after the migrations).

DROP FUNCTION holdfast.stream_delta(uuid, bigint, text);
