//! `holdfast up`: single-host mode. One process runs everything on the
//! embedded Postgres (`.holdfast/pg`, kept between runs) or on
//! `HOLDFAST_DATABASE_URL`: migrations, the HTTP API, `--workers N` worker
//! loops (each with its own name and its own database session, exactly as
//! separate `holdfast worker` processes would be), and maintenance. It
//! prints the URL, a fresh API key and a command to try.
//!
//! Ctrl-C (SIGINT) or SIGTERM drains: the API stops accepting, workers
//! finish or hand back their steps, maintenance stops; then the embedded
//! Postgres is stopped. A second Ctrl-C stops at once, as a crash would:
//! steps in flight run again from their last saved step on the next start.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use holdfast_api::ApiConfig;
use holdfast_engine::provider::Providers;
use holdfast_engine::store;
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinSet;
use tokio_postgres::NoTls;
use tokio_util::sync::CancellationToken;

use crate::database::Database;
use crate::maintenance::MaintenanceArgs;
use crate::run_worker::WorkerArgs;

#[derive(clap::Args)]
pub struct UpArgs {
    /// Worker loops to run in this process (each claims on its own session).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// The project the printed API key belongs to (created if needed).
    #[arg(long, default_value = "default")]
    project: String,
    #[command(flatten)]
    worker: WorkerArgs,
    /// Maintenance and webhook settings, and `--listen` for the API.
    #[command(flatten)]
    maintenance: MaintenanceArgs,
}

/// What each task was, for messages about it.
type Named = (String, Result<()>);

pub async fn run(db: Database, args: UpArgs) -> Result<()> {
    let outcome = serve(&db, args).await;
    db.close().await?;
    if outcome.is_ok() {
        println!("Holdfast stopped: workers drained, API closed, database closed.");
    }
    outcome
}

async fn serve(db: &Database, args: UpArgs) -> Result<()> {
    db.migrate().await?;
    let worker_settings = args.worker.settings()?;
    let maintenance_settings = args.maintenance.settings();
    let listen: SocketAddr = args.maintenance.listen().parse().with_context(|| {
        format!(
            "HOLDFAST_LISTEN {:?} is not an address:port",
            args.maintenance.listen()
        )
    })?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let providers = Arc::new(Providers::from_env()?);
    let key = {
        let (client, connection) = db.config.connect(NoTls).await?;
        let connection = tokio::spawn(connection);
        let created = store::create_api_key(&client, &args.project).await?;
        drop(client);
        let _ = connection.await;
        created
    };

    let shutdown = CancellationToken::new();
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut tasks: JoinSet<Named> = JoinSet::new();
    {
        let (config, shutdown) = (ApiConfig::new(db.config.clone()), shutdown.clone());
        tasks.spawn(async move {
            let served = holdfast_api::serve(config, listener, shutdown).await;
            ("the API".to_owned(), served.map_err(Into::into))
        });
    }
    let mut worker_names = Vec::new();
    for i in 1..=args.workers {
        let mut settings = worker_settings.clone();
        settings.name = format!("{}-w{i}", worker_settings.name);
        worker_names.push(settings.name.clone());
        let (config, providers, shutdown) =
            (db.config.clone(), providers.clone(), shutdown.clone());
        tasks.spawn(async move {
            let name = format!("worker {}", settings.name);
            let ran = holdfast_worker::worker::run(settings, config, providers, shutdown).await;
            (name, ran.map_err(Into::into))
        });
    }
    {
        let (settings, config, shutdown) = (
            maintenance_settings.clone(),
            db.config.clone(),
            shutdown.clone(),
        );
        tasks.spawn(async move {
            let ran = holdfast_worker::maintenance::run(settings, config, shutdown).await;
            ("maintenance".to_owned(), ran)
        });
    }

    print_banner(
        db,
        addr,
        &key.key,
        &args.project,
        &worker_names,
        maintenance_settings.interval,
    );

    // Every task runs until shutdown; one that ends before (it failed)
    // stops the others, so `up` never runs half a system.
    let mut failure: Option<anyhow::Error> = None;
    loop {
        let signalled = tokio::select! {
            joined = tasks.join_next() => {
                let Some(joined) = joined else { break };
                let (name, result) = joined.context("a task panicked")?;
                if let Err(e) = result {
                    eprintln!("{name} failed: {e:#}");
                    failure.get_or_insert(e.context(format!("{name} failed")));
                }
                if !shutdown.is_cancelled() {
                    eprintln!("{name} stopped; stopping the rest");
                    shutdown.cancel();
                }
                false
            }
            _ = interrupt.recv() => true,
            _ = terminate.recv() => true,
        };
        if signalled && !shutdown.is_cancelled() {
            eprintln!("stopping: draining workers (Ctrl-C again to stop at once)");
            shutdown.cancel();
        } else if signalled {
            eprintln!("stopping now; steps in flight run again from their last saved step on the next start");
            tasks.abort_all();
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn print_banner(
    db: &Database,
    addr: SocketAddr,
    key: &str,
    project: &str,
    workers: &[String],
    maintenance_interval: std::time::Duration,
) {
    let url = format!("http://{addr}");
    println!("Holdfast is up on {}.", db.location());
    println!(
        "  {} worker loop(s): {}; maintenance every {maintenance_interval:?}",
        workers.len(),
        workers.join(", ")
    );
    println!();
    println!("  API      {url}   (the contract: {url}/openapi.json)");
    println!("  API key  {key}");
    println!("           (project {project:?}; shown once: every `up` prints a new one, old ones stay valid)");
    println!();
    println!("Try it from another terminal:");
    println!("  export HOLDFAST_URL={url} HOLDFAST_API_KEY={key}");
    println!(
        "  curl -s -H \"Authorization: Bearer $HOLDFAST_API_KEY\" -H 'content-type: application/json' \\"
    );
    println!(
        "       -d '{{\"model\": {{\"provider\": \"anthropic\", \"name\": \"claude-sonnet-4-5\"}}}}' $HOLDFAST_URL/v1/agents"
    );
    println!("  holdfast send AGENT_ID \"Hello\" && holdfast tail AGENT_ID --until turn.completed");
    let keys: Vec<&str> = ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]
        .into_iter()
        .filter(|name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty()))
        .collect();
    if keys.is_empty() {
        println!();
        println!(
            "Neither ANTHROPIC_API_KEY nor OPENAI_API_KEY is set: model calls to the hosted APIs will \
             fail with authentication_error. Set one, or give agents a `base_url` of a compatible server."
        );
    }
    println!();
    println!("Ctrl-C drains the workers and stops; a second Ctrl-C stops at once.");
}
