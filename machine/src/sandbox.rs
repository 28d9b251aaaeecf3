//! The sandbox every command runs in, unless the daemon is started with
//! `--sandbox none`: bubblewrap (`bwrap`, the distribution's package, the
//! tool Flatpak runs on) puts `sh -c COMMAND` in new user, PID, mount, IPC,
//! UTS (and, with `--command-network none`, network) namespaces, with
//! `no_new_privs`, every capability dropped, nested user namespaces
//! disabled, a new session (no controlling terminal to push input into),
//! and the seccomp filter of [`seccomp_program`].
//!
//! What the command sees of the host's files: the system directories
//! (`/usr`, `/bin`, `/lib*`, a list of `/etc` files) read-only, any
//! `--command-read-only` path, its working directory read-write, and fresh
//! `/proc` (its own processes only), `/dev` and `/tmp`. Nothing else: not
//! the daemon's state directory or token file (hidden even when they lie in
//! the working directory), not `.holdfast/`, not the host's `/tmp` (where
//! the embedded Postgres keeps its socket), not `/run`, not `$HOME`.
//!
//! bwrap is started with three descriptors of ours: its seccomp program
//! (fd 3), an info pipe on which it writes the host pid of the sandbox's
//! first process (fd 4), and a pipe it blocks on before it runs the command
//! (fd 5). The daemon reads the pid, puts it in the command's cgroups
//! ([`super::limits`]), journals it, and only then lets the command start:
//! so no process of the command ever runs outside its limits, and the
//! journal always knows which process to kill after a restart.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{anyhow, Context};
use command_fds::{CommandFdExt, FdMapping};
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
use tokio::process::{Child, Command};

use super::exec::kill_command;
use super::journal::Process;
use super::limits::{CommandCgroup, Limits};

/// The network a sandboxed command has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CommandNetwork {
    /// The host's network, loopback services included.
    #[default]
    Full,
    /// A network namespace of its own with only a loopback interface.
    None,
}

/// How the sandbox is made (`holdfast machine` flags).
#[derive(Clone, Debug, Default)]
pub struct SandboxSettings {
    pub network: CommandNetwork,
    pub limits: Limits,
    /// Host paths commands may read (`--command-read-only`), e.g. a
    /// toolchain outside `/usr`.
    pub read_only: Vec<PathBuf>,
}

/// The `/etc` files commands get, read-only: users and groups, name
/// resolution, TLS roots, the dynamic linker's cache, time zones and the
/// `alternatives` links some `/usr/bin` commands point through. Not the
/// rest (`shadow`, `ssl/private`, service configuration with secrets).
const ETC_FILES: [&str; 19] = [
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "ssl/certs",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "os-release",
    "mime.types",
];
/// Top-level system directories: bound read-only, or recreated as the same
/// symbolic link where the host has one (merged /usr).
const SYSTEM_DIRS: [&str; 6] = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];
/// The child's descriptor numbers bwrap is told about.
const SECCOMP_FD: i32 = 3;
const INFO_FD: i32 = 4;
const BLOCK_FD: i32 = 5;

/// What a command's sandbox is made of, prepared once at the daemon's start.
pub struct Sandbox {
    bwrap: PathBuf,
    /// The compiled seccomp filter, as bwrap reads it (struct sock_filter[]).
    seccomp: Vec<u8>,
    /// Namespaces, privileges, network and the system mounts.
    base_args: Vec<OsString>,
    /// Host paths never shown to a command, even inside its directory.
    hidden: Vec<PathBuf>,
    limits: Limits,
}

/// A sandbox started and held before its command runs. Dropped without
/// [`Held::release`], it is killed: its command never runs.
pub struct Held {
    child: Option<Child>,
    /// The host pid of the sandbox's first process (its PID namespace's
    /// init): killing it ends every process of the command.
    pub sandbox_pid: u32,
    cgroup: Option<CommandCgroup>,
    release: Option<io::PipeWriter>,
}

impl Held {
    /// bwrap's pid (the leader of the command's process group).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Let the command run.
    pub fn release(mut self) -> io::Result<(Child, Option<CommandCgroup>)> {
        if let Some(mut release) = self.release.take() {
            release.write_all(b"g")?;
        }
        let child = self
            .child
            .take()
            .ok_or_else(|| io::Error::other("the sandbox was released twice"))?;
        Ok((child, self.cgroup.take()))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.release.is_some() {
            if let Some(pid) = self.pid() {
                kill_command(&Process {
                    pid,
                    sandbox_pid: Some(self.sandbox_pid),
                    start_ticks: None,
                    started_at: chrono::Utc::now(),
                });
            }
        }
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.remove();
        }
    }
}

impl Sandbox {
    /// Find bwrap, compile the seccomp filter and lay out the mounts. Fails
    /// with what is missing; [`Sandbox::check`] then proves it works.
    pub fn prepare(settings: &SandboxSettings, hidden: Vec<PathBuf>) -> anyhow::Result<Sandbox> {
        let bwrap = find_program("bwrap").ok_or_else(|| {
            anyhow!(
                "bubblewrap (`bwrap`) is not installed, and every command runs in its sandbox: \
                 install it (Debian and Ubuntu: apt-get install bubblewrap; Fedora: dnf install \
                 bubblewrap), or start with --sandbox none to run commands unsandboxed, as this \
                 user (see docs/sandbox.md)"
            )
        })?;
        if settings.limits.uses_rlimits() {
            find_program("prlimit").ok_or_else(|| {
                anyhow!(
                    "`prlimit` (util-linux) is not installed: it sets the commands' limits where \
                     no cgroup can; install util-linux, or start with --sandbox none"
                )
            })?;
        }
        let seccomp = seccomp_program()?;
        let mut base_args: Vec<OsString> = [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--disable-userns",
            "--new-session",
            "--cap-drop",
            "ALL",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        if settings.network == CommandNetwork::None {
            base_args.push("--unshare-net".into());
        }
        let mut arg = |parts: &[&dyn AsRef<std::ffi::OsStr>]| {
            base_args.extend(parts.iter().map(|p| p.as_ref().to_os_string()));
        };
        arg(&[&"--ro-bind", &"/usr", &"/usr"]);
        for dir in SYSTEM_DIRS {
            let host = Path::new("/").join(dir);
            match std::fs::read_link(&host) {
                Ok(target) => arg(&[&"--symlink", &target, &host]),
                Err(_) if host.is_dir() => arg(&[&"--ro-bind", &host, &host]),
                Err(_) => {}
            }
        }
        for file in ETC_FILES {
            let host = Path::new("/etc").join(file);
            arg(&[&"--ro-bind-try", &host, &host]);
        }
        arg(&[&"--proc", &"/proc", &"--dev", &"/dev", &"--tmpfs", &"/tmp"]);
        for path in &settings.read_only {
            let path = std::path::absolute(path)
                .with_context(|| format!("--command-read-only {}", path.display()))?;
            anyhow::ensure!(
                path.exists(),
                "--command-read-only {}: no such path",
                path.display()
            );
            arg(&[&"--ro-bind", &path, &path]);
        }
        let hidden = hidden
            .into_iter()
            .filter_map(|path| std::path::absolute(path).ok())
            .collect();
        Ok(Sandbox {
            bwrap,
            seccomp,
            base_args,
            hidden,
            limits: settings.limits.clone(),
        })
    }

    /// Run `true` in a sandbox on `work_dir`, as every command will run:
    /// the daemon refuses to start when that fails, saying why.
    pub async fn check(&self, work_dir: &Path) -> anyhow::Result<()> {
        let held = self
            .start(
                &format!("check-{}", std::process::id()),
                work_dir,
                &[],
                "true",
            )
            .await
            .map_err(|e| unavailable(&e.to_string()))?;
        let (mut child, cgroup) = held.release()?;
        let mut stderr = child.stderr.take();
        let status = child.wait().await?;
        let mut message = String::new();
        if let Some(stderr) = stderr.as_mut() {
            tokio::io::AsyncReadExt::read_to_string(stderr, &mut message).await?;
        }
        if let Some(cgroup) = cgroup {
            cgroup.remove();
        }
        if !status.success() {
            return Err(unavailable(message.trim()));
        }
        Ok(())
    }

    /// Start bwrap for `command` in `dir` with exactly `environment`, held
    /// before the command runs: its first process is in `name`'s cgroups
    /// (when the machine has them) once this returns.
    pub async fn start(
        &self,
        name: &str,
        dir: &Path,
        environment: &[(OsString, OsString)],
        command: &str,
    ) -> io::Result<Held> {
        let dir = std::path::absolute(dir)?;
        let (seccomp_read, mut seccomp_write) = io::pipe()?;
        seccomp_write.write_all(&self.seccomp)?;
        drop(seccomp_write);
        let (mut info_read, info_write) = io::pipe()?;
        let (block_read, block_write) = io::pipe()?;

        let mut bwrap = Command::new(&self.bwrap);
        bwrap.args(&self.base_args);
        bwrap.arg("--bind").arg(&dir).arg(&dir);
        for hidden in self.hidden.iter().filter(|h| h.starts_with(&dir)) {
            if hidden.is_dir() {
                bwrap.arg("--tmpfs").arg(hidden);
                bwrap.arg("--remount-ro").arg(hidden);
            } else if hidden.exists() {
                bwrap.arg("--ro-bind").arg("/dev/null").arg(hidden);
            }
        }
        bwrap.arg("--chdir").arg(&dir);
        bwrap.args(["--seccomp", "3", "--info-fd", "4", "--block-fd", "5", "--"]);
        bwrap.args(self.limits.rlimit_prefix());
        bwrap.arg("sh").arg("-c").arg(command);
        bwrap
            .env_clear()
            .envs(environment.iter().map(|(name, value)| (name, value)))
            .env("HOME", &dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        bwrap
            .fd_mappings(vec![
                FdMapping {
                    parent_fd: OwnedFd::from(seccomp_read),
                    child_fd: SECCOMP_FD,
                },
                FdMapping {
                    parent_fd: OwnedFd::from(info_write),
                    child_fd: INFO_FD,
                },
                FdMapping {
                    parent_fd: OwnedFd::from(block_read),
                    child_fd: BLOCK_FD,
                },
            ])
            .map_err(io::Error::other)?;
        let mut child = bwrap.spawn()?;
        // Our copies of the child's ends close with the command, so the
        // info pipe ends when bwrap has written it.
        drop(bwrap);
        let info = tokio::task::spawn_blocking(move || {
            let mut text = String::new();
            info_read.read_to_string(&mut text).map(|_| text)
        })
        .await
        .map_err(io::Error::other)
        .and_then(|read| read);
        let Some(sandbox_pid) = info.as_deref().ok().and_then(sandbox_pid) else {
            // bwrap failed before the sandbox existed: its reason is on stderr.
            let _ = child.start_kill();
            let mut reason = String::new();
            if let Some(stderr) = child.stderr.as_mut() {
                let _ = tokio::io::AsyncReadExt::read_to_string(stderr, &mut reason).await;
            }
            let _ = child.wait().await;
            return Err(io::Error::other(format!(
                "bwrap did not start the sandbox: {}",
                reason.trim()
            )));
        };
        let mut held = Held {
            child: Some(child),
            sandbox_pid,
            cgroup: None,
            release: Some(block_write),
        };
        if let Some(made) = self.limits.cgroup_for(name) {
            let cgroup = made?;
            // Held's drop removes it (and kills the sandbox) on failure.
            held.cgroup = Some(cgroup);
            if let Some(cgroup) = &held.cgroup {
                cgroup.attach(sandbox_pid)?;
            }
        }
        Ok(held)
    }

    /// The limits commands run with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// Why the sandbox cannot be made, with what to do about it.
fn unavailable(detail: &str) -> anyhow::Error {
    anyhow!(
        "the command sandbox cannot be made on this machine: {detail}. It needs unprivileged user \
         namespaces (kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, and on \
         Ubuntu kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap) \
         and bubblewrap 0.8 or later. Fix that, or start with --sandbox none to run commands \
         unsandboxed, as this user (see docs/sandbox.md)"
    )
}

/// The `child-pid` of bwrap's `--info-fd` JSON.
fn sandbox_pid(info: &str) -> Option<u32> {
    let info: serde_json::Value = serde_json::from_str(info).ok()?;
    u32::try_from(info.get("child-pid")?.as_u64()?).ok()
}

/// `name` on the daemon's PATH.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The system calls a command is refused (EPERM): reading or writing other
/// processes (ptrace, process_vm_*), the kernel keyrings, mounting and
/// namespaces, BPF and perf, kernel modules and kexec, io_uring (which
/// bypasses this filter's view of calls), userfaultfd, and host
/// administration (reboot, swap, accounting, quotas, the kernel log).
fn blocked_syscalls() -> Vec<i64> {
    vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_kcmp,
        libc::SYS_pidfd_getfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_mount_setattr,
        libc::SYS_setns,
        libc::SYS_unshare,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_userfaultfd,
        libc::SYS_open_by_handle_at,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_syslog,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_adjtimex,
    ]
}

/// The seccomp filter of [`blocked_syscalls`] for this architecture, as the
/// bytes bwrap's `--seccomp` reads.
pub fn seccomp_program() -> anyhow::Result<Vec<u8>> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| anyhow!("no seccomp filter for {}: {e:?}", std::env::consts::ARCH))?;
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> = blocked_syscalls()
        .into_iter()
        .map(|call| (call, Vec::new()))
        .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| anyhow!("building the seccomp filter: {e}"))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e| anyhow!("compiling the seccomp filter: {e}"))?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for instruction in program {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seccomp_program_is_whole_instructions() {
        let program = seccomp_program().unwrap();
        assert!(!program.is_empty());
        assert_eq!(program.len() % 8, 0);
    }

    #[test]
    fn the_sandbox_pid_is_read_from_bwraps_info() {
        let info = "{\n    \"child-pid\": 4242,\n    \"cgroup-namespace\": 1\n}\n";
        assert_eq!(sandbox_pid(info), Some(4242));
        assert_eq!(sandbox_pid(""), None);
    }
}
