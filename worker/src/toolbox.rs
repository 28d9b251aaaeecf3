//! Which tools an agent has, what kind each is, and running a tool batch.

use holdfast_engine::context::{StepContext, ToolCallRecord};
use holdfast_engine::domain::{Claim, ToolKind};
use holdfast_engine::provider::ToolDefinition;
use holdfast_engine::{store, Result};
use serde_json::{json, Value};

use crate::step::StepDeps;

/// The tools declared in an agent's config, as the model sees them.
pub fn definitions(config: &Value) -> Vec<ToolDefinition> {
    declared(config)
        .filter_map(|tool| match tool.get("type").and_then(Value::as_str) {
            Some("custom") => Some(ToolDefinition {
                name: tool.get("name")?.as_str()?.to_owned(),
                description: tool
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                input_schema: tool
                    .get("input_schema")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
            }),
            _ => None,
        })
        .collect()
}

/// The kind of the tool named `name` in this config; `None` for a tool the
/// agent does not have (the model invented it).
pub fn kind_of(config: &Value, name: &str) -> Option<ToolKind> {
    declared(config).find_map(|tool| {
        let tool_type = tool.get("type").and_then(Value::as_str)?;
        let tool_name = tool
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or(tool_type);
        if tool_name != name {
            return None;
        }
        match tool_type {
            "custom" => Some(ToolKind::Custom),
            _ => None,
        }
    })
}

fn declared(config: &Value) -> impl Iterator<Item = &Value> {
    config
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Run the runnable calls of a batch, each committed with its result as soon
/// as it has one. Calls the agent has no tool for get an error result, so
/// the model can correct itself and the turn goes on.
pub async fn run_batch(
    deps: &StepDeps,
    claim: Claim,
    context: &StepContext,
    calls: Vec<ToolCallRecord>,
) -> Result<()> {
    for call in calls {
        let (output, is_error) = match kind_of(&context.config, &call.name) {
            None => (
                json!(format!(
                    "Unknown tool {:?}: this agent has no such tool.",
                    call.name
                )),
                true,
            ),
            // Custom, question and command calls wait outside (never
            // pending); an unknown runnable kind is a tool this version does
            // not run.
            Some(kind) => (
                json!(format!(
                    "Tool {:?} ({kind:?}) cannot run on this worker.",
                    call.name
                )),
                true,
            ),
        };
        let client = deps.pool.get().await?;
        store::commit_tool_result(&**client, claim, call.id, &output, is_error).await?;
    }
    Ok(())
}
