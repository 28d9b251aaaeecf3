//! What one sandboxed command may use: CPU time, memory and processes.
//!
//! Where the daemon can make cgroups (as root on cgroup v1 or v2, or in a
//! v2 subtree delegated to it), each command gets its own, nested in the
//! daemon's: `pids.max` caps its processes (a fork bomb fails to fork),
//! its memory limit makes the kernel's OOM killer end it, and the daemon
//! reads its CPU usage and ends it past its CPU time. The counters tell
//! which limit was reached, and the command is ended at once then, its
//! result naming the limit. Elsewhere the limits are rlimits set inside the
//! sandbox (`prlimit`): CPU seconds per process (SIGXCPU, recognised), the
//! address space per process, and the process count of the sandbox's user
//! namespace; a command stopped by these two is not recognised as such.
//! Root needs a cgroup: RLIMIT_NPROC does not apply to uid 0.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use holdfast_wire::domain::CommandLimit;

/// Limits of each command.
#[derive(Clone, Debug)]
pub struct Limits {
    /// CPU time, all its processes together (per process under rlimits).
    pub cpu_time: Duration,
    /// Memory, all its processes together (address space per process
    /// under rlimits).
    pub memory_bytes: u64,
    /// Processes (and threads) at once.
    pub processes: u64,
    /// Where each command's cgroups are made; `None`: rlimits.
    cgroups: Option<Arc<CgroupRoot>>,
}

impl Default for Limits {
    /// `holdfast machine`'s defaults.
    fn default() -> Self {
        Limits::new(Duration::from_secs(1800), 2048 * 1024 * 1024, 512)
    }
}

impl Drop for CgroupRoot {
    /// The daemon's cgroup directories go when it does (a command still
    /// running keeps its own, and them, in place).
    fn drop(&mut self) {
        let dirs = match self {
            CgroupRoot::V2 { dir } => vec![dir.clone()],
            CgroupRoot::V1 {
                pids,
                memory,
                cpuacct,
            } => vec![pids.clone(), memory.clone(), cpuacct.clone()],
        };
        for dir in dirs {
            let _ = fs::remove_dir(dir);
        }
    }
}

impl Limits {
    pub fn new(cpu_time: Duration, memory_bytes: u64, processes: u64) -> Limits {
        Limits {
            cpu_time,
            memory_bytes,
            processes,
            cgroups: None,
        }
    }

    /// Make this daemon's cgroup directory where the machine allows it;
    /// otherwise the limits are rlimits. Fails as root without cgroups
    /// (root is exempt from RLIMIT_NPROC, so a fork bomb would not be).
    pub fn enforce(mut self) -> anyhow::Result<Limits> {
        anyhow::ensure!(
            self.processes > 0 && self.memory_bytes > 0 && !self.cpu_time.is_zero(),
            "the command limits (--command-cpu-secs, --command-memory-mib, --command-processes) \
             must be positive"
        );
        match CgroupRoot::create() {
            Ok(root) => self.cgroups = Some(Arc::new(root)),
            Err(reason) if nix::unistd::geteuid().is_root() => anyhow::bail!(
                "running as root, commands need cgroups for their limits (root is exempt from \
                 the process rlimit), and none can be made here: {reason}. Mount the pids and \
                 memory controllers (cgroup v2, or v1's /sys/fs/cgroup/pids and memory), run the \
                 daemon as an unprivileged user, or start with --sandbox none"
            ),
            Err(reason) => {
                tracing::info!(%reason, "no cgroups for commands: their limits are rlimits");
            }
        }
        Ok(self)
    }

    /// Whether the limits are set with `prlimit` inside the sandbox.
    pub fn uses_rlimits(&self) -> bool {
        self.cgroups.is_none()
    }

    /// The program and arguments that set the rlimits before `sh`, when
    /// there are no cgroups.
    pub fn rlimit_prefix(&self) -> Vec<String> {
        if self.cgroups.is_some() {
            return Vec::new();
        }
        let cpu = self.cpu_time.as_secs().max(1);
        vec![
            "prlimit".into(),
            // SIGXCPU at the limit, SIGKILL a second later.
            format!("--cpu={cpu}:{}", cpu + 1),
            format!("--as={}", self.memory_bytes),
            format!("--nproc={}", self.processes),
            "--".into(),
        ]
    }

    /// A new cgroup for one command, with its limits, when cgroups are used.
    pub fn cgroup_for(&self, name: &str) -> Option<io::Result<CommandCgroup>> {
        let root = self.cgroups.as_ref()?;
        Some(root.command(name, self))
    }

    /// The limit a command ended by, from its exit code, under rlimits
    /// (a shell reports death by SIGXCPU as 128 + 24).
    pub fn recognise_exit(&self, exit_code: Option<i32>) -> Option<CommandLimit> {
        let by_sigxcpu = exit_code == Some(128 + libc::SIGXCPU);
        (self.cgroups.is_none() && by_sigxcpu).then_some(CommandLimit::CpuTime)
    }
}

/// Where this daemon makes its commands' cgroups.
#[derive(Debug)]
enum CgroupRoot {
    /// cgroup v2: one directory (controllers enabled for its children).
    V2 { dir: PathBuf },
    /// cgroup v1: one directory per controller hierarchy.
    V1 {
        pids: PathBuf,
        memory: PathBuf,
        cpuacct: PathBuf,
    },
}

/// A command's cgroup(s).
#[derive(Debug)]
pub struct CommandCgroup {
    dirs: Vec<PathBuf>,
    version: CgroupVersion,
    cpu_limit: Duration,
}

#[derive(Debug, Clone, Copy)]
enum CgroupVersion {
    V1,
    V2,
}

const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

impl CgroupRoot {
    fn create() -> Result<CgroupRoot, String> {
        let own = fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let name = format!("holdfast-machine-{}", std::process::id());
        let mount = Path::new(CGROUP_MOUNT);
        if mount.join("cgroup.controllers").exists() {
            let path = own
                .lines()
                .find_map(|line| line.strip_prefix("0::"))
                .ok_or("no cgroup v2 path in /proc/self/cgroup")?;
            let parent = mount.join(path.trim_start_matches('/'));
            let available = fs::read_to_string(parent.join("cgroup.controllers"))
                .map_err(|e| format!("{}: {e}", parent.display()))?;
            for needed in ["pids", "memory", "cpu"] {
                if !available.split_whitespace().any(|c| c == needed) {
                    return Err(format!(
                        "the {needed} controller is not available in {}",
                        parent.display()
                    ));
                }
            }
            let dir = parent.join(&name);
            make_dir(&dir)?;
            let enable = |at: &Path| {
                fs::write(at.join("cgroup.subtree_control"), "+pids +memory +cpu")
                    .map_err(|e| format!("enabling controllers in {}: {e}", at.display()))
            };
            if let Err(e) = enable(&parent).and_then(|()| enable(&dir)) {
                let _ = fs::remove_dir(&dir);
                return Err(e);
            }
            return Ok(CgroupRoot::V2 { dir });
        }
        let v1 = |controller: &str| -> Result<PathBuf, String> {
            let path = own
                .lines()
                .find_map(|line| {
                    let mut fields = line.splitn(3, ':');
                    let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
                    controllers
                        .split(',')
                        .any(|c| c == controller)
                        .then_some(path)
                })
                .ok_or(format!("no {controller} cgroup in /proc/self/cgroup"))?;
            let dir = mount
                .join(controller)
                .join(path.trim_start_matches('/'))
                .join(&name);
            make_dir(&dir)?;
            Ok(dir)
        };
        Ok(CgroupRoot::V1 {
            pids: v1("pids")?,
            memory: v1("memory")?,
            cpuacct: v1("cpuacct")?,
        })
    }

    fn command(&self, name: &str, limits: &Limits) -> io::Result<CommandCgroup> {
        let memory = limits.memory_bytes.to_string();
        let processes = limits.processes.to_string();
        let (dirs, version) = match self {
            CgroupRoot::V2 { dir } => {
                let dir = dir.join(name);
                fs::create_dir(&dir)?;
                fs::write(dir.join("pids.max"), &processes)?;
                fs::write(dir.join("memory.max"), &memory)?;
                // Swap would let it run past its memory instead of ending.
                let _ = fs::write(dir.join("memory.swap.max"), "0");
                (vec![dir], CgroupVersion::V2)
            }
            CgroupRoot::V1 {
                pids,
                memory: memory_root,
                cpuacct,
            } => {
                let dirs: Vec<PathBuf> = [pids, memory_root, cpuacct]
                    .iter()
                    .map(|root| root.join(name))
                    .collect();
                for dir in &dirs {
                    fs::create_dir(dir)?;
                }
                fs::write(dirs[0].join("pids.max"), &processes)?;
                fs::write(dirs[1].join("memory.limit_in_bytes"), &memory)?;
                // Memory plus swap, where swap is accounted.
                let _ = fs::write(dirs[1].join("memory.memsw.limit_in_bytes"), &memory);
                (dirs, CgroupVersion::V1)
            }
        };
        Ok(CommandCgroup {
            dirs,
            version,
            cpu_limit: limits.cpu_time,
        })
    }
}

fn make_dir(dir: &Path) -> Result<(), String> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("creating {}: {e}", dir.display())),
    }
}

/// `key N` from a cgroup counters file (`pids.events`, `memory.events`,
/// `memory.oom_control`, `cpu.stat`).
fn counter(path: &Path, key: &str) -> u64 {
    fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let (name, value) = line.split_once(' ')?;
                (name == key).then(|| value.trim().parse().ok())?
            })
        })
        .unwrap_or(0)
}

impl CommandCgroup {
    /// Move `pid` (and so every process it starts) into the cgroup.
    pub fn attach(&self, pid: u32) -> io::Result<()> {
        for dir in &self.dirs {
            fs::write(dir.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// The limit the command has reached, if any.
    pub fn reached(&self) -> Option<CommandLimit> {
        let (pids, memory, cpu) = match self.version {
            CgroupVersion::V2 => (&self.dirs[0], &self.dirs[0], &self.dirs[0]),
            CgroupVersion::V1 => (&self.dirs[0], &self.dirs[1], &self.dirs[2]),
        };
        if counter(&pids.join("pids.events"), "max") > 0 {
            return Some(CommandLimit::Processes);
        }
        let (oom_file, cpu_used) = match self.version {
            CgroupVersion::V2 => (
                "memory.events",
                Duration::from_micros(counter(&cpu.join("cpu.stat"), "usage_usec")),
            ),
            CgroupVersion::V1 => (
                "memory.oom_control",
                Duration::from_nanos(
                    fs::read_to_string(cpu.join("cpuacct.usage"))
                        .ok()
                        .and_then(|text| text.trim().parse().ok())
                        .unwrap_or(0),
                ),
            ),
        };
        if counter(&memory.join(oom_file), "oom_kill") > 0 {
            return Some(CommandLimit::Memory);
        }
        (cpu_used >= self.cpu_limit).then_some(CommandLimit::CpuTime)
    }

    /// Remove the cgroup once its processes are gone (a cgroup with
    /// processes cannot be removed; it is retried briefly).
    pub fn remove(self) {
        for dir in &self.dirs {
            for _ in 0..50 {
                match fs::remove_dir(dir) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    _ => break,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_by_name() {
        let dir = std::env::temp_dir().join(format!("holdfast-counter-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("memory.events");
        fs::write(&file, "low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\n").unwrap();
        assert_eq!(counter(&file, "oom_kill"), 2);
        assert_eq!(counter(&file, "max"), 7);
        assert_eq!(counter(&file, "absent"), 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rlimits_are_set_only_without_cgroups() {
        let limits = Limits::default();
        let prefix = limits.rlimit_prefix();
        assert_eq!(prefix[0], "prlimit");
        assert!(prefix.contains(&"--nproc=512".to_owned()));
        assert_eq!(
            limits.recognise_exit(Some(152)),
            Some(CommandLimit::CpuTime)
        );
        assert_eq!(limits.recognise_exit(Some(1)), None);
    }
}
