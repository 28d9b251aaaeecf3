//! `holdfast up`: single-host mode. One process runs everything on the
//! embedded Postgres (`.holdfast/pg`, kept between runs) or on
//! `HOLDFAST_DATABASE_URL`: migrations, the HTTP API, `--workers N` worker
//! loops (each with its own name and its own database session, exactly as
//! separate `holdfast server worker` processes would be), and maintenance. It
//! prints the URL, a fresh API key and a command to try.
//!
//! With `--local-machine` it also runs a machine daemon for this host, so
//! agents can `run_command` here: the machine is registered on the first
//! such `up` and reused by later ones, each giving it a new token kept in
//! memory only (`.holdfast/local-machine` records which machine it is, see
//! [`LocalMachine`]); commands run in the directory `up` was started in,
//! with a clean environment (never `up`'s provider keys or database URL).
//!
//! Ctrl-C (SIGINT) or SIGTERM drains: workers finish or hand back their
//! steps, maintenance stops, the machine daemon stops claiming and lets
//! running commands finish (for up to the worker drain timeout) and report
//! their results; then the API stops and the embedded Postgres is stopped. A second Ctrl-C stops at once, as a crash would:
//! steps in flight run again from their last saved step on the next start.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use holdfast_api::ApiConfig;
use holdfast_db::connect::ConnectConfig;
use holdfast_db::store;
use holdfast_machine::command::{make_undumpable, SandboxArgs, LOCAL_STATE_DIR};
use holdfast_machine::Shutdown as MachineShutdown;
use holdfast_providers::egress::EgressPolicy;
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::database::Database;
use crate::local_machine::LocalMachine;
use crate::maintenance::MaintenanceArgs;
use crate::run_worker::WorkerArgs;
use crate::serve_api::{AttachmentQuotaArgs, ListenArgs, MetricsArgs};

#[derive(clap::Args)]
pub struct UpArgs {
    /// Worker loops to run in this process (each claims on its own session).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// The project the printed API key belongs to (created if needed).
    #[arg(long, default_value = "default")]
    project: String,
    /// Also run a machine daemon for this host, so agents can run_command
    /// here (registered once, reused by later `up`s in this directory).
    #[arg(long)]
    local_machine: bool,
    /// The local machine's name when it is registered (default: this
    /// host's name).
    #[arg(long, requires = "local_machine")]
    local_machine_name: Option<String>,
    /// Also give the local machine's commands this variable of `up`'s
    /// environment (repeatable). Commands get only PATH, HOME, LANG, TERM,
    /// USER and these: never the provider keys or the database URL unless
    /// named here (and the sandbox keeps `up`'s process and files out of
    /// their reach: docs/sandbox.md).
    #[arg(long = "pass-env", value_name = "NAME", requires = "local_machine")]
    pass_env: Vec<String>,
    /// The local machine's command sandbox (as `holdfast machine`'s).
    #[command(flatten)]
    sandbox: SandboxArgs,
    #[command(flatten)]
    listen: ListenArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
    #[command(flatten)]
    attachment_quotas: AttachmentQuotaArgs,
    #[command(flatten)]
    worker: WorkerArgs,
    #[command(flatten)]
    maintenance: MaintenanceArgs,
}

/// Where `--local-machine` records its machine and keeps its journal,
/// relative to the working directory.
const LOCAL_MACHINE_DIR: &str = ".holdfast/local-machine";

/// What each task was, for messages about it.
type Named = (String, Result<()>);

pub async fn run(db: Database, args: UpArgs, egress: Arc<EgressPolicy>) -> Result<()> {
    // This process holds the provider keys, the secret key and the database.
    make_undumpable()?;
    let outcome = serve(&db, args, egress).await;
    let database = db.close().await?;
    if outcome.is_ok() {
        println!("Holdfast stopped: workers drained, API closed, {database}.");
    }
    outcome
}

async fn serve(db: &Database, args: UpArgs, egress: Arc<EgressPolicy>) -> Result<()> {
    let sandbox = args.sandbox.settings()?;
    if args.local_machine && sandbox.is_none() {
        anyhow::ensure!(
            !nix::unistd::geteuid().is_root(),
            "--local-machine --sandbox none as root would run every command as root, next to \
             this process's provider keys, secret key and database: run `up` as an unprivileged \
             user, or keep the sandbox (docs/sandbox.md)"
        );
        eprintln!(
            "warning: --sandbox none: the local machine's commands run unsandboxed, as this user: \
             they can read this process's provider keys, secret key and database (docs/sandbox.md)"
        );
    }
    db.migrate().await?;
    args.attachment_quotas.record(db).await?;
    let worker_settings = args.worker.settings(egress.clone())?;
    let maintenance_settings = args.maintenance.settings(egress.clone());
    let listen = args.listen.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let providers = crate::run_worker::providers(egress.clone())?;
    let (key, machine) = {
        let (client, connection) = db.config.connect().await?;
        let connection = tokio::spawn(connection);
        let key = store::create_api_key(&client, &args.project).await?;
        let machine = match args.local_machine {
            true => Some(
                LocalMachine::ensure(
                    &client,
                    key.project_id,
                    Path::new(LOCAL_MACHINE_DIR),
                    args.local_machine_name.as_deref(),
                )
                .await?,
            ),
            false => None,
        };
        drop(client);
        let _ = connection.await;
        (key, machine)
    };

    // Workers and maintenance stop on `shutdown`; the API too, unless a
    // machine daemon runs: then the API stops when the daemon has stopped,
    // so the results of its last commands still reach it.
    let shutdown = CancellationToken::new();
    let api_shutdown = match machine {
        Some(_) => CancellationToken::new(),
        None => shutdown.clone(),
    };
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut tasks: JoinSet<Named> = JoinSet::new();
    {
        let config = ApiConfig {
            metrics_token: args.metrics.token(),
            secret_key: providers.settings().secret_key.clone(),
            egress,
            group_commit: args.worker.group_commit.settings(),
            ..ApiConfig::new(db.config.clone())
        };
        let shutdown = api_shutdown.clone();
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

    if let Some(machine) = &machine {
        // `.holdfast/` (the embedded Postgres, the machine's journal) is
        // in the work directory: commands never see it.
        let settings = machine.settings(
            &loopback_url(addr),
            Path::new("."),
            args.pass_env.clone(),
            sandbox,
            vec![Path::new(LOCAL_STATE_DIR).to_path_buf()],
        );
        let stop = MachineShutdown {
            stop: shutdown.clone(),
            abort: CancellationToken::new(),
        };
        let drain = worker_settings.drain_timeout;
        let (config, project, id) = (db.config.clone(), key.project_id, machine.id);
        let api_shutdown = api_shutdown.clone();
        tasks.spawn(async move {
            let (stopping, abort) = (stop.stop.clone(), stop.abort.clone());
            let daemon = holdfast_machine::run(settings, stop);
            tokio::pin!(daemon);
            // On Ctrl-C the daemon claims nothing more; the commands it
            // runs get the workers' drain time to finish and report through
            // the API. Then the API stops, which ends the daemon's claim in
            // flight, and the daemon stops (its journal keeps anything
            // left, for the next start).
            let ran = tokio::select! {
                ran = &mut daemon => ran,
                () = async {
                    stopping.cancelled().await;
                    let deadline = tokio::time::Instant::now() + drain;
                    commands_reported(&config, project, id, deadline).await;
                    api_shutdown.cancel();
                    tokio::time::sleep_until(deadline).await;
                } => {
                    abort.cancel();
                    daemon.await
                }
            };
            api_shutdown.cancel();
            ("the machine daemon".to_owned(), ran)
        });
    }

    print_banner(
        db,
        addr,
        &key.key,
        &args.project,
        &worker_names,
        maintenance_settings.interval,
        machine.as_ref(),
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

/// Wait until every command `machine` accepted has its result recorded,
/// or until `deadline`. A database that cannot be asked ends the wait.
async fn commands_reported(
    config: &ConnectConfig,
    project: Uuid,
    machine: Uuid,
    deadline: tokio::time::Instant,
) {
    let Ok((client, connection)) = config.connect().await else {
        return;
    };
    let connection = tokio::spawn(connection);
    while tokio::time::Instant::now() < deadline {
        let Ok(machines) = store::list_machines(&client, project).await else {
            break;
        };
        let running = machines
            .iter()
            .find(|m| m.id == machine)
            .and_then(|m| m.running_commands.as_array())
            .is_some_and(|commands| !commands.is_empty());
        if !running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(client);
    let _ = connection.await;
}

/// The model the banner's agent uses, and the key `up` found for it
/// (Anthropic's first, as the worker's `default` endpoint has both).
fn provider_with_key() -> Option<(&'static str, &'static str)> {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if set("ANTHROPIC_API_KEY") {
        Some(("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"))
    } else if set("OPENAI_API_KEY") {
        Some(("openai/gpt-4.1", "OPENAI_API_KEY"))
    } else {
        None
    }
}

/// How to run this binary from a shell: `holdfast` when that name on PATH
/// is this binary (`cargo install`), else its full path (`cargo run`).
fn this_binary() -> String {
    let Ok(me) = std::env::current_exe().and_then(|p| p.canonicalize()) else {
        return "holdfast".to_owned();
    };
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("holdfast"))
            .find(|p| p.is_file())
            .and_then(|p| p.canonicalize().ok())
    });
    if on_path.as_ref() == Some(&me) {
        "holdfast".to_owned()
    } else {
        me.display().to_string()
    }
}

/// The API's URL as this host reaches it (a wildcard listen address is
/// reached on loopback).
fn loopback_url(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

fn print_banner(
    db: &Database,
    addr: SocketAddr,
    key: &str,
    project: &str,
    workers: &[String],
    maintenance_interval: Duration,
    machine: Option<&LocalMachine>,
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
    if let Some(psql) = db.psql_command() {
        println!("  Postgres {psql}");
    }
    println!("  API key  {key}");
    println!("           (project {project:?}; shown once: every `up` prints a new one, old ones stay valid)");
    if let Some(machine) = machine {
        let here = std::env::current_dir()
            .map_or_else(|_| ".".to_owned(), |dir| dir.display().to_string());
        println!(
            "  Machine  {}   (this host, id {})",
            machine.name, machine.id
        );
        println!(
            "           (run_command runs `sh -c` in {here}; journal in {})",
            machine.state_dir.display()
        );
    }
    let (model, found) = match provider_with_key() {
        Some((model, key)) => (model, Some(key)),
        None => ("anthropic/claude-sonnet-4-5", None),
    };
    let bin = this_binary();
    let url = loopback_url(addr);
    println!();
    match found {
        Some(variable) => {
            println!("Model calls: {variable} is set, so the agent below uses {model}.")
        }
        None => println!(
            "Model calls: neither ANTHROPIC_API_KEY nor OPENAI_API_KEY is set, so calls to the \
             hosted APIs will fail with authentication_error. Set one and restart, or add an \
             endpoint of a compatible server (`{bin} endpoints add`)."
        ),
    }
    println!();
    println!("Try it from another terminal:");
    println!("  export HOLDFAST_URL={url} HOLDFAST_API_KEY={key}");
    match machine {
        Some(machine) => {
            println!(
                "  AGENT=$({bin} agents create --model {model} --tool '{{\"type\": \"run_command\", \"machine\": \"{}\"}}' -q)",
                machine.name
            );
            println!(
                "  {bin} send \"$AGENT\" \"Run uname -a and tell me what you see\" && {bin} tail \"$AGENT\" --until turn.completed"
            );
        }
        None => {
            println!("  AGENT=$({bin} agents create --model {model} -q)");
            println!(
                "  {bin} send \"$AGENT\" \"Hello\" && {bin} tail \"$AGENT\" --until turn.completed"
            );
        }
    }
    println!();
    println!("Ctrl-C drains the workers and stops; a second Ctrl-C stops at once.");
}
