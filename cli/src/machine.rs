//! `holdfast machine`: the machine daemon. It talks to the API over HTTP
//! with the machine's token and needs no database. The first SIGTERM/SIGINT
//! stops claiming and lets running commands finish and report; a second
//! one exits at once (the journal covers what was left).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use holdfast_engine::duration::parse_duration;
use holdfast_worker::machine::{self, Settings, Shutdown};

#[derive(Args)]
pub struct MachineArgs {
    /// The Holdfast API's root URL.
    #[arg(
        long = "api",
        env = "HOLDFAST_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    api: String,
    /// The machine's token (`hfm_…`, from `POST /v1/machines`).
    #[arg(long = "token", env = "HOLDFAST_MACHINE_TOKEN", hide_env_values = true)]
    token: String,
    /// Where the daemon keeps its journal of accepted commands.
    #[arg(
        long = "state-dir",
        env = "HOLDFAST_MACHINE_STATE_DIR",
        default_value = ".holdfast/machine"
    )]
    state_dir: PathBuf,
    /// The directory commands run in.
    #[arg(
        long = "work-dir",
        env = "HOLDFAST_MACHINE_WORK_DIR",
        default_value = "."
    )]
    work_dir: PathBuf,
    /// Time between heartbeats (keep it well under the server's
    /// HOLDFAST_MACHINE_OFFLINE_AFTER, 30s).
    #[arg(long = "heartbeat-interval", env = "HOLDFAST_MACHINE_HEARTBEAT_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    heartbeat_interval: Duration,
    /// How long one claim waits for a command (at most 20s).
    #[arg(long = "claim-wait", env = "HOLDFAST_MACHINE_CLAIM_WAIT", default_value = "20s", value_parser = parse_duration)]
    claim_wait: Duration,
    /// Commands run at once.
    #[arg(
        long = "concurrency",
        env = "HOLDFAST_MACHINE_CONCURRENCY",
        default_value_t = 4
    )]
    concurrency: usize,
    /// Bytes kept of each of a command's stdout and stderr (the first and
    /// last halves; the rest is marked truncated).
    #[arg(
        long = "max-output-bytes",
        env = "HOLDFAST_MACHINE_MAX_OUTPUT_BYTES",
        default_value_t = 100 * 1024
    )]
    max_output_bytes: usize,
}

pub async fn run(args: MachineArgs) -> Result<()> {
    let settings = Settings {
        api_url: args.api,
        token: args.token,
        state_dir: args.state_dir,
        work_dir: args.work_dir,
        heartbeat_interval: args.heartbeat_interval,
        claim_wait: args.claim_wait,
        concurrency: args.concurrency,
        max_output_bytes: args.max_output_bytes,
    };
    let shutdown = Shutdown::default();
    stop_on_signals(shutdown.clone())?;
    machine::run(settings, shutdown).await
}

/// The first SIGTERM/SIGINT stops claiming; the second aborts.
fn stop_on_signals(shutdown: Shutdown) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        tracing::info!("stopping: no new commands; running ones finish (signal again to exit now)");
        shutdown.stop.cancel();
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        tracing::info!("exiting now");
        shutdown.abort.cancel();
    });
    Ok(())
}
