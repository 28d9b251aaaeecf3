//! `holdfast machine`: the machine daemon. It talks to the API over HTTP
//! with the machine's token and needs no database. The first SIGTERM/SIGINT
//! stops claiming and lets running commands finish and report; a second
//! one exits at once (the journal covers what was left).
//!
//! `holdfast up --local-machine` runs the same daemon inside `up` for this
//! host ([`LocalMachine`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use holdfast_engine::domain::MachineRegistered;
use holdfast_engine::duration::parse_duration;
use holdfast_engine::store;
use holdfast_worker::machine::{self, Settings, Shutdown};
use serde_json::{json, Value};
use tokio_postgres::GenericClient;
use uuid::Uuid;

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

/// This host's name as a machine name (letters, digits, `.`, `_`, `-`; at
/// most 100; starting with a letter or digit), or `local` when the host
/// name is unknown or has nothing usable.
pub fn host_machine_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(100)
        .collect();
    if name.is_empty() {
        "local".to_owned()
    } else {
        name
    }
}

/// The machine `holdfast up --local-machine` runs a daemon for: registered
/// once, then reused by every later `up` in the same directory. Its token
/// is shown nowhere and stored only as a hash in the database, so `up`
/// keeps it in `credential.json` (mode 0600) in its directory; each
/// machine's journal is a subdirectory named after its id, so a journal
/// never meets another machine's token.
pub struct LocalMachine {
    pub id: Uuid,
    pub name: String,
    token: String,
    /// The daemon's journal directory.
    pub state_dir: PathBuf,
}

const CREDENTIAL_FILE: &str = "credential.json";

impl LocalMachine {
    /// The machine of `project` whose credential `dir` holds, if the
    /// database still knows its token (and its name is `name`, when one is
    /// asked for); otherwise a newly registered one named `name` (default:
    /// this host's name), whose credential replaces the old one.
    pub async fn ensure(
        client: &impl GenericClient,
        project: Uuid,
        dir: &Path,
        name: Option<&str>,
    ) -> Result<LocalMachine> {
        let credential = dir.join(CREDENTIAL_FILE);
        if let Some((saved_name, token)) = read_credential(&credential)? {
            let known = store::authenticate_machine(client, &token).await?;
            let wanted = name.is_none_or(|name| name == saved_name);
            if let Some(known) = known.filter(|k| k.project_id == project && wanted) {
                return Ok(LocalMachine {
                    id: known.machine_id,
                    state_dir: dir.join(known.machine_id.to_string()),
                    name: saved_name,
                    token,
                });
            }
        }
        let name = name.map_or_else(host_machine_name, str::to_owned);
        let registered = match store::register_machine(client, project, &name, None).await {
            Ok(registered) => registered,
            Err(holdfast_engine::Error::Conflict(_)) => bail!(
                "this project already has a machine named {name:?}, but its token is not in {}; \
                 pick another name with --local-machine-name",
                credential.display()
            ),
            Err(e) => return Err(e.into()),
        };
        write_credential(&credential, project, &registered)?;
        Ok(LocalMachine {
            id: registered.machine_id,
            state_dir: dir.join(registered.machine_id.to_string()),
            name: registered.name,
            token: registered.token,
        })
    }

    /// Daemon settings for this machine: the API at `api_url`, commands
    /// run in `work_dir`, the rest as `holdfast machine`'s defaults.
    pub fn settings(&self, api_url: &str, work_dir: &Path) -> Settings {
        Settings {
            api_url: api_url.to_owned(),
            token: self.token.clone(),
            state_dir: self.state_dir.clone(),
            work_dir: work_dir.to_path_buf(),
            ..Settings::default()
        }
    }
}

/// (name, token) from a credential file; `None` when there is none.
fn read_credential(path: &Path) -> Result<Option<(String, String)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!(e).context(format!("reading {}", path.display()))),
    };
    let saved: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON; remove it to register anew", path.display()))?;
    match (saved["name"].as_str(), saved["token"].as_str()) {
        (Some(name), Some(token)) => Ok(Some((name.to_owned(), token.to_owned()))),
        _ => bail!(
            "{} lacks a name or a token; remove it to register anew",
            path.display()
        ),
    }
}

/// Write a machine's credential, readable by this user only, replacing
/// any previous one whole (a temporary file renamed over it).
fn write_credential(path: &Path, project: Uuid, machine: &MachineRegistered) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let document = json!({
        "project_id": project,
        "machine_id": machine.machine_id,
        "name": machine.name,
        "token": machine.token,
    });
    let temporary = path.with_extension("json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .with_context(|| format!("writing {}", temporary.display()))?;
    file.write_all(serde_json::to_string_pretty(&document)?.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
