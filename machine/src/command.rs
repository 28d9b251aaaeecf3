//! The daemon's command line (`holdfast-machine`, and `holdfast machine
//! run`): it talks to the API over HTTP with the machine's token and needs
//! no database. The first SIGTERM/SIGINT stops claiming and lets running
//! commands finish and report; a second one exits at once (the journal
//! covers what was left).
//!
//! `holdfast up --local-machine` runs the same daemon inside `up` for this
//! host, with the same sandbox flags ([`SandboxArgs`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use holdfast_wire::duration::parse_duration;

use crate::limits::Limits;
use crate::sandbox::{CommandNetwork, SandboxSettings};
use crate::{Settings, Shutdown};

/// What `up` (its embedded Postgres, its local machine) and the daemon by
/// default keep in their working directory: never shown to a command.
pub const LOCAL_STATE_DIR: &str = ".holdfast";

#[derive(Args)]
pub struct MachineArgs {
    /// The Holdfast API's root URL.
    #[arg(
        long = "url",
        alias = "api",
        value_name = "URL",
        env = "HOLDFAST_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    api: String,
    /// The machine's token (`hfm_…`, from `POST /v1/machines`). Prefer
    /// --token-file: a value given here or in the environment stays
    /// readable in the daemon's /proc/PID/cmdline and /proc/PID/environ by
    /// this user's processes.
    #[arg(long = "token", env = "HOLDFAST_MACHINE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file holding the machine's token (mode 0600 or stricter); read
    /// once at start and closed.
    #[arg(long = "token-file", env = "HOLDFAST_MACHINE_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Also give commands this variable of the daemon's environment
    /// (repeatable). Commands get only PATH, LANG, TERM, USER, these and
    /// HOME (set to their work directory in the sandbox).
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
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
    /// While this daemon heartbeats, refuse another daemon process's start
    /// for this machine (by default a new start takes the machine over,
    /// and the agents with commands on it get `machine.session_replaced`).
    /// A restart of this daemon then waits until its previous process has
    /// been silent for the server's offline window (30s).
    #[arg(long = "single-session", env = "HOLDFAST_MACHINE_SINGLE_SESSION")]
    single_session: bool,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// How commands are sandboxed: the same flags for `holdfast machine` and
/// `holdfast up --local-machine` (docs/sandbox.md).
#[derive(Args, Clone)]
pub struct SandboxArgs {
    /// `bubblewrap`: every command runs in its own namespaces with no
    /// capabilities, a seccomp filter, only the system directories and
    /// its work directory, and limits (docs/sandbox.md); the daemon
    /// refuses to start when the sandbox cannot be made. `none`: commands
    /// run as this user, with everything this user can reach, the machine
    /// token included.
    #[arg(long = "sandbox", env = "HOLDFAST_MACHINE_SANDBOX", value_enum, default_value_t = SandboxKind::Bubblewrap)]
    kind: SandboxKind,
    /// `full`: the host's network, its loopback services included. `none`:
    /// a network namespace of the command's own, with loopback only.
    #[arg(long = "command-network", env = "HOLDFAST_MACHINE_COMMAND_NETWORK", value_enum, default_value_t = NetworkKind::Full)]
    network: NetworkKind,
    /// CPU seconds a command may use, all its processes together (per
    /// process where the machine has no cgroups for commands).
    #[arg(
        long = "command-cpu-secs",
        env = "HOLDFAST_MACHINE_COMMAND_CPU_SECS",
        default_value_t = 1800
    )]
    cpu_secs: u64,
    /// Memory a command may use in MiB, all its processes together (the
    /// address space of each process where there are no cgroups).
    #[arg(
        long = "command-memory-mib",
        env = "HOLDFAST_MACHINE_COMMAND_MEMORY_MIB",
        default_value_t = 2048
    )]
    memory_mib: u64,
    /// Processes (and threads) a command may have at once.
    #[arg(
        long = "command-processes",
        env = "HOLDFAST_MACHINE_COMMAND_PROCESSES",
        default_value_t = 512
    )]
    processes: u64,
    /// A host path commands may read (repeatable): e.g. a toolchain
    /// outside /usr. The sandbox shows only /usr, /bin, /lib*, part of
    /// /etc and the work directory otherwise.
    #[arg(long = "command-read-only", value_name = "PATH")]
    read_only: Vec<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SandboxKind {
    Bubblewrap,
    None,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum NetworkKind {
    Full,
    None,
}

impl SandboxArgs {
    /// The daemon's sandbox settings; `None` for `--sandbox none`.
    pub fn settings(&self) -> Result<Option<SandboxSettings>> {
        if self.kind == SandboxKind::None {
            return Ok(None);
        }
        let memory_bytes = self
            .memory_mib
            .checked_mul(1024 * 1024)
            .context("--command-memory-mib is too large")?;
        Ok(Some(SandboxSettings {
            network: match self.network {
                NetworkKind::Full => CommandNetwork::Full,
                NetworkKind::None => CommandNetwork::None,
            },
            limits: Limits::new(
                Duration::from_secs(self.cpu_secs),
                memory_bytes,
                self.processes,
            ),
            read_only: self.read_only.clone(),
        }))
    }
}

/// Keep this process's memory and /proc files (environ, cmdline, mem)
/// from every other process of the same user: it holds the machine token,
/// and inside `up` the provider keys and the database.
pub fn make_undumpable() -> Result<()> {
    nix::sys::prctl::set_dumpable(false).context("prctl(PR_SET_DUMPABLE, 0)")
}

pub async fn run(args: MachineArgs) -> Result<()> {
    make_undumpable()?;
    let token = match (args.token, args.token_file.clone()) {
        (Some(_), Some(_)) => {
            bail!("give the machine token by --token or by --token-file, not both")
        }
        (Some(token), None) => token,
        (None, Some(path)) => read_token_file(&path)?,
        (None, None) => bail!(
            "the machine token is missing: --token-file PATH (or HOLDFAST_MACHINE_TOKEN_FILE), \
             or --token (HOLDFAST_MACHINE_TOKEN)"
        ),
    };
    let sandbox = args.sandbox.settings()?;
    let settings = Settings {
        sandbox,
        // The token file, and `.holdfast/` of the work directory (an
        // `up`'s embedded Postgres and journals may be there).
        hidden_paths: args
            .token_file
            .iter()
            .cloned()
            .chain([args.work_dir.join(LOCAL_STATE_DIR)])
            .collect(),
        single_session: args.single_session,
        api_url: args.api,
        token,
        pass_env: args.pass_env,
        state_dir: args.state_dir,
        work_dir: args.work_dir,
        heartbeat_interval: args.heartbeat_interval,
        claim_wait: args.claim_wait,
        concurrency: args.concurrency,
        max_output_bytes: args.max_output_bytes,
    };
    let shutdown = Shutdown::default();
    stop_on_signals(shutdown.clone())?;
    crate::run(settings, shutdown).await
}

/// The token in `path`, trimmed. A file other users may read is refused:
/// the token would be theirs too.
fn read_token_file(path: &Path) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let metadata =
        std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "{} is readable by other users (mode {mode:o}); chmod 600 it",
            path.display()
        );
    }
    let token = std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_owned();
    if token.is_empty() {
        bail!("{} holds no token", path.display());
    }
    Ok(token)
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
