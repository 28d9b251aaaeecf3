//! The machine daemon (`holdfast-machine`, or `holdfast machine run`): runs on a user's machine, talks
//! to the Holdfast API with the machine's token, and runs the commands
//! agents ask for (`run_command`), each at most once.
//!
//! - On start it reads its journal ([`journal`]): results not yet
//!   acknowledged are resent; a command whose process (started by the
//!   previous run) is still alive is watched until it ends; any other
//!   unfinished command is reported `unknown` — it may have run, so it is
//!   never run again. Then its first heartbeat (`started`, a new session
//!   id, every command its journal holds) takes the machine over.
//! - It heartbeats every `heartbeat_interval` with the state of each
//!   journaled command (the server keeps it as their last known state).
//!   The answer names the commands whose tool calls were cancelled: each is
//!   stopped (SIGTERM to its process group, SIGKILL after
//!   [`exec::STOP_GRACE`]) and its result reported as any other. A
//!   cancelled command is never handed out again, and a restarted daemon
//!   runs nothing of its journal again, so it never runs twice.
//! - It long-polls for commands with as many free slots as it has; each
//!   command returned is journaled before its process starts ([`exec`]).
//! - While a command runs, what it prints is relayed every 250 ms
//!   ([`live`]), bounded, best effort: the agent's stream shows it live.
//! - Each result is journaled, then posted until the server acknowledges
//!   it (resending is safe: the same result again changes nothing).
//!
//! Commands run in process groups of their own, as children of the daemon,
//! never of a worker: a worker that dies does not touch them, and neither
//! does a signal sent to the daemon alone.
//!
//! Shutdown: the first SIGTERM/SIGINT stops claiming; running commands
//! finish and their results are delivered, heartbeats going on meanwhile.
//! A second signal exits at once; the journal covers what was left.

pub mod client;
pub mod command;
pub mod exec;
pub mod journal;
pub mod limits;
pub mod live;
pub mod sandbox;
mod spans;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{anyhow, Context};
use holdfast_outbound::backoff::Backoff;
use holdfast_wire::config::CommandWorkspace;
use holdfast_wire::domain::{ClaimedCommand, CommandResult, Heartbeat};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use client::{ApiClient, CallError};
use journal::{Entry, Journal, Process};
use sandbox::{Sandbox, SandboxSettings};

/// A result body the API accepts with its default limit (1 MiB), with room
/// to spare. Larger results are cut to fit before they are journaled, so a
/// resend is byte for byte the same.
pub const RESULT_BODY_LIMIT: usize = 1024 * 1024 - 16 * 1024;
/// The longest long-poll the API grants.
pub const MAX_CLAIM_WAIT: Duration = Duration::from_secs(20);

/// How the daemon runs (`holdfast machine` flags and env).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The API's root URL (`HOLDFAST_URL`).
    pub api_url: String,
    /// The machine's token, `hfm_…` (`HOLDFAST_MACHINE_TOKEN`).
    pub token: String,
    /// Where the journal lives (`HOLDFAST_MACHINE_STATE_DIR`).
    pub state_dir: PathBuf,
    /// Where commands run (`HOLDFAST_MACHINE_WORK_DIR`).
    pub work_dir: PathBuf,
    pub heartbeat_interval: Duration,
    /// How long one claim long-polls (at most [`MAX_CLAIM_WAIT`]).
    pub claim_wait: Duration,
    /// Commands run at once.
    pub concurrency: usize,
    /// Bytes kept of each of stdout and stderr (the first and last halves).
    pub max_output_bytes: usize,
    /// Variables of the daemon's environment commands also get, beyond
    /// [`exec::BASE_ENVIRONMENT`] (`--pass-env NAME`).
    pub pass_env: Vec<String>,
    /// The sandbox commands run in; `None` runs them unsandboxed, as the
    /// daemon's user (`--sandbox none`).
    pub sandbox: Option<SandboxSettings>,
    /// Host paths no command may see, beyond the state directory (the
    /// token file, `.holdfast/` under `up`), even inside the work directory.
    pub hidden_paths: Vec<PathBuf>,
    /// While this daemon heartbeats, another session's start is refused
    /// instead of taking the machine over (`--single-session`).
    pub single_session: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            api_url: "http://127.0.0.1:8080".into(),
            token: String::new(),
            state_dir: PathBuf::from(".holdfast/machine"),
            work_dir: PathBuf::from("."),
            heartbeat_interval: Duration::from_secs(10),
            claim_wait: MAX_CLAIM_WAIT,
            concurrency: 4,
            max_output_bytes: 100 * 1024,
            pass_env: Vec::new(),
            sandbox: Some(SandboxSettings::default()),
            hidden_paths: Vec::new(),
            single_session: false,
        }
    }
}

/// How the daemon is told to stop.
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    /// Claim nothing more; let running commands finish and report.
    pub stop: CancellationToken,
    /// Exit now (the journal covers what was left).
    pub abort: CancellationToken,
}

/// Run the daemon until it is stopped. Errors when it cannot start (bad
/// settings, an unreadable journal, a refused token) or must give up (the
/// journal cannot be written, the token was refused, another daemon process
/// took the machine over).
pub async fn run(settings: Settings, shutdown: Shutdown) -> anyhow::Result<()> {
    anyhow::ensure!(settings.concurrency > 0, "concurrency must be at least 1");
    anyhow::ensure!(
        settings.claim_wait <= MAX_CLAIM_WAIT,
        "the claim wait must be at most {MAX_CLAIM_WAIT:?}"
    );
    anyhow::ensure!(
        settings.max_output_bytes > 0,
        "the output limit must be positive"
    );
    for name in &settings.pass_env {
        check_pass_env_name(name)?;
    }
    anyhow::ensure!(
        settings.work_dir.is_dir(),
        "the working directory {} does not exist",
        settings.work_dir.display()
    );
    let journal = Journal::open(&settings.state_dir)
        .with_context(|| format!("opening the journal in {}", settings.state_dir.display()))?;
    let sandbox = prepare_sandbox(&settings).await?;
    let daemon = Arc::new(Daemon {
        sandbox,
        client: ApiClient::new(&settings.api_url, &settings.token)?,
        command_environment: exec::command_environment(&settings.pass_env),
        session: Uuid::new_v4(),
        journal: Mutex::new(journal),
        results: Notify::new(),
        halt: shutdown.abort.child_token(),
        fatal: Mutex::new(None),
        slots: Arc::new(Semaphore::new(settings.concurrency)),
        stops: Mutex::default(),
        settings,
    });
    let mut running = JoinSet::new();
    daemon.recover(&mut running)?;
    daemon.announce_start().await;
    tracing::info!(session = %daemon.session, "machine daemon started");

    let heartbeats_stop = CancellationToken::new();
    let heartbeats = tokio::spawn(heartbeat_loop(daemon.clone(), heartbeats_stop.clone()));
    let work_done = CancellationToken::new();
    let results = tokio::spawn(result_loop(daemon.clone(), work_done.clone()));

    claim_loop(&daemon, &mut running, &shutdown.stop).await;
    tokio::select! {
        _ = async { while running.join_next().await.is_some() {} } => {}
        _ = daemon.halt.cancelled() => {}
    }
    work_done.cancel();
    let _ = results.await;
    heartbeats_stop.cancel();
    let _ = heartbeats.await;
    tracing::info!("machine daemon stopped");
    let fatal = daemon
        .fatal
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    match fatal {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

struct Daemon {
    settings: Settings,
    /// `None`: commands run unsandboxed (`--sandbox none`).
    sandbox: Option<Sandbox>,
    client: ApiClient,
    /// What every command's environment holds, read once at start.
    command_environment: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// This process's id for the server (a new one per start).
    session: Uuid,
    journal: Mutex<Journal>,
    /// A result was journaled: the result loop should send it.
    results: Notify,
    /// Cancelled by a second signal or a fatal error: everything stops.
    halt: CancellationToken,
    fatal: Mutex<Option<anyhow::Error>>,
    /// One permit per command running.
    slots: Arc<Semaphore>,
    /// How to stop each command running or watched, by id: a heartbeat's
    /// answer naming one (its tool call was cancelled) stops it.
    stops: Mutex<HashMap<Uuid, CancellationToken>>,
}

impl Daemon {
    fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stops(&self) -> MutexGuard<'_, HashMap<Uuid, CancellationToken>> {
        self.stops.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stop the commands a heartbeat's answer named (their tool calls were
    /// cancelled). One not running here yet is named again by the next
    /// heartbeat's answer, until its result is recorded.
    fn stop_cancelled(&self, cancelled: &[Uuid]) {
        let stops = self.stops();
        for id in cancelled {
            if let Some(stop) = stops.get(id) {
                if !stop.is_cancelled() {
                    tracing::info!(command = %id, "the command's tool call was cancelled: stopping it");
                    stop.cancel();
                }
            }
        }
    }

    /// Give up: keep the first reason, stop everything.
    fn fail(&self, error: anyhow::Error) {
        tracing::error!(error = %format!("{error:#}"), "machine daemon giving up");
        self.fatal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(error);
        self.halt.cancel();
    }

    /// Resolve what the previous run left in the journal: results stay to
    /// be resent, live processes are watched, the rest are unknown.
    fn recover(self: &Arc<Self>, running: &mut JoinSet<()>) -> anyhow::Result<()> {
        let unfinished: Vec<Entry> = self
            .journal()
            .entries()
            .filter(|e| e.result.is_none())
            .cloned()
            .collect();
        for entry in unfinished {
            let id = entry.command.id;
            match entry.process {
                Some(process) if exec::is_alive(&process) => {
                    tracing::info!(command = %id, pid = process.pid, "a command of the previous run is still running; watching it");
                    let permit = self.slots.clone().try_acquire_owned().ok();
                    running.spawn(watch_orphan(self.clone(), entry.command, process, permit));
                }
                _ => {
                    tracing::warn!(command = %id, "a command of the previous run has no process and no result: reporting it unknown");
                    self.journal()
                        .record_result(id, CommandResult::unknown())
                        .context("writing the journal")?;
                }
            }
        }
        Ok(())
    }

    /// The first heartbeat of this process: take the machine over and tell
    /// the server every command the journal holds. Retried until it is
    /// accepted (nothing may be claimed before it).
    async fn announce_start(&self) {
        let mut failures = 0;
        loop {
            let heartbeat = Heartbeat {
                session: self.session,
                started: true,
                commands: self.journal().report(),
                sandboxed: Some(self.sandbox.is_some()),
                single_session: self.settings.single_session,
            };
            match self.client.heartbeat(&heartbeat).await {
                Ok(cancelled) => {
                    self.stop_cancelled(&cancelled);
                    return;
                }
                Err(e @ (CallError::Unauthorized(_) | CallError::Rejected { .. })) => {
                    self.fail(e.into());
                    return;
                }
                Err(e) => {
                    failures += 1;
                    let wait = retry_delay(failures);
                    tracing::warn!(error = %e, retry_in = ?wait, "announcing the daemon's start");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.halt.cancelled() => return,
                    }
                }
            }
        }
    }

    /// Journal a command's result (cut to fit a request body) and wake the
    /// result loop.
    fn finish(&self, id: Uuid, result: CommandResult) {
        let result = fit_to_body(result, RESULT_BODY_LIMIT);
        match self.journal().record_result(id, result) {
            Ok(()) => self.results.notify_one(),
            Err(e) => self.fail(anyhow!(e).context("writing the journal")),
        }
    }
}

/// Claim commands while there are free slots, until `stop` (or a halt).
/// A claim in flight is not abandoned on `stop`: the commands it accepts
/// must reach the journal.
async fn claim_loop(daemon: &Arc<Daemon>, running: &mut JoinSet<()>, stop: &CancellationToken) {
    let mut failures = 0;
    loop {
        while running.try_join_next().is_some() {}
        let first = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = daemon.halt.cancelled() => return,
            permit = daemon.slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let mut permits = vec![first];
        while let Ok(permit) = daemon.slots.clone().try_acquire_owned() {
            permits.push(permit);
        }
        let claimed = tokio::select! {
            claimed = daemon.client.claim(daemon.session, daemon.settings.claim_wait, permits.len()) => claimed,
            _ = daemon.halt.cancelled() => return,
        };
        match claimed {
            Ok(commands) => {
                failures = 0;
                if commands.is_empty() {
                    continue;
                }
                if let Err(e) = daemon.journal().record_accepted(&commands) {
                    daemon.fail(anyhow!(e).context("journaling accepted commands"));
                    return;
                }
                for command in commands {
                    tracing::info!(command = %command.id, "accepted a command");
                    running.spawn(execute(daemon.clone(), command, permits.pop()));
                }
            }
            Err(e @ (CallError::Unauthorized(_) | CallError::Superseded(_))) => {
                daemon.fail(e.into());
                return;
            }
            Err(e) => {
                failures += 1;
                let wait = retry_delay(failures);
                tracing::warn!(error = %e, retry_in = ?wait, "claiming commands");
                drop(permits);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.cancelled() => return,
                    _ = daemon.halt.cancelled() => return,
                }
            }
        }
    }
}

/// Run one accepted command and journal its result.
async fn execute(
    daemon: Arc<Daemon>,
    command: ClaimedCommand,
    _slot: Option<OwnedSemaphorePermit>,
) {
    let id = command.id;
    let run = spans::start_command(&command);
    let handle = exec::RunHandle::default();
    daemon.stops().insert(id, handle.stop.clone());
    // Ends with the command: its result carries the whole output.
    let relay = tokio::spawn(live::relay(daemon.client.clone(), id, handle.live.clone()));
    let outcome = match workspace_dir(&daemon.settings.work_dir, &command) {
        Ok(dir) => {
            exec::run(
                &command,
                &dir,
                &daemon.command_environment,
                daemon.settings.max_output_bytes,
                daemon.sandbox.as_ref(),
                &handle,
                |process| daemon.journal().record_started(id, process),
            )
            .await
        }
        Err(e) => Err(e),
    };
    relay.abort();
    daemon.stops().remove(&id);
    spans::end_command(&run, outcome.as_ref().ok());
    match outcome {
        Ok(result) => {
            tracing::info!(command = %id, exit_code = ?result.exit_code, timed_out = result.timed_out, limit = ?result.limit, "command finished");
            daemon.finish(id, result);
        }
        Err(e) => {
            // Started or not, its outcome cannot be known now.
            tracing::error!(command = %id, error = %e, "running a command");
            daemon.finish(id, CommandResult::unknown());
        }
    }
}

/// Where agents' own directories are, under the work directory.
pub const AGENT_WORKSPACES: &str = "agent-workspaces";

/// The directory `command` runs in: the work directory, or (workspace
/// `agent`) its agent's own directory under it, made on first use and
/// private to this user. In the sandbox, that directory is all of the work
/// directory the command sees.
fn workspace_dir(work_dir: &Path, command: &ClaimedCommand) -> std::io::Result<PathBuf> {
    match command.workspace {
        CommandWorkspace::Machine => Ok(work_dir.to_path_buf()),
        CommandWorkspace::Agent => {
            use std::os::unix::fs::DirBuilderExt;
            let dir = work_dir
                .join(AGENT_WORKSPACES)
                .join(command.agent_id.to_string());
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)?;
            Ok(dir)
        }
    }
}

/// Watch a command whose process outlived the previous daemon run (and
/// stop it if its tool call is cancelled); its exit status is lost with
/// that run, so its result is `unknown`.
async fn watch_orphan(
    daemon: Arc<Daemon>,
    command: ClaimedCommand,
    process: Process,
    _slot: Option<OwnedSemaphorePermit>,
) {
    let id = command.id;
    let stop = CancellationToken::new();
    daemon.stops().insert(id, stop.clone());
    let deadline =
        process.started_at + chrono::Duration::seconds(i64::from(command.timeout_secs.max(1)));
    let ended = async {
        tokio::select! {
            _ = exec::wait_for_orphan(process, deadline) => {}
            _ = stop.cancelled() => exec::stop_orphan(process).await,
        }
    };
    tokio::select! {
        _ = ended => daemon.finish(id, CommandResult::unknown()),
        _ = daemon.halt.cancelled() => {}
    }
    daemon.stops().remove(&id);
}

/// Send journaled results until each is acknowledged. Ends once
/// `work_done` is cancelled and nothing is left to send, or on a halt.
async fn result_loop(daemon: Arc<Daemon>, work_done: CancellationToken) {
    let mut failures = 0;
    loop {
        let mut retry = false;
        let unsent = daemon.journal().unsent_results();
        for (id, result) in unsent {
            let sent = tokio::select! {
                sent = daemon.client.submit_result(id, &result) => sent,
                _ = daemon.halt.cancelled() => return,
            };
            let acknowledged = match sent {
                Ok(outcome) => {
                    tracing::info!(command = %id, ?outcome, "result acknowledged");
                    true
                }
                Err(CallError::TooLarge) => {
                    let size = json_len(&result);
                    daemon.finish(id, fit_to_body(result, size / 2));
                    false
                }
                Err(CallError::Rejected { status, message }) => {
                    tracing::warn!(command = %id, %status, %message, "the API refused a result; dropping it");
                    true
                }
                Err(e @ CallError::Unauthorized(_)) => {
                    daemon.fail(e.into());
                    return;
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(command = %id, error = %e, "sending a result");
                    retry = true;
                    break;
                }
            };
            if acknowledged {
                failures = 0;
                if let Err(e) = daemon.journal().forget(id) {
                    daemon.fail(anyhow!(e).context("writing the journal"));
                    return;
                }
            }
        }
        let pending = !daemon.journal().unsent_results().is_empty();
        if work_done.is_cancelled() && !pending {
            return;
        }
        let wait = if retry {
            retry_delay(failures)
        } else {
            Duration::from_secs(60)
        };
        tokio::select! {
            _ = daemon.results.notified() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = work_done.cancelled(), if !pending => {}
            _ = daemon.halt.cancelled() => return,
        }
    }
}

/// Heartbeat every interval with the journal's commands, until `stop`.
async fn heartbeat_loop(daemon: Arc<Daemon>, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(daemon.settings.heartbeat_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate; the start announcement was that heartbeat.
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.cancelled() => return,
            _ = daemon.halt.cancelled() => return,
        }
        let heartbeat = Heartbeat {
            session: daemon.session,
            started: false,
            commands: daemon.journal().report(),
            sandboxed: None,
            single_session: daemon.settings.single_session,
        };
        match daemon.client.heartbeat(&heartbeat).await {
            Ok(cancelled) => daemon.stop_cancelled(&cancelled),
            Err(e @ (CallError::Unauthorized(_) | CallError::Superseded(_))) => {
                daemon.fail(e.into());
                return;
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat"),
        }
    }
}

/// The sandbox commands will run in, proven by running `true` in it; an
/// error (naming what is missing and `--sandbox none`) when it cannot be
/// made. `--sandbox none` is warned about here and in every heartbeat's
/// record (`holdfast status`).
async fn prepare_sandbox(settings: &Settings) -> anyhow::Result<Option<Sandbox>> {
    let Some(sandbox_settings) = &settings.sandbox else {
        tracing::warn!(
            "--sandbox none: commands run unsandboxed, as this user, with this user's files, \
             processes and network (a command can read the machine token and take the machine \
             over); see docs/sandbox.md"
        );
        return Ok(None);
    };
    let mut hidden = vec![settings.state_dir.clone()];
    hidden.extend(settings.hidden_paths.iter().cloned());
    let sandbox_settings = SandboxSettings {
        limits: sandbox_settings.limits.clone().enforce()?,
        ..sandbox_settings.clone()
    };
    let sandbox = Sandbox::prepare(&sandbox_settings, hidden)?;
    sandbox.check(&settings.work_dir).await?;
    tracing::info!(
        network = ?sandbox_settings.network,
        rlimits = sandbox.limits().uses_rlimits(),
        "commands run in a sandbox"
    );
    Ok(Some(sandbox))
}

/// The variable holding the machine token: never passed to commands.
pub const TOKEN_VARIABLE: &str = "HOLDFAST_MACHINE_TOKEN";

/// A `--pass-env` name must be one a shell can set, and not the token's.
fn check_pass_env_name(name: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "--pass-env {name:?}: a variable name is letters, digits and '_', not starting with a digit"
    );
    anyhow::ensure!(
        name != TOKEN_VARIABLE,
        "--pass-env {TOKEN_VARIABLE}: the machine token is never passed to commands"
    );
    Ok(())
}

fn retry_delay(failures: u32) -> Duration {
    Backoff {
        base: Duration::from_millis(200),
        cap: Duration::from_secs(10),
    }
    .delay(failures, None)
}

/// Cut a result's output until its JSON is at most `limit` bytes: the
/// longer of stdout and stderr (as JSON) keeps its first and last quarters,
/// and is marked truncated.
pub fn fit_to_body(mut result: CommandResult, limit: usize) -> CommandResult {
    loop {
        if json_len(&result) <= limit {
            return result;
        }
        let (text, truncated) = if json_len(&result.stdout) >= json_len(&result.stderr) {
            (&mut result.stdout, &mut result.stdout_truncated)
        } else {
            (&mut result.stderr, &mut result.stderr_truncated)
        };
        if text.is_empty() {
            return result;
        }
        let cut = keep_ends(text);
        // A short text gains more from the note than it loses: drop it.
        *text = if cut.len() < text.len() {
            cut
        } else {
            String::new()
        };
        *truncated = true;
    }
}

fn json_len(value: &impl serde::Serialize) -> usize {
    serde_json::to_vec(value).map_or(0, |bytes| bytes.len())
}

/// The first and last quarter of `text` (on character boundaries), joined
/// by a note of the cut.
fn keep_ends(text: &str) -> String {
    let quarter = text.len() / 4;
    let mut head = quarter;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - quarter;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes cut to fit the request ...]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_wire::domain::CommandResultState;

    #[test]
    fn pass_env_names_are_variable_names_and_never_the_token() {
        for good in ["FOO", "_X", "a1_B"] {
            assert!(check_pass_env_name(good).is_ok(), "{good}");
        }
        for bad in ["", "1X", "A=B", "A B", "HOLDFAST_MACHINE_TOKEN"] {
            assert!(check_pass_env_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_result_too_large_for_a_request_is_cut_to_fit_and_marked() {
        let result = CommandResult {
            state: CommandResultState::Finished,
            limit: None,
            exit_code: Some(0),
            stdout: "é".repeat(300_000),
            stderr: "\u{1}".repeat(10_000),
            ..CommandResult::unknown()
        };
        let fitted = fit_to_body(result.clone(), 100_000);
        assert!(serde_json::to_vec(&fitted).unwrap().len() <= 100_000);
        assert!(fitted.stdout_truncated);
        assert!(fitted.stdout.starts_with('é') && fitted.stdout.ends_with('é'));
        assert!(fitted.stdout.contains("bytes cut to fit the request"));
        let small = CommandResult {
            stdout: "ok".into(),
            stderr: String::new(),
            ..result
        };
        assert_eq!(fit_to_body(small.clone(), 100_000), small);
    }
}
