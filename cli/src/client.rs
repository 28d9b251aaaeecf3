//! The client CLI: Holdfast's HTTP API from a shell (`HOLDFAST_URL`,
//! `HOLDFAST_API_KEY`). Human output by default; `--json` prints the API's
//! JSON (one document, or one event per line for `tail`), and on an error
//! the API's error body, so scripts can branch on `.error.type`.

mod render;
pub mod replay;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use holdfast_client::follow::{follow, StreamItem};
use holdfast_client::{CallError, Client};
use holdfast_wire::api::agents::StateName;
use holdfast_wire::api::approvals::{
    AnswerRequest, ApprovalStatusName, ApprovalView, Decision, DecisionRequest, QuestionStatusName,
    QuestionView,
};
use holdfast_wire::api::inputs::InputRequest;
use holdfast_wire::api::machines::RegisterMachineRequest;
use holdfast_wire::api::tool_calls::{KindName, StatusFilter, ToolCallView, ToolResultRequest};
use holdfast_wire::domain::{CancelOutcome, InputMode, WaitingInputs};
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::signals::cancel_on_signal;

/// `--json` on the client commands.
const JSON_HELP: &str =
    "Print the API's JSON answer instead of text (on an error, the API's error \
     body, so scripts can branch on .error.type)";

/// Where the API is and who is calling.
#[derive(Args, Clone)]
pub struct Endpoint {
    /// The API's base URL.
    #[arg(
        long = "url",
        env = "HOLDFAST_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    url: String,
    /// An API key (`holdfast keys create`, or the one `holdfast up` printed).
    #[arg(long = "api-key", env = "HOLDFAST_API_KEY", hide_env_values = true)]
    api_key: String,
}

impl Endpoint {
    fn client(&self) -> Result<Client> {
        let user_agent = concat!("holdfast-cli/", env!("CARGO_PKG_VERSION"));
        Client::new(&self.url, &self.api_key, user_agent).context("building the HTTP client")
    }
}

#[derive(Subcommand)]
pub enum AgentsCommand {
    /// Create an agent.
    Create(CreateArgs),
    /// List the project's agents, oldest first.
    List {
        /// Only agents in this state (idle, ready, running, waiting, archived).
        #[arg(long, value_parser = parse_state)]
        state: Option<StateName>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// Show an agent.
    Get(AgentArgs),
    /// Cancel the agent's current turn: waiting tool calls are cancelled and
    /// `turn.cancelled` is saved; a step in flight stops.
    Cancel(AgentArgs),
    /// Archive an idle agent: it takes no new inputs.
    Archive(AgentArgs),
}

/// One agent, by id.
#[derive(Args)]
pub struct AgentArgs {
    /// The agent's id.
    agent: Uuid,
    #[arg(long, help = JSON_HELP)]
    json: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Subcommand)]
pub enum InputsCommand {
    /// List an agent's waiting inputs, oldest first: those queued for the
    /// next turn (the default), or those in the open turn no saved model
    /// call has seen yet (`--status pending`).
    List {
        /// The agent's id.
        agent: Uuid,
        /// Which inputs: queued or pending.
        #[arg(long, default_value = "queued", value_parser = parse_waiting)]
        status: WaitingInputs,
        #[arg(long, help = JSON_HELP)]
        json: bool,
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// Take back a queued input before a turn takes it (it is never sent).
    Remove {
        /// The input's id.
        input: Uuid,
        #[arg(long, help = JSON_HELP)]
        json: bool,
        #[command(flatten)]
        endpoint: Endpoint,
    },
}

pub async fn inputs(command: InputsCommand) -> Result<()> {
    match command {
        InputsCommand::List {
            agent,
            status,
            json,
            endpoint,
        } => {
            let api = endpoint.client()?;
            let list = api
                .list_inputs(agent, status)
                .await
                .or_else(|e| fail(e, json))?;
            if json {
                print_json(&list);
            } else {
                render::input_list(&list.inputs);
            }
            Ok(())
        }
        InputsCommand::Remove {
            input,
            json,
            endpoint,
        } => {
            let api = endpoint.client()?;
            let removed = api.remove_input(input).await.or_else(|e| fail(e, json))?;
            if json {
                print_json(&removed);
            } else {
                println!("Removed queued input {input}: no turn will take it.");
            }
            Ok(())
        }
    }
}

fn parse_waiting(text: &str) -> std::result::Result<WaitingInputs, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not one of queued, pending"))
}

#[derive(Subcommand)]
pub enum MachinesCommand {
    /// Register a machine agents can run commands on; its token is printed
    /// once, alone on the last line (give it to `holdfast machine run`).
    Create {
        /// Unique in the project: 1 to 100 letters, digits, ".", "_" or "-".
        name: String,
        /// POSTed when a wake attempt starts (e.g. a Wake-on-LAN relay).
        #[arg(long = "wake-url")]
        wake_url: Option<String>,
        #[arg(long, help = JSON_HELP)]
        json: bool,
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// List the project's machines: online or not, queued and running
    /// commands.
    List {
        #[arg(long, help = JSON_HELP)]
        json: bool,
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// Delete a machine: its token stops working, its queued and running
    /// commands end (the agents waiting on them get `machine_deleted`).
    Delete(MachineRef),
    /// Give a machine a new token (printed once, alone on the last line);
    /// the old one stops working and its daemon stops.
    Token(MachineRef),
    /// The old name of `machines token`.
    #[command(hide = true)]
    RotateToken(MachineRef),
}

/// One machine, by id.
#[derive(Args)]
pub struct MachineRef {
    /// The machine's id.
    machine: Uuid,
    #[arg(long, help = JSON_HELP)]
    json: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Args)]
pub struct CreateArgs {
    /// PROVIDER/NAME, e.g. anthropic/claude-sonnet-4-5 or openai/gpt-4.1.
    #[arg(long)]
    model: String,
    /// The operator's model endpoint to use (`model.endpoint`; default
    /// `default`).
    #[arg(long = "model-endpoint")]
    model_endpoint: Option<String>,
    /// A compatible server of your own (only where the operator allows
    /// custom URLs for the project).
    #[arg(long = "base-url")]
    base_url: Option<String>,
    /// The most tokens one model response may have.
    #[arg(long = "max-tokens")]
    max_tokens: Option<u32>,
    /// The system prompt.
    #[arg(long)]
    system: Option<String>,
    /// A tool: a type (`web_fetch`, `ask_user`, `spawn_subagent`),
    /// `custom:NAME` (your backend answers it), `mcp:NAME=URL`, or a JSON
    /// object. Repeat for several.
    #[arg(long = "tool", value_name = "SPEC")]
    tools: Vec<String>,
    /// A tool name that needs approve/deny before it runs. Repeat for several.
    #[arg(long = "require-approval", value_name = "TOOL")]
    require_approval: Vec<String>,
    /// Free-form JSON object kept with the agent.
    #[arg(long)]
    metadata: Option<String>,
    #[arg(long, conflicts_with = "quiet", help = JSON_HELP)]
    json: bool,
    /// Print only the new agent's id (for scripts: `AGENT=$(holdfast agents create ... -q)`).
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Args)]
pub struct SendArgs {
    /// The agent's id.
    agent: Uuid,
    /// The message.
    text: String,
    /// Sent as `Idempotency-Key` (default: a fresh UUID, reused by this
    /// command's own retries, so a retried send is recorded once).
    #[arg(long = "idempotency-key")]
    idempotency_key: Option<String>,
    /// How the message joins the agent's turns: steer (the open turn's next
    /// model call sees it), queue (it waits for the turn to end and opens
    /// the next), interrupt (the model call in flight is aborted and made
    /// again with it; a running tool is never interrupted).
    #[arg(long, default_value = "steer", value_parser = parse_mode)]
    mode: InputMode,
    #[arg(long, help = JSON_HELP)]
    json: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

fn parse_mode(text: &str) -> std::result::Result<InputMode, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not one of steer, queue, interrupt"))
}

#[derive(Args)]
pub struct TailArgs {
    /// The agent's id.
    agent: Uuid,
    /// Start after this event seq (0: from the first event).
    #[arg(long, default_value_t = 0)]
    after: i64,
    /// Exit after the first event of this type (e.g. `turn.completed`).
    #[arg(long, value_name = "EVENT_TYPE")]
    until: Option<String>,
    /// One JSON document per line: saved events as the API sends them, and
    /// live deltas as `{"type": "delta", "text", "epoch"}`.
    #[arg(long, help = JSON_HELP)]
    json: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Args)]
pub struct PendingArgs {
    /// The agent's id.
    agent: Uuid,
    #[arg(long, help = JSON_HELP)]
    json: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Args)]
pub struct DecideArgs {
    /// The approval's id (`holdfast pending` lists them).
    approval: Uuid,
    /// Who decides (default: $USER).
    #[arg(long)]
    by: Option<String>,
    /// Why (the model sees it on a denial).
    #[arg(long)]
    reason: Option<String>,
    #[arg(long, help = JSON_HELP)]
    json: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Args)]
pub struct AnswerArgs {
    /// The question's id (`holdfast pending` lists them).
    question: Uuid,
    /// The answer, as text.
    answer: String,
    /// Who answers (default: $USER).
    #[arg(long)]
    by: Option<String>,
    #[arg(long, help = JSON_HELP)]
    json: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Args)]
pub struct ResultArgs {
    /// The custom tool call's id (`holdfast pending` lists them).
    tool_call: Uuid,
    /// The tool's output as JSON (a string needs quotes: '"done"').
    output: String,
    /// The tool failed; the model is told so.
    #[arg(long)]
    error: bool,
    #[arg(long, help = JSON_HELP)]
    json: bool,
    #[command(flatten)]
    endpoint: Endpoint,
}

pub async fn agents(command: AgentsCommand) -> Result<()> {
    match command {
        AgentsCommand::Create(args) => create_agent(args).await,
        AgentsCommand::List {
            state,
            json,
            endpoint,
        } => list_agents(endpoint, state, json).await,
        AgentsCommand::Get(args) => {
            let api = args.endpoint.client()?;
            let agent = api
                .agent(args.agent)
                .await
                .or_else(|e| fail(e, args.json))?;
            if args.json {
                print_json(&agent);
            } else {
                render::agent(&agent);
            }
            Ok(())
        }
        AgentsCommand::Cancel(args) => {
            let api = args.endpoint.client()?;
            let cancelled = api
                .cancel_agent(args.agent)
                .await
                .or_else(|e| fail(e, args.json))?;
            if args.json {
                print_json(&cancelled);
            } else {
                match cancelled.status {
                    CancelOutcome::Cancelled => {
                        println!("Cancelled the turn of agent {}.", args.agent)
                    }
                    CancelOutcome::Requested => println!(
                        "Asked the worker running agent {} to stop; turn.cancelled follows.",
                        args.agent
                    ),
                }
            }
            Ok(())
        }
        AgentsCommand::Archive(args) => {
            let api = args.endpoint.client()?;
            let agent = api
                .archive_agent(args.agent)
                .await
                .or_else(|e| fail(e, args.json))?;
            if args.json {
                print_json(&agent);
            } else {
                println!("Archived agent {}: it takes no new inputs.", agent.id);
            }
            Ok(())
        }
    }
}

pub async fn machines(command: MachinesCommand) -> Result<()> {
    match command {
        MachinesCommand::Create {
            name,
            wake_url,
            json,
            endpoint,
        } => {
            let api = endpoint.client()?;
            let request = RegisterMachineRequest { name, wake_url };
            let created = api
                .register_machine(&request)
                .await
                .or_else(|e| fail(e, json))?;
            if json {
                print_json(&created);
            } else {
                println!("Registered machine {} ({}).", created.name, created.id);
                print_token_hint();
                println!("{}", created.token);
            }
            Ok(())
        }
        MachinesCommand::List { json, endpoint } => {
            let api = endpoint.client()?;
            let list = api.machines().await.or_else(|e| fail(e, json))?;
            if json {
                print_json(&list);
            } else {
                render::machine_list(&list.machines);
            }
            Ok(())
        }
        MachinesCommand::Delete(target) => {
            let api = target.endpoint.client()?;
            let machine = target.machine;
            api.delete_machine(machine)
                .await
                .or_else(|e| fail(e, target.json))?;
            if target.json {
                print_json(&json!({"id": machine, "deleted": true}));
            } else {
                println!("Deleted machine {machine}: its token no longer works, and its unfinished commands ended.");
            }
            Ok(())
        }
        MachinesCommand::RotateToken(target) => {
            crate::deprecated("machines rotate-token", "machines token");
            rotate_token(target).await
        }
        MachinesCommand::Token(target) => rotate_token(target).await,
    }
}

async fn rotate_token(target: MachineRef) -> Result<()> {
    let api = target.endpoint.client()?;
    let machine = target.machine;
    let rotated = api
        .rotate_machine_token(machine)
        .await
        .or_else(|e| fail(e, target.json))?;
    if target.json {
        print_json(&rotated);
    } else {
        let name = &rotated.name;
        println!("New token for machine {name} ({machine}); the old one no longer works.");
        print_token_hint();
        println!("{}", rotated.token);
    }
    Ok(())
}

/// What to do with a machine token printed below this line.
fn print_token_hint() {
    println!("Start its daemon with it, e.g. in a file: holdfast machine run --token-file FILE");
    eprintln!("Store this token now: it is not shown again.");
}

async fn create_agent(args: CreateArgs) -> Result<()> {
    let (provider, name) = args
        .model
        .split_once('/')
        .filter(|(p, n)| !p.is_empty() && !n.is_empty())
        .context("--model must be PROVIDER/NAME, e.g. anthropic/claude-sonnet-4-5")?;
    let mut model = json!({"provider": provider, "name": name});
    if let Some(endpoint) = &args.model_endpoint {
        model["endpoint"] = json!(endpoint);
    }
    if let Some(base_url) = &args.base_url {
        model["base_url"] = json!(base_url);
    }
    if let Some(max_tokens) = args.max_tokens {
        model["max_tokens"] = json!(max_tokens);
    }
    let tools = args
        .tools
        .iter()
        .map(|spec| tool_from_spec(spec))
        .collect::<Result<Vec<_>>>()?;
    let mut config = json!({"model": model, "tools": tools});
    if let Some(system) = &args.system {
        config["system"] = json!(system);
    }
    if !args.require_approval.is_empty() {
        config["approvals"] = json!({"require_for": args.require_approval});
    }
    if let Some(metadata) = &args.metadata {
        let metadata: Map<String, Value> =
            serde_json::from_str(metadata).context("--metadata must be a JSON object")?;
        config["metadata"] = Value::Object(metadata);
    }
    let api = args.endpoint.client()?;
    let agent = api
        .create_agent(&config)
        .await
        .or_else(|e| fail(e, args.json))?;
    if args.json {
        print_json(&agent);
    } else if args.quiet {
        println!("{}", agent.id);
    } else {
        render::agent_created(&agent);
    }
    Ok(())
}

/// A `--tool` spec as a tool entry of the agent config.
fn tool_from_spec(spec: &str) -> Result<Value> {
    let spec = spec.trim();
    if spec.starts_with('{') {
        let tool: Map<String, Value> = serde_json::from_str(spec)
            .with_context(|| format!("--tool {spec}: not a JSON object"))?;
        return Ok(Value::Object(tool));
    }
    if let Some(name) = spec.strip_prefix("custom:") {
        return Ok(json!({"type": "custom", "name": name, "input_schema": {"type": "object"}}));
    }
    if let Some(server) = spec.strip_prefix("mcp:") {
        let (name, url) = server
            .split_once('=')
            .with_context(|| format!("--tool {spec}: expected mcp:NAME=URL"))?;
        return Ok(json!({"type": "mcp", "name": name, "url": url}));
    }
    if spec.is_empty() || spec.contains([':', '=', ' ']) {
        bail!("--tool {spec}: expected a tool type, custom:NAME, mcp:NAME=URL or a JSON object");
    }
    Ok(json!({"type": spec}))
}

/// `--state` as the API names states.
fn parse_state(state: &str) -> Result<StateName, String> {
    serde_json::from_value(json!(state))
        .map_err(|_| "expected idle, ready, running, waiting or archived".to_owned())
}

async fn list_agents(endpoint: Endpoint, state: Option<StateName>, json: bool) -> Result<()> {
    let api = endpoint.client()?;
    let mut agents = Vec::new();
    let mut after = None;
    loop {
        let page = api
            .list_agents(state, after, 1000)
            .await
            .or_else(|e| fail(e, json))?;
        after = page.agents.last().map(|agent| agent.id);
        agents.extend(page.agents);
        if !page.has_more || after.is_none() {
            break;
        }
    }
    if json {
        print_json(&json!({"agents": agents}));
    } else {
        render::agent_list(&agents);
    }
    Ok(())
}

pub async fn send(args: SendArgs) -> Result<()> {
    let api = args.endpoint.client()?;
    let key = args
        .idempotency_key
        .clone()
        .unwrap_or_else(|| Uuid::new_v4().to_string());
    let input = InputRequest {
        content: json!(args.text),
        mode: args.mode,
    };
    let answer = api
        .send_input(args.agent, &input, &key)
        .await
        .or_else(|e| fail(e, args.json))?;
    if args.json {
        print_json(&json!({
            "input": answer.body,
            "idempotency_key": key,
            "replayed": answer.replayed,
        }));
    } else {
        let id = answer.body.id;
        let replay = if answer.replayed {
            " — a replay: the first send with this key was recorded"
        } else {
            ""
        };
        println!(
            "input {id} sent to agent {} (Idempotency-Key: {key}){replay}",
            args.agent
        );
    }
    Ok(())
}

pub async fn tail(args: TailArgs) -> Result<()> {
    let api = args.endpoint.client()?;
    let stop = CancellationToken::new();
    cancel_on_signal(stop.clone())?;
    let (tx, mut rx) = mpsc::channel(256);
    let follower = tokio::spawn(follow(
        api.clone(),
        args.agent,
        args.after,
        tx,
        stop.clone(),
    ));
    let mut printer = render::Timeline::default();
    while let Some(item) = rx.recv().await {
        match item {
            StreamItem::Saved(event) => {
                if args.json {
                    print_json_line(&event.json);
                } else {
                    printer.saved(&event);
                }
                if args.until.as_deref() == Some(event.kind.as_str()) {
                    stop.cancel();
                    break;
                }
            }
            StreamItem::Delta { text, epoch } => {
                if args.json {
                    print_json_line(&json!({"type": "delta", "text": text, "epoch": epoch}));
                } else {
                    printer.delta(&text);
                }
            }
            StreamItem::Reconnected { after } => {
                printer.break_line();
                eprintln!("stream reconnected; resumed after event #{after}");
                // Whatever was waiting may have been answered meanwhile: the
                // stream carries those events too, but a person should see
                // what still waits now.
                if !args.json {
                    if let Ok(waiting) = pending_items(&api, args.agent).await {
                        render::pending(&waiting, true);
                    }
                }
            }
        }
    }
    printer.break_line();
    drop(rx);
    match follower.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => fail(e, args.json),
        Err(e) => bail!("the stream task failed: {e}"),
    }
}

pub async fn pending(args: PendingArgs) -> Result<()> {
    let api = args.endpoint.client()?;
    let waiting = pending_items(&api, args.agent)
        .await
        .or_else(|e| fail(e, args.json))?;
    if args.json {
        print_json(&waiting);
    } else {
        render::pending(&waiting, false);
    }
    Ok(())
}

/// What waits on people and on the client: pending approvals, questions,
/// and custom tool calls waiting for a result.
#[derive(Serialize)]
pub struct Pending {
    pub approvals: Vec<ApprovalView>,
    pub questions: Vec<QuestionView>,
    pub tool_calls: Vec<ToolCallView>,
}

async fn pending_items(api: &Client, agent: Uuid) -> Result<Pending, CallError> {
    let approvals = api
        .approvals(agent, Some(ApprovalStatusName::Pending))
        .await?;
    let questions = api
        .questions(agent, Some(QuestionStatusName::Pending))
        .await?;
    let calls = api
        .tool_calls(agent, Some(StatusFilter::Waiting), Some(KindName::Custom))
        .await?;
    Ok(Pending {
        approvals: approvals.approvals,
        questions: questions.questions,
        tool_calls: calls.tool_calls,
    })
}

pub async fn decide(args: DecideArgs, decision: Decision) -> Result<()> {
    let api = args.endpoint.client()?;
    let request = DecisionRequest {
        decision,
        by: who(args.by),
        reason: args.reason,
    };
    let approval = api
        .decide(args.approval, &request)
        .await
        .or_else(|e| fail(e, args.json))?;
    if args.json {
        print_json(&approval);
    } else {
        println!(
            "approval {} {} by {} ({})",
            args.approval,
            approval.status.as_str(),
            approval.decided_by.as_deref().unwrap_or("?"),
            approval.subject()
        );
    }
    Ok(())
}

pub async fn answer(args: AnswerArgs) -> Result<()> {
    let api = args.endpoint.client()?;
    let request = AnswerRequest {
        answer: args.answer,
        by: who(args.by),
    };
    let question = api
        .answer_question(args.question, &request)
        .await
        .or_else(|e| fail(e, args.json))?;
    if args.json {
        print_json(&question);
    } else {
        println!(
            "question {} answered by {}: {:?}",
            args.question,
            question.answered_by.as_deref().unwrap_or("?"),
            question.answer.as_deref().unwrap_or_default()
        );
    }
    Ok(())
}

pub async fn result(args: ResultArgs) -> Result<()> {
    let output: Value = serde_json::from_str(&args.output)
        .context("OUTPUT must be JSON (quote a string: '\"done\"')")?;
    let api = args.endpoint.client()?;
    let request = ToolResultRequest {
        output,
        is_error: args.error,
    };
    let recorded = match api.post_tool_result(args.tool_call, &request).await {
        Ok(call) => call,
        Err(e) => match ours_already(&e, &request) {
            Some(call) => call,
            None => return fail(e, args.json),
        },
    };
    if args.json {
        print_json(&recorded);
    } else {
        println!(
            "result recorded for tool call {} ({}); the agent continues",
            args.tool_call, recorded.name
        );
    }
    Ok(())
}

/// A 409 on a tool result means: look at the call. If it holds exactly
/// `result`, an earlier try of ours got through before its answer was lost;
/// this is the call as it stands.
pub fn ours_already(error: &CallError, result: &ToolResultRequest) -> Option<ToolCallView> {
    let CallError::Api(failure) = error else {
        return None;
    };
    if failure.status != reqwest::StatusCode::CONFLICT {
        return None;
    }
    let call: ToolCallView = serde_json::from_value(failure.body["tool_call"].clone()).ok()?;
    (call.output.as_ref().unwrap_or(&Value::Null) == &result.output
        && call.is_error == Some(result.is_error))
    .then_some(call)
}

/// `--by` or the OS user's name.
fn who(by: Option<String>) -> String {
    by.or_else(|| std::env::var("USER").ok())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "holdfast-cli".into())
}

/// Report a failed call: its error body on stdout for `--json`, and an
/// error (stderr, exit status 1) either way.
fn fail<T>(error: CallError, json: bool) -> Result<T> {
    if json {
        print_json(&error.json());
    }
    Err(error.into())
}

fn print_json(value: &impl Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("printing the answer as JSON: {e}"),
    }
}

fn print_json_line(value: &Value) {
    println!("{value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_specs_become_config_entries() {
        assert_eq!(
            tool_from_spec("web_fetch").unwrap(),
            json!({"type": "web_fetch"})
        );
        assert_eq!(
            tool_from_spec("custom:lookup").unwrap(),
            json!({"type": "custom", "name": "lookup", "input_schema": {"type": "object"}})
        );
        assert_eq!(
            tool_from_spec("mcp:docs=http://127.0.0.1:9000/mcp").unwrap(),
            json!({"type": "mcp", "name": "docs", "url": "http://127.0.0.1:9000/mcp"})
        );
        assert_eq!(
            tool_from_spec(r#"{"type": "run_command", "machine": "m1"}"#).unwrap(),
            json!({"type": "run_command", "machine": "m1"})
        );
        assert!(tool_from_spec("mcp:nourl").is_err());
        assert!(tool_from_spec("what ever").is_err());
    }
}
