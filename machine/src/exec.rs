//! Running one command: `sh -c` in the working directory (in its sandbox,
//! [`super::sandbox`], unless the daemon runs with `--sandbox none`), stdin
//! closed, in a process group of its own (so its timeout kills everything it started,
//! and a signal aimed at the daemon does not reach it), stdout and stderr
//! captured up to a bound each, with a clean environment
//! ([`command_environment`]): never the daemon's own, which may hold the
//! machine token and, inside `holdfast up`, provider keys and the database
//! URL.
//!
//! A process started by an earlier run of the daemon (which then died) is
//! not this process's child: it can only be watched through /proc until it
//! is gone, and its exit status is lost.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use holdfast_wire::domain::{ClaimedCommand, CommandLimit, CommandResult, CommandResultState};
use holdfast_wire::pg_text::storable_str;
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::journal::Process;
use super::limits::CommandCgroup;
use super::live::{LiveOutput, Pipe};
use super::sandbox::{Held, Sandbox};

/// After the command's process exits, how long its output pipes may stay
/// open (a background process it left holds them) before reading stops.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);
/// How often a process of an earlier daemon run is looked at.
const ORPHAN_POLL: Duration = Duration::from_millis(200);
/// How long a command asked to stop (its tool call was cancelled) has after
/// SIGTERM before everything of it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// The daemon's variables every command gets (those that are set).
pub const BASE_ENVIRONMENT: [&str; 5] = ["PATH", "HOME", "LANG", "TERM", "USER"];
/// A command's PATH when the daemon has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The environment commands run with: [`BASE_ENVIRONMENT`] and the names in
/// `pass` (`--pass-env`), each with the daemon's value where it has one,
/// and nothing else.
pub fn command_environment(pass: &[String]) -> Vec<(OsString, OsString)> {
    let mut names: Vec<&str> = Vec::new();
    for name in BASE_ENVIRONMENT
        .iter()
        .copied()
        .chain(pass.iter().map(String::as_str))
    {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let mut environment: Vec<(OsString, OsString)> = names
        .into_iter()
        .filter_map(|name| std::env::var_os(name).map(|value| (name.into(), value)))
        .collect();
    if !environment.iter().any(|(name, _)| name == "PATH") {
        environment.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    environment
}

/// What the daemon sees of a running command and how it stops it.
#[derive(Default)]
pub struct RunHandle {
    /// What the command prints, copied as it comes, to be relayed while it
    /// runs.
    pub live: Arc<LiveOutput>,
    /// Cancelled when the server says the command's tool call was
    /// cancelled: the command is stopped ([`STOP_GRACE`]).
    pub stop: CancellationToken,
}

/// Run `command` to its end (or its timeout, a limit, or `handle.stop`)
/// with exactly `environment` ([`command_environment`]), in `sandbox`
/// unless it is `None` (`--sandbox none`). `started` is told the process
/// before the command runs; if it fails (the journal cannot be written),
/// everything is killed and the error returned.
pub async fn run(
    command: &ClaimedCommand,
    work_dir: &Path,
    environment: &[(OsString, OsString)],
    max_output_bytes: usize,
    sandbox: Option<&Sandbox>,
    handle: &RunHandle,
    started: impl FnOnce(Process) -> io::Result<()>,
) -> io::Result<CommandResult> {
    let live = &handle.live;
    let launched = match sandbox {
        Some(sandbox) => sandbox
            .start(
                &command.id.to_string(),
                work_dir,
                environment,
                &command.command,
            )
            .await
            .map(Launched::Held),
        None => Command::new("sh")
            .arg("-c")
            .arg(&command.command)
            .current_dir(work_dir)
            .env_clear()
            .envs(environment.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map(Launched::Plain),
    };
    let launched = match launched {
        Ok(launched) => launched,
        Err(e) => {
            // It never ran: say so in the output the model reads.
            return Ok(CommandResult {
                state: CommandResultState::Finished,
                stderr: format!(
                    "holdfast machine: could not start sh -c in {}: {e}",
                    work_dir.display()
                ),
                ..CommandResult::unknown()
            });
        }
    };
    let pid = launched
        .pid()
        .ok_or_else(|| io::Error::other("the command's process exited before its pid was read"))?;
    let process = Process {
        pid,
        sandbox_pid: launched.sandbox_pid(),
        start_ticks: process_start_ticks(pid),
        started_at: Utc::now(),
    };
    // A held sandbox that is dropped kills itself: it never runs unjournaled.
    started(process)?;
    let (mut child, cgroup) = match launched {
        Launched::Plain(child) => (child, None),
        Launched::Held(held) => held.release()?,
    };
    let kill = || kill_command(&process);

    let stop_reading = CancellationToken::new();
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        kill();
        return Err(io::Error::other("the command's output pipes are missing"));
    };
    let stdout = tokio::spawn(read_bounded(
        stdout,
        max_output_bytes,
        (live.clone(), Pipe::Stdout),
        stop_reading.clone(),
    ));
    let stderr = tokio::spawn(read_bounded(
        stderr,
        max_output_bytes,
        (live.clone(), Pipe::Stderr),
        stop_reading.clone(),
    ));

    let timeout = Duration::from_secs(u64::try_from(command.timeout_secs).unwrap_or(1).max(1));
    let (status, timed_out, mut limit) = tokio::select! {
        status = child.wait() => (status?, false, None),
        _ = tokio::time::sleep(timeout) => {
            kill();
            (child.wait().await?, true, None)
        }
        limit = watch_limits(cgroup.as_ref()) => {
            kill();
            (child.wait().await?, false, Some(limit))
        }
        _ = handle.stop.cancelled() => {
            signal_command(&process, Signal::SIGTERM);
            let status = match tokio::time::timeout(STOP_GRACE, child.wait()).await {
                Ok(status) => status?,
                Err(_) => {
                    kill();
                    child.wait().await?
                }
            };
            (status, false, None)
        }
    };
    // In a sandbox, what the command left running ends with it (its PID
    // namespace goes with its first process). Without one, a background
    // process may still hold the pipes: read a little longer, then stop.
    if process.sandbox_pid.is_some() {
        kill();
    }
    let grace = tokio::spawn({
        let stop_reading = stop_reading.clone();
        async move {
            tokio::time::sleep(OUTPUT_GRACE).await;
            stop_reading.cancel();
        }
    });
    let (stdout, stderr) = (stdout.await, stderr.await);
    grace.abort();
    if let Some(cgroup) = cgroup {
        limit = limit.or_else(|| cgroup.reached());
        tokio::task::spawn_blocking(move || cgroup.remove());
    }
    if let Some(sandbox) = sandbox {
        limit = limit.or_else(|| sandbox.limits().recognise_exit(status.code()));
    }
    let (stdout, stdout_truncated) =
        stdout.map_or_else(|_| (String::new(), false), Capture::finish);
    let (stderr, stderr_truncated) =
        stderr.map_or_else(|_| (String::new(), false), Capture::finish);
    Ok(CommandResult {
        state: CommandResultState::Finished,
        limit: limit.filter(|_| !timed_out),
        exit_code: status.code(),
        signal: status.signal(),
        timed_out,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
    })
}

/// A command's process, started.
enum Launched {
    Plain(Child),
    Held(Held),
}

impl Launched {
    fn pid(&self) -> Option<u32> {
        match self {
            Launched::Plain(child) => child.id(),
            Launched::Held(held) => held.pid(),
        }
    }

    fn sandbox_pid(&self) -> Option<u32> {
        match self {
            Launched::Plain(_) => None,
            Launched::Held(held) => Some(held.sandbox_pid),
        }
    }
}

/// How often a command's cgroup counters are read.
const LIMIT_POLL: Duration = Duration::from_millis(100);

/// Resolves with the limit the command reaches; never without a cgroup.
async fn watch_limits(cgroup: Option<&CommandCgroup>) -> CommandLimit {
    let Some(cgroup) = cgroup else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(LIMIT_POLL).await;
        if let Some(limit) = cgroup.reached() {
            return limit;
        }
    }
}

/// Kill everything of a command: its process group, and its sandbox's
/// first process (which takes the sandbox's PID namespace with it).
pub fn kill_command(process: &Process) {
    signal_command(process, Signal::SIGKILL);
}

/// Send `signal` to a command's process group and its sandbox's first
/// process. (The sandbox's first process is its PID namespace's init: it
/// ignores a SIGTERM it has no handler for, and SIGKILL ends the namespace.)
fn signal_command(process: &Process, signal: Signal) {
    signal_group(process.pid, signal);
    if let Some(pid) = process.sandbox_pid.and_then(|pid| i32::try_from(pid).ok()) {
        match nix::sys::signal::kill(Pid::from_raw(pid), signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => tracing::warn!(pid, error = %e, %signal, "signalling a command's sandbox"),
        }
    }
}

/// Stop a process started by an earlier run of the daemon whose command's
/// tool call was cancelled, as [`run`] stops its own: SIGTERM, then, after
/// [`STOP_GRACE`], SIGKILL to everything of it. Returns once it is gone.
pub async fn stop_orphan(process: Process) {
    signal_command(&process, Signal::SIGTERM);
    let _ = tokio::time::timeout(STOP_GRACE, async {
        while is_alive(&process) {
            tokio::time::sleep(ORPHAN_POLL).await;
        }
    })
    .await;
    // What is left (everything, past the grace; a sandbox's processes once
    // its first one ended) is killed.
    wait_for_orphan(process, Utc::now()).await;
    kill_command(&process);
}

/// Wait until a process started by an earlier run of the daemon is gone.
/// Past `deadline` (its command's timeout), its process group is killed.
pub async fn wait_for_orphan(process: Process, deadline: DateTime<Utc>) {
    while is_alive(&process) {
        if Utc::now() >= deadline {
            kill_command(&process);
        }
        tokio::time::sleep(ORPHAN_POLL).await;
    }
}

/// True while `process` runs: its pid exists, is not a zombie, and started
/// at the recorded time (a pid reused by another process does not count).
pub fn is_alive(process: &Process) -> bool {
    let Some((state, start_ticks)) = read_stat(process.pid) else {
        return false;
    };
    if state == 'Z' || state == 'X' {
        return false;
    }
    process.start_ticks.is_none_or(|ticks| ticks == start_ticks)
}

/// Send `signal` to a command's process group (its pid is its group id).
/// A group that is already gone is fine.
fn signal_group(pid: u32, signal: Signal) {
    let Ok(pid) = i32::try_from(pid) else {
        return;
    };
    match killpg(Pid::from_raw(pid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pid, error = %e, %signal, "signalling a command's process group"),
    }
}

/// The start time (clock ticks after boot) of a process, from /proc.
pub fn process_start_ticks(pid: u32) -> Option<u64> {
    read_stat(pid).map(|(_, ticks)| ticks)
}

/// (state, starttime) from /proc/PID/stat. The command name (field 2) is in
/// parentheses and may hold spaces, so fields are counted after the last ')'.
fn read_stat(pid: u32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 22 of the line; the state is field 3, so 19 more.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some((state, start_ticks))
}

/// Read a pipe to its end (or until `stop`), keeping at most `limit` bytes:
/// the first half and the last half, so both the start of the output and
/// its end (where errors usually are) survive. Each read is also copied to
/// `live` as `pipe`'s.
async fn read_bounded(
    mut pipe: impl AsyncRead + Unpin,
    limit: usize,
    (live, name): (Arc<LiveOutput>, Pipe),
    stop: CancellationToken,
) -> Capture {
    let mut capture = Capture::new(limit);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = pipe.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    live.push(name, &buf[..n]);
                    capture.push(&buf[..n]);
                }
            },
            _ = stop.cancelled() => break,
        }
    }
    capture
}

/// A bounded capture of one output stream.
struct Capture {
    head_limit: usize,
    tail_limit: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Capture {
    fn new(limit: usize) -> Capture {
        let head_limit = limit / 2;
        Capture {
            head_limit,
            tail_limit: limit - head_limit,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_limit.saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        bytes = rest;
        if bytes.len() >= self.tail_limit {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_limit..]);
        } else {
            self.tail.extend(bytes);
            let excess = self.tail.len().saturating_sub(self.tail_limit);
            self.tail.drain(..excess);
        }
    }

    /// The text and whether bytes were left out. Invalid UTF-8 and U+0000
    /// become U+FFFD: the API refuses text Postgres can't store, and the
    /// output is all the result there is (pg_text).
    fn finish(mut self) -> (String, bool) {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let text = |bytes: &[u8]| storable_str(&String::from_utf8_lossy(bytes)).into_owned();
        let head = text(&self.head);
        let tail = text(self.tail.make_contiguous());
        if kept == self.total {
            return (head + &tail, false);
        }
        let omitted = self.total - kept;
        (
            format!("{head}\n[... {omitted} bytes omitted ...]\n{tail}"),
            true,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_within_its_limit_is_exact() {
        let mut capture = Capture::new(10);
        capture.push(b"abc");
        capture.push(b"defghij");
        assert_eq!(capture.finish(), ("abcdefghij".to_owned(), false));
    }

    #[test]
    fn a_capture_past_its_limit_keeps_the_head_and_the_tail() {
        let mut capture = Capture::new(10);
        for chunk in [&b"0123"[..], b"456789", b"abcdefghij", b"XYZ"] {
            capture.push(chunk);
        }
        let (text, truncated) = capture.finish();
        assert!(truncated);
        assert_eq!(text, "01234\n[... 13 bytes omitted ...]\nijXYZ");
    }
}
