-- 0040_partial_unique_keys.sql — two unique keys that held a NULL for most
-- rows become partial.
--
-- agents.parent_tool_call_id (set on subagents only) and messages.input_id
-- (set on the message of a client's input only) were UNIQUE constraints,
-- whose B-tree indexes hold an entry for every row, NULLs included. The
-- agent row is rewritten, never as a HOT update, at every claim, commit and
-- tool result, so its key took an entry at each; with the messages' key,
-- about one in nine of the index entries a model step and its tool result
-- write (BENCHMARKS.md, "Where a durable step's writes go"). A unique index
-- WHERE the column IS NOT NULL enforces the same rule (NULLs never
-- conflicted) and holds only the rows that have a value; lookups by value
-- (`= $1`, and the foreign-key checks when a tool call or an input is
-- deleted) imply IS NOT NULL, so they use it as before.
ALTER TABLE holdfast.agents DROP CONSTRAINT agents_parent_tool_call_id_key;
CREATE UNIQUE INDEX agents_parent_tool_call_idx ON holdfast.agents (parent_tool_call_id)
    WHERE parent_tool_call_id IS NOT NULL;

ALTER TABLE holdfast.messages DROP CONSTRAINT messages_input_id_key;
CREATE UNIQUE INDEX messages_input_idx ON holdfast.messages (input_id)
    WHERE input_id IS NOT NULL;
