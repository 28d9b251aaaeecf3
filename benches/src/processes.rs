//! Real `holdfast` processes: find (or build) the binary, spawn workers,
//! maintenance and the API with their output in log files, signal them,
//! and read their memory and CPU time from /proc.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::process::{Child, Command};
use tokio_postgres::Client;

/// The `holdfast` binary and where its processes write their logs.
pub struct Holdfast {
    pub bin: PathBuf,
    /// The cargo profile the driver was built with (`release`, `debug`,
    /// `bench-fast`, ...): the one it builds `holdfast` with.
    pub profile: String,
    log_dir: PathBuf,
}

impl Holdfast {
    /// Use `explicit`, or build this workspace's `holdfast` with the
    /// driver's own profile (`cargo build --profile P -p holdfast`, a no-op
    /// when fresh) so the bench never runs a stale binary.
    pub fn locate(explicit: Option<PathBuf>, log_dir: &Path) -> Result<Holdfast> {
        let profile = own_profile();
        let bin = match explicit {
            Some(path) => path,
            None => build(&profile)?,
        };
        if !bin.is_file() {
            bail!("no holdfast binary at {}", bin.display());
        }
        std::fs::create_dir_all(log_dir)?;
        Ok(Holdfast {
            bin,
            profile,
            log_dir: log_dir.to_path_buf(),
        })
    }

    /// Start `holdfast ARGS` with `envs` on top of an environment without
    /// any inherited HOLDFAST_* variable.
    pub fn spawn(&self, name: &str, args: &[&str], envs: &[(&str, String)]) -> Result<Proc> {
        let log = self.log_dir.join(format!("{name}.log"));
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut command = Command::new(&self.bin);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .kill_on_drop(true);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("HOLDFAST_") {
                command.env_remove(key);
            }
        }
        for (key, value) in envs {
            command.env(key, value);
        }
        let child = command
            .spawn()
            .with_context(|| format!("spawning {}", self.bin.display()))?;
        let pid = child.id().ok_or_else(|| anyhow!("{name} exited at once"))?;
        Ok(Proc {
            name: name.to_owned(),
            log,
            child,
            pid,
        })
    }
}

impl Holdfast {
    /// Run `holdfast migrate` against `database_url` and wait for it.
    pub async fn migrate(&self, database_url: &str) -> Result<()> {
        let output = Command::new(&self.bin)
            .arg("migrate")
            .env("HOLDFAST_DATABASE_URL", database_url)
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {} migrate", self.bin.display()))?;
        if !output.status.success() {
            bail!(
                "{} migrate failed: {}",
                self.bin.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }
}

/// The cargo profile this driver was built with: the name of the directory
/// its executable is in when that is a cargo target directory
/// (`<target>/<profile>/holdfast-bench`), else `debug` or `release` by its
/// debug assertions (a driver copied elsewhere).
fn own_profile() -> String {
    let from_path = std::env::current_exe().ok().and_then(|exe| {
        let dir = exe.parent()?;
        dir.parent()?.join("CACHEDIR.TAG").is_file().then_some(())?;
        Some(dir.file_name()?.to_str()?.to_owned())
    });
    from_path.unwrap_or_else(|| {
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .to_owned()
    })
}

fn build(profile: &str) -> Result<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or_else(|| anyhow!("no workspace above the bench crate"))?
        .to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .args(["build", "--quiet", "-p", "holdfast", "--bin", "holdfast"])
        .current_dir(&workspace);
    // The `dev` profile builds into target/debug.
    let cargo_profile = if profile == "debug" { "dev" } else { profile };
    command.args(["--profile", cargo_profile]);
    let status = command
        .status()
        .context("running cargo build -p holdfast")?;
    if !status.success() {
        bail!("cargo build -p holdfast failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    Ok(target.join(profile).join("holdfast"))
}

/// A running `holdfast` process, SIGKILLed when dropped.
pub struct Proc {
    pub name: String,
    pub log: PathBuf,
    child: Child,
    pid: u32,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Send a signal by name (`STOP`, `CONT`, `TERM`) with kill(1).
    pub async fn signal(&self, signal: &str) -> Result<()> {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()
            .await?;
        if !status.success() {
            bail!("kill -{signal} {} ({}) failed", self.pid, self.name);
        }
        Ok(())
    }

    /// SIGKILL, sent directly (no fork of kill(1) in the timed path).
    pub fn kill(&mut self) -> Result<()> {
        self.child.start_kill()?;
        Ok(())
    }

    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<()> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .map_err(|_| anyhow!("{} did not exit within {timeout:?}", self.name))??;
        Ok(())
    }

    /// SIGTERM, then wait up to `grace` for the drain; SIGKILL after that.
    pub async fn stop(mut self, grace: Duration) -> Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        self.signal("TERM").await?;
        if self.wait_exit(grace).await.is_err() {
            self.kill()?;
            self.wait_exit(Duration::from_secs(10)).await?;
        }
        Ok(())
    }

    pub fn rss_bytes(&self) -> Result<u64> {
        rss_bytes(self.pid)
    }

    pub fn rss_anon_bytes(&self) -> Result<u64> {
        rss_anon_bytes(self.pid)
    }

    pub fn cpu_ticks(&self) -> Result<u64> {
        cpu_ticks(self.pid)
    }

    /// The process state letter from /proc (R, S, T for stopped, ...).
    pub fn state(&self) -> Result<char> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        stat_fields(&stat)
            .first()
            .and_then(|s| s.chars().next())
            .ok_or_else(|| anyhow!("unreadable /proc/{}/stat", self.pid))
    }
}

/// Resident set size (VmRSS) of a process.
pub fn rss_bytes(pid: u32) -> Result<u64> {
    status_bytes(pid, "VmRSS:")
}

/// The anonymous part of a process's resident set (RssAnon): its heap and
/// stacks. The rest of VmRSS is mostly the binary's mapped pages, whose
/// count depends on how the file sits in the page cache (two copies of one
/// binary differ by megabytes), not on what the process does.
pub fn rss_anon_bytes(pid: u32) -> Result<u64> {
    status_bytes(pid, "RssAnon:")
}

/// Peak resident set size (VmHWM) of a process since it started.
pub fn peak_rss_bytes(pid: u32) -> Result<u64> {
    status_bytes(pid, "VmHWM:")
}

/// A size field (`field`, with its colon) of /proc/PID/status, in bytes.
fn status_bytes(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .ok_or_else(|| anyhow!("no {field} in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

/// User + system CPU time of a process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields = stat_fields(&stat);
    // Fields after the command: state is [0], utime [11], stime [12].
    let utime: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0);
    let stime: u64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
    Ok(utime + stime)
}

/// CPU ticks the whole machine spent busy (all cores: user, nice, system,
/// irq, softirq, steal; not idle or iowait), from /proc/stat. Read before
/// and after a window, it is what every process together cost, the
/// driver, the kernel and anything else running included.
pub fn machine_busy_ticks() -> Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| anyhow!("no cpu line in /proc/stat"))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    Ok([0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| fields.get(i))
        .sum())
}

/// CPU ticks of `parent`'s children (the Postgres backends of a
/// postmaster): the live ones', and those of the children that exited and
/// were reaped (the parent's cutime and cstime), so a session that closed
/// between two readings is counted too.
pub fn children_cpu_ticks(parent: u32) -> u64 {
    let reaped = std::fs::read_to_string(format!("/proc/{parent}/stat"))
        .map(|stat| {
            let fields = stat_fields(&stat);
            // After the command: cutime [13], cstime [14].
            [13, 14]
                .iter()
                .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
                .sum::<u64>()
        })
        .unwrap_or(0);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return reaped;
    };
    reaped
        + entries
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let fields = stat_fields(&stat);
                let ppid: u32 = fields.get(1)?.parse().ok()?;
                (ppid == parent).then(|| cpu_ticks(pid).unwrap_or(0))
            })
            .sum::<u64>()
}

/// Proportional set size (Pss) of every live child of `parent`: what the
/// Postgres backends of a postmaster cost in memory, shared buffers split
/// among the processes that touched them rather than counted for each.
pub fn children_pss_bytes(parent: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid: u32 = stat_fields(&stat).get(1)?.parse().ok()?;
            if ppid != parent {
                return None;
            }
            let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
            let kib: u64 = rollup
                .lines()
                .find_map(|line| line.strip_prefix("Pss:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(kib * 1024)
        })
        .sum()
}

/// The /proc/PID/stat fields after `(comm)` (which may contain spaces).
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default()
}

/// The cores this machine offers (1 if unknown): the bench's measure of
/// how much CPU a window of wall time holds.
pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux if unknown).
pub fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Wait until a session tagged `application_name` has run a statement
/// containing `statement` (e.g. a worker's first `claim_agents`: its LISTEN
/// is up by then). Startup is polled; it is not what is measured.
pub async fn wait_for_session(
    client: &Client,
    application_name: &str,
    statement: &str,
    timeout: Duration,
) -> Result<()> {
    let pattern = format!("%{statement}%");
    let deadline = Instant::now() + timeout;
    loop {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE $2",
                &[&application_name, &pattern],
            )
            .await?;
        if row.get::<_, i64>(0) > 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{application_name} did not run {statement} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
