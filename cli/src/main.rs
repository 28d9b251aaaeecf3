//! The `holdfast` binary: parses flags, wires the crates. Nothing else.

mod client;
mod database;
mod demo;
mod endpoints;
mod keys;
mod machine;
mod maintenance;
mod prices;
mod projects;
mod run_worker;
mod serve_api;
mod signals;
mod up;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use clap::{Parser, Subcommand};
use holdfast_client::wire::approvals::Decision;
use holdfast_engine::egress::EgressPolicy;
use holdfast_engine::telemetry::Telemetry;

/// Holdfast: a durable runtime for LLM agents on PostgreSQL.
#[derive(Parser)]
#[command(name = "holdfast", version = env!("VERSION_WITH_COMMIT"))]
struct Cli {
    /// Postgres URL. Unset: the embedded cluster in .holdfast/pg, which
    /// `up` creates in its directory and other commands find in theirs or
    /// the nearest directory above.
    #[arg(long = "database-url", env = "HOLDFAST_DATABASE_URL", global = true)]
    database_url: Option<String>,
    /// Log filter (e.g. `info`, `holdfast=debug`); default `info`, and
    /// `warn` for the demo and the client commands, whose output is for people.
    #[arg(long = "log", env = "HOLDFAST_LOG", global = true)]
    log: Option<String>,
    /// Log as JSON lines.
    #[arg(long = "log-json", global = true)]
    log_json: bool,
    /// Special-purpose address ranges (private, loopback, link-local, ...)
    /// that tenant- and model-aimed requests may reach, per kind:
    /// `kind=range;range,...` with kinds web_fetch, mcp, webhook, wake,
    /// model, content_url or *, and ranges in CIDR, single addresses or *. Unset: public
    /// addresses only.
    #[arg(long = "egress-allow", env = "HOLDFAST_EGRESS_ALLOW", global = true)]
    egress_allow: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply the SQL migrations in sql/ (idempotent; safe to run concurrently).
    Migrate,
    /// Queue overview: agents by state, leases by worker, stuck agents.
    Status {
        /// One JSON document: {"queue_depth", "workers", "stuck_agents"}.
        #[arg(long)]
        json: bool,
    },
    /// Claim agents and run their steps until SIGTERM/SIGINT (then drain).
    Worker(run_worker::WorkerArgs),
    /// Serve the HTTP API until SIGTERM/SIGINT.
    Api(serve_api::ApiArgs),
    /// Create or revoke API keys.
    Keys {
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
    /// Add, list or remove the operator's model endpoints (`model.endpoint`).
    Endpoints {
        #[command(subcommand)]
        command: endpoints::EndpointsCommand,
    },
    /// Set, list or remove the operator's model prices (the cost in usage).
    Prices {
        #[command(subcommand)]
        command: prices::PricesCommand,
    },
    /// Operator settings of a project (custom model URLs).
    Projects {
        #[command(subcommand)]
        command: projects::ProjectsCommand,
    },
    /// Release dead leases, wake delayed agents, deliver webhooks (safe to run several).
    Maintenance(maintenance::MaintenanceArgs),
    /// Run commands for agents on this machine (the machine daemon; needs no database).
    Machine(machine::MachineArgs),
    /// Run everything on one host: API, workers, maintenance (embedded Postgres by default).
    Up(Box<up::UpArgs>),
    /// A self-contained showcase: a crash mid-answer and the recovery (no API key, no network).
    Demo(demo::DemoArgs),
    /// Create, show and list agents (client: HOLDFAST_URL, HOLDFAST_API_KEY).
    Agents {
        #[command(subcommand)]
        command: client::AgentsCommand,
    },
    /// List an agent's waiting inputs, take back a queued one (client: HOLDFAST_URL, HOLDFAST_API_KEY).
    Inputs {
        #[command(subcommand)]
        command: client::InputsCommand,
    },
    /// Delete machines and rotate their tokens (client: HOLDFAST_URL, HOLDFAST_API_KEY).
    Machines {
        #[command(subcommand)]
        command: client::MachinesCommand,
    },
    /// Send a message to an agent, with an Idempotency-Key.
    Send(client::SendArgs),
    /// Follow an agent's timeline live (resumes after reconnects).
    Tail(client::TailArgs),
    /// What waits on you: pending approvals, questions and custom tool calls.
    Pending(client::PendingArgs),
    /// Approve a tool call that needs approval.
    Approve(client::DecideArgs),
    /// Deny a tool call that needs approval.
    Deny(client::DecideArgs),
    /// Answer an agent's question.
    Answer(client::AnswerArgs),
    /// Post a custom tool call's result.
    Result(client::ResultArgs),
}

/// Errors end the process with one line on stderr, causes joined by ": "
/// (a connection error names what failed: TLS, certificate, password,
/// host, database), and exit status 1.
fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let speaks_to_people = !matches!(
        cli.command,
        Command::Migrate
            | Command::Status { .. }
            | Command::Worker(_)
            | Command::Api(_)
            | Command::Keys { .. }
            | Command::Endpoints { .. }
            | Command::Prices { .. }
            | Command::Projects { .. }
            | Command::Maintenance(_)
            | Command::Up(_)
            | Command::Machine(_)
    );
    let default_log = if speaks_to_people { "warn" } else { "info" };
    init_tracing(cli.log.as_deref().unwrap_or(default_log), cli.log_json);
    // Before the runtime: the exporter's blocking HTTP client must not be
    // built on one. Only workers (steps), maintenance (webhook deliveries)
    // and machine daemons (commands) make spans (docs/api.md, "Tracing").
    let telemetry = if matches!(
        cli.command,
        Command::Worker(_) | Command::Up(_) | Command::Maintenance(_) | Command::Machine(_)
    ) {
        Telemetry::from_env(|name| std::env::var(name).ok())?
    } else {
        Telemetry::disabled()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async move {
        let url = cli.database_url.as_deref();
        let open = || database::Database::open(url);
        // Read by the server commands only: a bad value stops them, and
        // never a client command.
        let egress = || -> Result<Arc<EgressPolicy>> {
            let policy = EgressPolicy::configure(cli.egress_allow.as_deref(), |name| {
                std::env::var(name).ok()
            })?;
            Ok(Arc::new(policy))
        };
        match cli.command {
            Command::Migrate => {
                let applied = open().await?.migrate().await?;
                if applied.is_empty() {
                    println!("schema is up to date");
                } else {
                    for name in applied {
                        println!("applied {name}");
                    }
                }
                Ok(())
            }
            Command::Status { json } => {
                let db = open().await?;
                db.migrate().await?;
                database::print_status(&db, json).await
            }
            Command::Worker(args) => run_worker::run(&open().await?, &args, egress()?).await,
            Command::Api(args) => serve_api::run(&open().await?, args, egress()?).await,
            Command::Keys { command } => keys::run(&open().await?, command).await,
            Command::Endpoints { command } => endpoints::run(&open().await?, command).await,
            Command::Prices { command } => prices::run(&open().await?, command).await,
            Command::Projects { command } => projects::run(&open().await?, command).await,
            Command::Maintenance(args) => maintenance::run(&open().await?, args, egress()?).await,
            Command::Up(args) => {
                up::run(database::Database::open_here(url).await?, *args, egress()?).await
            }
            // The demo brings its own Postgres; the client speaks HTTP.
            Command::Demo(args) => demo::run(args).await,
            Command::Agents { command } => client::agents(command).await,
            Command::Machines { command } => client::machines(command).await,
            Command::Inputs { command } => client::inputs(command).await,
            Command::Send(args) => client::send(args).await,
            Command::Tail(args) => client::tail(args).await,
            Command::Pending(args) => client::pending(args).await,
            Command::Approve(args) => client::decide(args, Decision::Approve).await,
            Command::Deny(args) => client::decide(args, Decision::Deny).await,
            Command::Answer(args) => client::answer(args).await,
            Command::Result(args) => client::result(args).await,
            // The daemon runs on a user's machine and speaks HTTP only: it
            // never opens, let alone starts, a database.
            Command::Machine(args) => machine::run(args).await,
        }
    });
    // The spans of the last steps (a worker drained by SIGTERM) go out now.
    telemetry.shutdown();
    result
}

fn init_tracing(filter: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
