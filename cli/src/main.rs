//! The `holdfast` binary: parses flags, wires the crates. Nothing else.

mod database;
mod keys;
mod machine;
mod maintenance;
mod run_worker;
mod serve_api;
mod signals;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// Holdfast: a durable runtime for LLM agents on PostgreSQL.
#[derive(Parser)]
#[command(name = "holdfast", version)]
struct Cli {
    /// Postgres URL. Unset: a private embedded cluster in .holdfast/pg.
    #[arg(long = "database-url", env = "HOLDFAST_DATABASE_URL", global = true)]
    database_url: Option<String>,
    /// Log filter (e.g. `info`, `holdfast=debug`).
    #[arg(
        long = "log",
        env = "HOLDFAST_LOG",
        default_value = "info",
        global = true
    )]
    log: String,
    /// Log as JSON lines.
    #[arg(long = "log-json", global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply the SQL migrations in sql/ (idempotent; safe to run concurrently).
    Migrate,
    /// Queue overview: agents by state, leases by worker, stuck agents.
    Status,
    /// Claim agents and run their steps until SIGTERM/SIGINT (then drain).
    Worker(run_worker::WorkerArgs),
    /// Serve the HTTP API until SIGTERM/SIGINT.
    Api(serve_api::ApiArgs),
    /// Create or revoke API keys.
    Keys {
        #[command(subcommand)]
        command: keys::KeysCommand,
    },
    /// Release dead leases, wake delayed agents, deliver webhooks (safe to run several).
    Maintenance(maintenance::MaintenanceArgs),
    /// Run commands for agents on this machine (the machine daemon; needs no database).
    Machine(machine::MachineArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    init_tracing(&cli.log, cli.log_json);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // The daemon runs on a user's machine and speaks HTTP only: it must
        // not open, let alone start, a database.
        let command = match cli.command {
            Command::Machine(args) => return machine::run(args).await,
            command => command,
        };
        let db = database::Database::open(cli.database_url.as_deref()).await?;
        match command {
            Command::Migrate => {
                let applied = db.migrate().await?;
                if applied.is_empty() {
                    println!("schema is up to date");
                } else {
                    for name in applied {
                        println!("applied {name}");
                    }
                }
            }
            Command::Status => {
                db.migrate().await?;
                database::print_status(&db).await?;
            }
            Command::Worker(args) => run_worker::run(&db, &args).await?,
            Command::Api(args) => serve_api::run(&db, args).await?,
            Command::Keys { command } => keys::run(&db, command).await?,
            Command::Maintenance(args) => maintenance::run(&db, args).await?,
            Command::Machine(_) => unreachable!("the machine daemon returned above"),
        }
        Ok(())
    })
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
