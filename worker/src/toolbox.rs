//! Which tools an agent has, what kind each is, and running a tool batch.
//!
//! Tools are declared in the agent's config (`tools: [...]`), by type:
//!
//! | type | kind | the model sees |
//! |---|---|---|
//! | `custom` (`name`, `description`, `input_schema`) | custom: waits for the client | as declared |
//! | `web_fetch` | external | `web_fetch` |
//! | `mcp` (`name` = prefix, `url`, `headers`) | external | `<prefix>__<tool>` per server tool |
//! | `ask_user` | question: waits for an answer | `ask_user` |
//! | `spawn_subagent` (`config`?) | internal | `spawn_subagent` |
//! | `run_command` (`machine`) | command: handed to a machine once | `run_command` |

use holdfast_engine::context::{StepContext, ToolCallRecord};
use holdfast_engine::domain::{Claim, ToolKind};
use holdfast_engine::provider::ToolDefinition;
use holdfast_engine::{store, Error, Result};
use serde_json::{json, Value};

use crate::step::StepDeps;
use crate::tools::mcp::{self, McpServerConfig};
use crate::tools::schema::validate_input;
use crate::tools::web_fetch::{web_fetch, web_fetch_definition, WEB_FETCH_TOOL_NAME};
use crate::tools::ToolOutput;

/// The tools declared in an agent's config, as the model sees them. An MCP
/// server that cannot be listed contributes no tools to this call (logged);
/// the next call lists it again.
pub async fn definitions(deps: &StepDeps, config: &Value) -> Vec<ToolDefinition> {
    let mut out = Vec::new();
    for tool in declared(config) {
        match tool.get("type").and_then(Value::as_str) {
            Some("custom") => out.extend(custom_definition(tool)),
            Some("web_fetch") => out.push(web_fetch_definition()),
            Some("ask_user") => out.push(ask_user_definition()),
            Some("spawn_subagent") => out.push(spawn_subagent_definition()),
            Some("run_command") => out.push(run_command_definition()),
            Some("mcp") => match McpServerConfig::from_tool_entry(tool) {
                Ok(server) => match deps.mcp.list_tools(&server).await {
                    Ok(tools) => out.extend(tools),
                    Err(e) => tracing::warn!(error = %e, "listing MCP tools"),
                },
                Err(e) => tracing::warn!(error = %e, "invalid MCP tool entry"),
            },
            _ => {}
        }
    }
    out
}

/// The kind of the tool named `name` in this config; `None` for a tool the
/// agent does not have (the model invented it).
pub fn kind_of(config: &Value, name: &str) -> Option<ToolKind> {
    declared(config).find_map(|tool| {
        let tool_type = tool.get("type").and_then(Value::as_str)?;
        match tool_type {
            "custom" => {
                (tool.get("name").and_then(Value::as_str) == Some(name)).then_some(ToolKind::Custom)
            }
            "web_fetch" => (name == WEB_FETCH_TOOL_NAME).then_some(ToolKind::External),
            "ask_user" => (name == "ask_user").then_some(ToolKind::Question),
            "spawn_subagent" => (name == "spawn_subagent").then_some(ToolKind::Internal),
            "run_command" => (name == "run_command").then_some(ToolKind::Command),
            "mcp" => {
                let prefix = tool.get("name").and_then(Value::as_str)?;
                let (call_prefix, _) = mcp::split_tool_name(name)?;
                (call_prefix == prefix).then_some(ToolKind::External)
            }
            _ => None,
        }
    })
}

/// The kind a model's tool call is committed with. A call whose input fails
/// its declared schema (checked here for tools that wait on someone outside,
/// who must never receive invalid input) is committed as an internal call
/// that the next tool batch answers with the validation error, so the model
/// can correct itself and the turn goes on. Runnable calls are validated when
/// they run.
pub fn commit_kind(config: &Value, name: &str, input: &Value) -> ToolKind {
    match kind_of(config, name) {
        Some(kind @ (ToolKind::Custom | ToolKind::Question | ToolKind::Command)) => {
            match schema_of(config, name) {
                Some(schema) if validate_input(&schema, input).is_err() => ToolKind::Internal,
                _ => kind,
            }
        }
        Some(kind) => kind,
        None => ToolKind::Internal,
    }
}

fn declared(config: &Value) -> impl Iterator<Item = &Value> {
    config
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The input schema of a tool that is not an MCP tool (those are validated
/// by their server).
fn schema_of(config: &Value, name: &str) -> Option<Value> {
    match kind_of(config, name)? {
        ToolKind::Custom => declared(config)
            .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
            .and_then(custom_definition)
            .map(|d| d.input_schema),
        ToolKind::Question => Some(ask_user_definition().input_schema),
        ToolKind::Command => Some(run_command_definition().input_schema),
        ToolKind::Internal => Some(spawn_subagent_definition().input_schema),
        ToolKind::External if name == WEB_FETCH_TOOL_NAME => {
            Some(web_fetch_definition().input_schema)
        }
        ToolKind::External => None,
    }
}

fn custom_definition(tool: &Value) -> Option<ToolDefinition> {
    Some(ToolDefinition {
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
    })
}

fn ask_user_definition() -> ToolDefinition {
    ToolDefinition {
        name: "ask_user".into(),
        description: "Ask the user a question and wait for their answer. Use it when you \
                      need information or a decision only the user can give."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {"question": {"type": "string", "minLength": 1}},
            "required": ["question"],
            "additionalProperties": false
        }),
    }
}

fn spawn_subagent_definition() -> ToolDefinition {
    ToolDefinition {
        name: "spawn_subagent".into(),
        description: "Start a subagent on a self-contained task and receive its final \
                      answer as this tool's result."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {"prompt": {"type": "string", "minLength": 1}},
            "required": ["prompt"],
            "additionalProperties": false
        }),
    }
}

fn run_command_definition() -> ToolDefinition {
    ToolDefinition {
        name: "run_command".into(),
        description: "Run a shell command (sh -c) on the configured machine and receive its \
                      exit code, stdout and stderr. The command runs at most once."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1},
                "timeout_secs": {"type": "integer", "minimum": 1, "maximum": 86400}
            },
            "required": ["command"],
            "additionalProperties": false
        }),
    }
}

/// Run the runnable calls of a batch in order, each committed with its
/// result as soon as it has one. External calls are marked `running` (and
/// committed) before their IO, so a crash mid-call is seen as interrupted
/// and never reruns the IO.
pub async fn run_batch(
    deps: &StepDeps,
    claim: Claim,
    context: &StepContext,
    calls: Vec<ToolCallRecord>,
) -> Result<()> {
    for call in calls {
        if let Some(output) = reject(&context.config, &call) {
            commit(deps, claim, &call, output).await?;
            continue;
        }
        match kind_of(&context.config, &call.name) {
            Some(ToolKind::External) => {
                {
                    let client = deps.pool.get().await?;
                    store::start_tool_call(&store::Pooled(&client), claim, call.id).await?;
                }
                let output = run_external(deps, &context.config, &call).await;
                commit(deps, claim, &call, output).await?;
            }
            Some(ToolKind::Internal) => spawn_subagent(deps, claim, context, &call).await?,
            // Waiting kinds never reach a batch as pending: reject() caught
            // the only way they could (invalid input).
            _ => {
                let output = ToolOutput::error(format!("Tool {:?} cannot run here.", call.name));
                commit(deps, claim, &call, output).await?;
            }
        }
    }
    Ok(())
}

/// The error result for a call that must not run: an unknown tool, or input
/// that fails the tool's schema.
fn reject(config: &Value, call: &ToolCallRecord) -> Option<ToolOutput> {
    if kind_of(config, &call.name).is_none() {
        return Some(ToolOutput::error(format!(
            "Unknown tool {:?}: this agent has no such tool.",
            call.name
        )));
    }
    let schema = schema_of(config, &call.name)?;
    validate_input(&schema, &call.input)
        .err()
        .map(|message| ToolOutput::error(format!("Tool {:?}: {message}", call.name)))
}

async fn commit(
    deps: &StepDeps,
    claim: Claim,
    call: &ToolCallRecord,
    output: ToolOutput,
) -> Result<()> {
    let client = deps.pool.get().await?;
    store::commit_tool_result(
        &store::Pooled(&client),
        claim,
        call.id,
        &output.output,
        output.is_error,
    )
    .await?;
    Ok(())
}

async fn run_external(deps: &StepDeps, config: &Value, call: &ToolCallRecord) -> ToolOutput {
    if call.name == WEB_FETCH_TOOL_NAME {
        return web_fetch(&deps.web_fetch_client, &call.input, &deps.web_fetch_limits).await;
    }
    let Some((prefix, tool)) = mcp::split_tool_name(&call.name) else {
        return ToolOutput::error(format!("Unknown tool {:?}.", call.name));
    };
    let server = declared(config)
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("mcp"))
        .find(|t| t.get("name").and_then(Value::as_str) == Some(prefix))
        .map(McpServerConfig::from_tool_entry);
    match server {
        Some(Ok(server)) => deps.mcp.call_tool(&server, tool, &call.input).await,
        Some(Err(e)) => ToolOutput::error(format!("MCP server {prefix:?} is misconfigured: {e}")),
        None => ToolOutput::error(format!("Unknown tool {:?}.", call.name)),
    }
}

/// `spawn_subagent`: the child agent, its first input and the parent's
/// waiting call in one transaction. The child gets the tool entry's
/// `config`, or the parent's config without `spawn_subagent` (so subagents
/// do not recurse unless configured to).
async fn spawn_subagent(
    deps: &StepDeps,
    claim: Claim,
    context: &StepContext,
    call: &ToolCallRecord,
) -> Result<()> {
    let entry = declared(&context.config)
        .find(|t| t.get("type").and_then(Value::as_str) == Some("spawn_subagent"));
    let child_config = match entry.and_then(|e| e.get("config")) {
        Some(config) => config.clone(),
        None => {
            let mut config = context.config.clone();
            if let Some(tools) = config.get_mut("tools").and_then(Value::as_array_mut) {
                tools.retain(|t| t.get("type").and_then(Value::as_str) != Some("spawn_subagent"));
            }
            config
        }
    };
    let prompt = call
        .input
        .get("prompt")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let client = deps.pool.get().await?;
    match store::spawn_subagent(&**client, claim, call.id, &child_config, prompt).await {
        Ok(Some(child)) => {
            tracing::info!(%child, "subagent started");
            Ok(())
        }
        Ok(None) => {
            tracing::info!("subagent refused by a limit");
            Ok(())
        }
        // A child config that does not validate is the model's (or the
        // operator's) problem to see, not a crash.
        Err(Error::Invalid { field, message }) => {
            let output = ToolOutput::error(format!(
                "The subagent could not be created: {} {message}",
                field.unwrap_or_default()
            ));
            drop(client);
            commit(deps, claim, call, output).await
        }
        Err(e) => Err(e),
    }
}
