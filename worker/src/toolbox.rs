//! Which tools an agent has, what kind each is, and running a tool batch.
//!
//! Tools are declared in the agent's config (`tools: [...]`), by type:
//!
//! | type | kind | the model sees |
//! |---|---|---|
//! | `custom` (`name`, `description`, `input_schema`) | custom: waits for the client | as declared |
//! | `web_fetch` | external | `web_fetch` |
//! | `web_search` | external: the operator's search backend | `web_search` |
//! | `mcp` (`name` = prefix, `url`, `headers`) | external | `<prefix>__<tool>` per server tool |
//! | `ask_user` | question: waits for an answer | `ask_user` |
//! | `spawn_subagent` (`config`?) | internal | `spawn_subagent` |
//! | `run_command` (`machine`) | command: handed to a machine once | `run_command` |
//! | `anthropic_web_search`, `anthropic_web_fetch` | none here: Anthropic runs them inside the model call | `web_search`, `web_fetch` |

use holdfast_db::{store, Error, Result};
use holdfast_providers::ToolDefinition;
use holdfast_wire::config::{split_mcp_tool_name, AgentConfig, ToolEntry};
use holdfast_wire::domain::{Claim, StepContext, ToolCallRecord, ToolKind};
use opentelemetry::context::FutureExt as _;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::deps::StepDeps;
use crate::spans;
use crate::step::FullDiskWait;
use crate::stop::StopSignal;
use crate::tools::mcp::McpServerConfig;
use crate::tools::schema::validate_input;
use crate::tools::web_fetch::{web_fetch, web_fetch_definition};
use crate::tools::web_search::{web_search, web_search_definition};
use crate::tools::ToolOutput;

/// A tool server whose tools the model goes without on this call, or one
/// tool of it, and why (the egress policy refused the server, it could not
/// be reached, its listing failed or timed out, its config entry is
/// unusable; the tool's name is not one a model provider takes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnavailableTools {
    /// The MCP tool entry's `name` (the prefix of its tools).
    pub server: String,
    /// The one tool left out (the server's own name for it); `None`: all
    /// of the server's tools.
    pub tool: Option<String>,
    pub reason: String,
}

/// The tools of one model call: what the model sees, and the servers left
/// out. Those are never left out silently: the step records
/// `tool.unavailable` for each and the system prompt names them, so the
/// model and whoever reads the timeline know why the tools are missing.
#[derive(Debug, Default)]
pub struct ToolSet {
    pub definitions: Vec<ToolDefinition>,
    pub unavailable: Vec<UnavailableTools>,
}

/// The tools declared in an agent's config, as the model sees them. An MCP
/// server that cannot be listed contributes no tools to this call and is
/// in [`ToolSet::unavailable`], as is each tool of a listed server that
/// cannot be offered; the next call lists the server again.
pub async fn tool_set(deps: &StepDeps, config: &AgentConfig) -> ToolSet {
    let mut set = ToolSet::default();
    let out = &mut set.definitions;
    for tool in &config.tools {
        match tool {
            ToolEntry::Custom {
                name,
                description,
                input_schema,
            } => out.push(custom_definition(name, description, input_schema)),
            ToolEntry::WebFetch {} => out.push(web_fetch_definition()),
            ToolEntry::WebSearch {} => out.push(web_search_definition()),
            ToolEntry::AskUser {} => out.push(ask_user_definition()),
            ToolEntry::SpawnSubagent { .. } => out.push(spawn_subagent_definition()),
            ToolEntry::RunCommand { .. } => out.push(run_command_definition()),
            ToolEntry::Mcp { name, .. } => {
                let listed = match McpServerConfig::from_tool_entry(tool) {
                    Ok(server) => deps.mcp.list_tools(&server).await,
                    Err(e) => Err(e),
                };
                match listed {
                    Ok(tools) => {
                        out.extend(tools.usable);
                        set.unavailable
                            .extend(tools.left_out.into_iter().map(|(tool, reason)| {
                                UnavailableTools {
                                    server: name.clone(),
                                    tool: Some(tool),
                                    reason,
                                }
                            }));
                    }
                    Err(e) => set.unavailable.push(UnavailableTools {
                        server: name.clone(),
                        tool: None,
                        reason: e.to_string(),
                    }),
                }
            }
            // Sent as the provider's own tools (ModelRequest::provider_tools).
            ToolEntry::AnthropicWebSearch(_) | ToolEntry::AnthropicWebFetch(_) => {}
        }
    }
    set
}

/// What the system prompt says about `unavailable` servers (None when
/// every server's tools are there): the model is told which tools it lacks
/// and why, so it can say so rather than act as if they never existed.
pub fn unavailable_notice(unavailable: &[UnavailableTools]) -> Option<String> {
    if unavailable.is_empty() {
        return None;
    }
    let lines: Vec<String> = unavailable
        .iter()
        .map(|u| match &u.tool {
            None => format!("- {}__* (MCP server {}): {}", u.server, u.server, u.reason),
            Some(tool) => format!("- tool {tool:?} of MCP server {}: {}", u.server, u.reason),
        })
        .collect();
    Some(format!(
        "These configured tools are unavailable for this response, so they are not offered:\n{}",
        lines.join("\n")
    ))
}

/// The kind a model's tool call is committed with: its tool's kind, or
/// internal for a tool the agent does not have (the model invented it; the
/// next batch answers it with an error). A call whose input fails its
/// declared schema (checked here for tools that wait on someone outside,
/// who must never receive invalid input) is committed as an internal call
/// that the next tool batch answers with the validation error, so the model
/// can correct itself and the turn goes on. Runnable calls are validated when
/// they run.
pub fn commit_kind(config: &AgentConfig, name: &str, input: &Value) -> ToolKind {
    let Some((tool, kind)) = config.tool_for_call(name) else {
        return ToolKind::Internal;
    };
    match kind {
        kind @ (ToolKind::Custom | ToolKind::Question | ToolKind::Command) => {
            match schema_of(tool) {
                Some(schema) if validate_input(&schema, input).is_err() => ToolKind::Internal,
                _ => kind,
            }
        }
        kind => kind,
    }
}

/// The input schema of a tool that is not an MCP tool (those are validated
/// by their server).
fn schema_of(tool: &ToolEntry) -> Option<Value> {
    Some(match tool {
        ToolEntry::Custom {
            name,
            description,
            input_schema,
        } => custom_definition(name, description, input_schema).input_schema,
        ToolEntry::WebFetch {} => web_fetch_definition().input_schema,
        ToolEntry::WebSearch {} => web_search_definition().input_schema,
        ToolEntry::AskUser {} => ask_user_definition().input_schema,
        ToolEntry::SpawnSubagent { .. } => spawn_subagent_definition().input_schema,
        ToolEntry::RunCommand { .. } => run_command_definition().input_schema,
        ToolEntry::Mcp { .. }
        | ToolEntry::AnthropicWebSearch(_)
        | ToolEntry::AnthropicWebFetch(_) => return None,
    })
}

fn custom_definition(
    name: &str,
    description: &Option<String>,
    input_schema: &Option<Value>,
) -> ToolDefinition {
    ToolDefinition {
        name: name.to_owned(),
        description: description.clone().unwrap_or_default(),
        input_schema: input_schema
            .clone()
            .unwrap_or_else(|| json!({"type": "object"})),
    }
}

fn ask_user_definition() -> ToolDefinition {
    ToolDefinition {
        name: ToolEntry::AskUser {}.name().into(),
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
        name: ToolEntry::SpawnSubagent { config: None }.name().into(),
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
        name: ToolEntry::RunCommand {
            machine: None,
            workspace: None,
        }
        .name()
        .into(),
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
/// result as soon as it has one, but the last: its result is returned, to
/// be saved with the batch's end in one transaction (nothing runs after
/// it that a crash could lose it to). Each runs as the kind it was committed
/// with (a config change since does not turn it into another kind of call).
/// External calls are marked `running` (and committed) before their IO, so
/// a crash mid-call is seen as interrupted and never reruns the IO.
/// A replay's calls run nothing: SQL answers them all from the recording.
pub async fn run_batch(
    deps: &StepDeps,
    claim: Claim,
    stop: &StopSignal,
    context: &StepContext,
    calls: Vec<ToolCallRecord>,
) -> Result<Option<LastToolResult>> {
    if context.replay {
        let client = deps.pool.get().await?;
        store::answer_replay_calls(&client, claim).await?;
        return Ok(None);
    }
    let last = calls.len().saturating_sub(1);
    for (index, call) in calls.into_iter().enumerate() {
        let output = match checked_tool(&context.config, &call) {
            Err(output) => output,
            Ok(tool) => match call.kind {
                ToolKind::External => {
                    let mut wait = FullDiskWait::new(claim, stop);
                    loop {
                        let started = {
                            let client = deps.pool.get().await?;
                            store::start_tool_call(&client, claim, call.id).await
                        };
                        match started {
                            Err(error) if error.is_storage_full() => wait.after(error).await?,
                            started => break started?,
                        }
                    }
                    let server = match tool {
                        ToolEntry::Mcp { url, .. } => reqwest::Url::parse(url).ok(),
                        _ => None,
                    };
                    let span =
                        spans::start_tool_call(&call.name, &call.provider_id, server.as_ref());
                    let output = run_external(deps, tool, &call)
                        .with_context(span.clone())
                        .await;
                    spans::end_tool_call(&span, output.is_error);
                    output
                }
                ToolKind::Internal => {
                    spawn_subagent(deps, claim, stop, context, tool, &call).await?;
                    continue;
                }
                // Waiting kinds never reach a batch as pending: checked_tool()
                // caught the only way they could (invalid input).
                ToolKind::Custom | ToolKind::Question | ToolKind::Command => {
                    ToolOutput::error(format!("Tool {:?} cannot run here.", call.name))
                }
            },
        };
        if index == last {
            return Ok(Some(LastToolResult {
                call: call.id,
                output,
            }));
        }
        commit(deps, claim, stop, &call, output).await?;
    }
    Ok(None)
}

/// A batch's last result, in hand and not yet saved: it is saved with the
/// batch's end, in one transaction (`store::end_tool_batch`).
#[derive(Debug)]
pub struct LastToolResult {
    pub call: Uuid,
    pub output: ToolOutput,
}

/// The tool a runnable call runs as, or the error result for a call that
/// must not run: a tool the agent does not have, input that fails the
/// tool's schema, or a tool whose kind is no longer the one the call was
/// committed with (the config changed in between).
fn checked_tool<'a>(
    config: &'a AgentConfig,
    call: &ToolCallRecord,
) -> std::result::Result<&'a ToolEntry, ToolOutput> {
    let Some((tool, kind)) = config.tool_for_call(&call.name) else {
        return Err(ToolOutput::error(format!(
            "Unknown tool {:?}: this agent has no such tool.",
            call.name
        )));
    };
    if let Some(Err(message)) = schema_of(tool).map(|schema| validate_input(&schema, &call.input)) {
        return Err(ToolOutput::error(format!(
            "Tool {:?}: {message}",
            call.name
        )));
    }
    if kind != call.kind {
        return Err(ToolOutput::error(format!(
            "Tool {:?} changed since it was called; call it again.",
            call.name
        )));
    }
    Ok(tool)
}

/// Commit a call's result, waiting out a full disk: the tool has run, and
/// a refused save must not make its step a failure (whose retry would find
/// the call interrupted and its result lost).
async fn commit(
    deps: &StepDeps,
    claim: Claim,
    stop: &StopSignal,
    call: &ToolCallRecord,
    output: ToolOutput,
) -> Result<()> {
    let mut wait = FullDiskWait::new(claim, stop);
    loop {
        let committed = {
            let client = deps.pool.get().await?;
            store::commit_tool_result(&client, claim, call.id, &output.output, output.is_error)
                .await
        };
        match committed {
            Err(error) if error.is_storage_full() => wait.after(error).await?,
            committed => return committed.map(drop),
        }
    }
}

async fn run_external(deps: &StepDeps, tool: &ToolEntry, call: &ToolCallRecord) -> ToolOutput {
    match tool {
        ToolEntry::WebFetch {} => {
            web_fetch(&deps.web_fetch_client, &call.input, &deps.web_fetch_limits).await
        }
        ToolEntry::WebSearch {} => {
            web_search(
                &deps.web_search_client,
                &call.input,
                &deps.settings.web_search,
            )
            .await
        }
        ToolEntry::Mcp { name: prefix, .. } => {
            let Some((_, name)) = split_mcp_tool_name(&call.name) else {
                return ToolOutput::error(format!("Unknown tool {:?}.", call.name));
            };
            match McpServerConfig::from_tool_entry(tool) {
                Ok(server) => deps.mcp.call_tool(&server, name, &call.input).await,
                Err(e) => ToolOutput::error(format!("MCP server {prefix:?} is misconfigured: {e}")),
            }
        }
        _ => ToolOutput::error(format!("Tool {:?} cannot run here.", call.name)),
    }
}

/// `spawn_subagent`: the child agent, its first input and the parent's
/// waiting call in one transaction. The child gets the tool entry's
/// `config`, or the parent's config without `spawn_subagent` (so subagents
/// do not recurse unless configured to).
async fn spawn_subagent(
    deps: &StepDeps,
    claim: Claim,
    stop: &StopSignal,
    context: &StepContext,
    tool: &ToolEntry,
    call: &ToolCallRecord,
) -> Result<()> {
    let child_config = match tool {
        ToolEntry::SpawnSubagent {
            config: Some(config),
        } => config.clone(),
        _ => {
            let mut config = context.config.clone();
            config
                .tools
                .retain(|t| !matches!(t, ToolEntry::SpawnSubagent { .. }));
            config.to_value()
        }
    };
    let prompt = call
        .input
        .get("prompt")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let client = deps.pool.get().await?;
    match store::spawn_subagent(&client, claim, call.id, &child_config, prompt).await {
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
            commit(deps, claim, stop, call, output).await
        }
        Err(e) => Err(e),
    }
}
