//! `holdfast-machine`: the machine daemon on its own, for the hosts agents
//! run commands on. The same daemon as `holdfast machine run`, without the
//! server, the database driver or the CLI around it.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use holdfast_machine::command::{self, MachineArgs};
use holdfast_telemetry::Telemetry;

/// The Holdfast machine daemon: claims this machine's commands over HTTP
/// (with its token) and runs them, until SIGTERM/SIGINT.
#[derive(Parser)]
#[command(name = "holdfast-machine", version)]
struct Cli {
    /// Log filter (e.g. `info`, `holdfast_machine=debug`).
    #[arg(long = "log", env = "HOLDFAST_LOG", default_value = "info")]
    log: String,
    /// Log as JSON lines.
    #[arg(long = "log-json")]
    log_json: bool,
    /// A PEM file of CA certificates to trust for the API and the OTLP
    /// collector, on top of the operating system's.
    #[arg(long = "ca-bundle", env = "HOLDFAST_CA_BUNDLE")]
    ca_bundle: Option<std::path::PathBuf>,
    #[command(flatten)]
    daemon: MachineArgs,
}

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
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if cli.log_json {
        logs.json().init();
    } else {
        logs.init();
    }
    holdfast_outbound::crypto_provider();
    holdfast_outbound::configure(cli.ca_bundle.as_deref())?;
    // Before the runtime: the exporter's blocking HTTP client must not be
    // built on one.
    let telemetry = Telemetry::from_env(|name| std::env::var(name).ok())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(command::run(cli.daemon));
    telemetry.shutdown();
    result
}
