//! Real `holdfast` processes for tests: spawn, signal, wait.
//!
//! The binary is built once per test process (`cargo build --workspace
//! --bins`, a no-op when fresh) so tests in this package can run it even though it
//! belongs to another package. Each process's stderr goes to a log file
//! under /tmp, named in panics, for post-mortems.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::process::{Child, Command as AsyncCommand};

static BINARY: OnceLock<PathBuf> = OnceLock::new();

/// The `holdfast` binary of this workspace, built if needed, or the one
/// `HOLDFAST_BIN` names (set by `holdfast-test-stack`, which runs beside a
/// built binary and outside cargo).
pub fn holdfast_bin() -> PathBuf {
    BINARY
        .get_or_init(|| {
            if let Some(binary) = std::env::var_os("HOLDFAST_BIN") {
                return PathBuf::from(binary);
            }
            let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("workspace root")
                .to_path_buf();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            // The processes are built with the tests' own profile, so
            // `cargo test --release` (the soak) runs release processes.
            let release = !cfg!(debug_assertions);
            let mut build = Command::new(cargo);
            // --workspace: the same feature unification as `cargo test
            // --workspace`, so this reuses the test build's artifacts
            // instead of recompiling dependencies with other features.
            build.args(["build", "--quiet", "--workspace", "--bins"]);
            if release {
                build.arg("--release");
            }
            let status = build
                .current_dir(&workspace)
                .status()
                .expect("run cargo build");
            assert!(status.success(), "cargo build --workspace --bins failed");
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace.join("target"));
            target
                .join(if release { "release" } else { "debug" })
                .join("holdfast")
        })
        .clone()
}

/// A running `holdfast` process, killed (SIGKILL) when dropped.
pub struct HoldfastProcess {
    pub name: String,
    pub log: PathBuf,
    child: Child,
}

impl HoldfastProcess {
    /// Start `holdfast ARGS` with `envs` (on top of a clean set of HOLDFAST_*
    /// defaults suited to tests).
    pub fn spawn(name: &str, args: &[&str], envs: &[(&str, String)]) -> HoldfastProcess {
        HoldfastProcess::spawn_through(name, &[], args, envs)
    }

    /// [`HoldfastProcess::spawn`] through `launcher` (a program and its
    /// arguments that then execs `holdfast ARGS`), e.g. `setpriv` to run it
    /// as another user.
    pub fn spawn_through(
        name: &str,
        launcher: &[&str],
        args: &[&str],
        envs: &[(&str, String)],
    ) -> HoldfastProcess {
        let log = PathBuf::from(format!(
            "/tmp/holdfast-test-{}-{}.log",
            name,
            uuid::Uuid::new_v4().simple()
        ));
        let log_file = std::fs::File::create(&log).expect("create process log");
        let mut command = match launcher.split_first() {
            Some((program, launcher_args)) => {
                let mut command = AsyncCommand::new(program);
                command.args(launcher_args).arg(holdfast_bin());
                command
            }
            None => AsyncCommand::new(holdfast_bin()),
        };
        command
            .args(args)
            .env("HOLDFAST_LOG", "info,holdfast_worker=debug")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone log handle"))
            .stderr(log_file)
            .kill_on_drop(true);
        for (key, value) in envs {
            command.env(key, value);
        }
        let child = command.spawn().expect("spawn holdfast");
        HoldfastProcess {
            name: name.to_owned(),
            log,
            child,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("process is running")
    }

    /// Send a signal by name (`KILL`, `TERM`, `INT`, `STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.name);
    }

    /// Wait for the process to exit; returns its exit code (None: killed by
    /// a signal). Panics after `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.expect("wait for process").code(),
            Err(_) => panic!(
                "{} did not exit within {timeout:?}; log: {}",
                self.name,
                self.log.display()
            ),
        }
    }

    /// Whether the process has exited (without waiting).
    pub fn has_exited(&mut self) -> bool {
        self.child.try_wait().expect("check the process").is_some()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The running processes (zombies aside) whose working directory is `dir`
/// or under it, as `pid command`: what a command started in `dir` left
/// behind. Postgres works in its data directory and a machine daemon's
/// commands in theirs, so an empty answer for a scratch home means none of
/// them is left.
pub fn processes_working_in(dir: &std::path::Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // The state follows the parenthesised command name.
            let (name, state) = stat.split_once(" (")?.1.rsplit_once(") ")?;
            let running = !state.starts_with('Z') && !state.starts_with('X');
            (running && cwd.starts_with(dir)).then(|| format!("{pid} {name}"))
        })
        .collect()
}
