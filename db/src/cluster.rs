//! A private Postgres cluster from the binaries on this machine.
//!
//! Used when no `HOLDFAST_DATABASE_URL` is set (`holdfast up`, `demo`,
//! `migrate`, `status`), by the test harness, and by fault tests that need a
//! cluster of their own to restart. The server listens on a Unix socket only.
//!
//! Postgres refuses to run as root. When this process is root, the cluster is
//! initialised and run as an unprivileged OS user (`postgres` if it exists,
//! else `nobody`), and its directories are handed to that user. A new
//! cluster in a directory that user cannot enter (under /root, or any 0700
//! directory) lives in `/var/lib/holdfast/<hash>` instead, reached through
//! a symlink at its place.
//!
//! Who stops the server: the process that started it, when it drops its
//! [`LocalCluster`]. It records itself in `base_dir/owner` (pid and start
//! time), so [`LocalCluster::start_taking_over`] can tell a server that a
//! killed process left running (stopped on drop like one it started) from
//! one a live process uses (left alone).
//!
//! Local connections are trusted (no password), so the socket directory is
//! the cluster's only lock: it is private (0700) to the user the server runs
//! as, and an existing one that is not a directory of that user (or of us)
//! is refused. Whoever can reach the socket is superuser, and a superuser
//! can run programs (`COPY … TO PROGRAM`). TCP is off (`listen_addresses =
//! ''`), and `pg_hba.conf` rejects TCP connections should it be turned on.

use std::fs;
use std::os::unix::fs::{lchown, DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Settings written into a new cluster's `postgresql.conf`.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Trade durability against an OS crash for speed (tests, benches,
    /// demo): `fsync = off`. Commits still write their WAL to the OS at
    /// COMMIT (`synchronous_commit` stays on), so a Postgres crash
    /// (`pg_ctl stop -m immediate`) loses nothing committed — fault tests
    /// rely on that; only a machine crash could.
    pub fast_unsafe_fsync_off: bool,
    pub max_connections: u32,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            fast_unsafe_fsync_off: false,
            max_connections: 200,
        }
    }
}

/// A Postgres cluster in `base_dir` (data in `base_dir/data`, log in
/// `base_dir/postgres.log`), listening on a socket in `socket_dir`.
#[derive(Debug)]
pub struct LocalCluster {
    base_dir: PathBuf,
    socket_dir: PathBuf,
    bin_dir: PathBuf,
    run_as: Option<OsUser>,
    /// Stop the server when this value is dropped (false when it was already
    /// running before we came, e.g. another `holdfast` process started it).
    stop_on_drop: bool,
}

#[derive(Clone, Debug)]
struct OsUser {
    name: String,
    uid: u32,
    gid: u32,
}

/// The superuser every local cluster is created with.
pub const SUPERUSER: &str = "holdfast";
const PORT: u16 = 5432;
/// Where a root-started cluster lives when its user cannot reach its place.
const REACHABLE_HOME: &str = "/var/lib/holdfast";

impl LocalCluster {
    /// Start (creating it first if needed) the cluster in `base_dir`. If a
    /// server is already running there, it is reused and not stopped on drop.
    pub fn start(base_dir: &Path, options: &ClusterOptions) -> Result<LocalCluster> {
        Self::open(base_dir, options, false)
    }

    /// [`start`](Self::start), except that a server running there whose
    /// owner (the process that started it) is gone is taken over: stopped
    /// on drop, as if this process had started it. For `holdfast` commands,
    /// so a killed `up` leaves no Postgres running past the next one.
    pub fn start_taking_over(base_dir: &Path, options: &ClusterOptions) -> Result<LocalCluster> {
        Self::open(base_dir, options, true)
    }

    fn open(base_dir: &Path, options: &ClusterOptions, take_over: bool) -> Result<LocalCluster> {
        let bin_dir = find_bin_dir()?;
        let run_as = if running_as_root() {
            Some(unprivileged_user()?)
        } else {
            None
        };
        if let Some(user) = &run_as {
            place_where_reachable(base_dir, user)?;
        }
        fs::create_dir_all(base_dir).map_err(io_err("create", base_dir))?;
        let base_dir = base_dir
            .canonicalize()
            .map_err(io_err("resolve", base_dir))?;
        let socket_dir = socket_dir_for(&base_dir);
        let mut cluster = LocalCluster {
            base_dir,
            socket_dir,
            bin_dir,
            run_as,
            stop_on_drop: false,
        };
        cluster.prepare_dirs()?;
        if !cluster.data_dir().join("PG_VERSION").exists() {
            cluster.initdb(options)?;
        }
        if cluster.is_running() {
            if take_over && cluster.owner().is_none() {
                tracing::info!(data_dir = %cluster.data_dir().display(), "taking over a Postgres left running by a process that is gone");
                cluster.record_owner()?;
                cluster.stop_on_drop = true;
            }
            return Ok(cluster);
        }
        cluster.start_server()?;
        cluster.record_owner()?;
        cluster.stop_on_drop = true;
        Ok(cluster)
    }

    /// Whether dropping this value stops the server.
    pub fn stops_on_drop(&self) -> bool {
        self.stop_on_drop
    }

    /// The live process that started the running server (its pid), if it
    /// is still running.
    pub fn owner(&self) -> Option<u32> {
        let recorded = fs::read_to_string(self.owner_file()).ok()?;
        let (pid, started) = recorded.trim().split_once(' ')?;
        let pid: u32 = pid.parse().ok()?;
        (process_start_time(pid)?.as_str() == started).then_some(pid)
    }

    fn owner_file(&self) -> PathBuf {
        self.base_dir.join("owner")
    }

    fn record_owner(&self) -> Result<()> {
        let pid = std::process::id();
        let started = process_start_time(pid).unwrap_or_default();
        let file = self.owner_file();
        fs::write(&file, format!("{pid} {started}\n")).map_err(io_err("write", &file))
    }

    /// Start a streaming standby of `primary` in `base_dir`: a base backup
    /// (`pg_basebackup -R`, its WAL streamed along) that then follows the
    /// primary's WAL and serves reads (hot standby) on a socket of its own.
    /// Stopped on drop. For the API's read replica (tests, benches).
    pub fn start_standby(primary: &LocalCluster, base_dir: &Path) -> Result<LocalCluster> {
        fs::create_dir_all(base_dir).map_err(io_err("create", base_dir))?;
        let base_dir = base_dir
            .canonicalize()
            .map_err(io_err("resolve", base_dir))?;
        let mut standby = LocalCluster {
            socket_dir: socket_dir_for(&base_dir),
            base_dir,
            bin_dir: primary.bin_dir.clone(),
            run_as: primary.run_as.clone(),
            stop_on_drop: false,
        };
        standby.prepare_dirs()?;
        let data = standby.data_dir();
        let out = standby
            .command("pg_basebackup")
            .args(["-h", &primary.socket_dir.to_string_lossy()])
            .args(["-p", &PORT.to_string(), "-U", SUPERUSER])
            .args(["-D", &data.to_string_lossy()])
            // -R: standby.signal and primary_conninfo, so it follows.
            .args(["-R", "-X", "stream", "--checkpoint=fast", "--no-sync"])
            .output()
            .map_err(|e| Error::EmbeddedPostgres(format!("could not run pg_basebackup: {e}")))?;
        if !out.status.success() {
            return Err(Error::EmbeddedPostgres(format!(
                "pg_basebackup failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        // The copied configuration names the primary's socket; the last
        // setting in the file wins.
        let conf_path = data.join("postgresql.conf");
        let mut conf = fs::read_to_string(&conf_path).map_err(io_err("read", &conf_path))?;
        conf.push_str(&format!(
            "\n# Added by Holdfast: a standby on its own socket.\n\
             unix_socket_directories = '{}'\n",
            standby.socket_dir.display()
        ));
        fs::write(&conf_path, conf).map_err(io_err("write", &conf_path))?;
        standby.start_server()?;
        standby.stop_on_drop = true;
        Ok(standby)
    }

    /// Keep the server running after this value is dropped.
    pub fn detach(&mut self) {
        self.stop_on_drop = false;
    }

    /// Where the cluster's files are (its place, with symlinks resolved).
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    pub fn data_dir(&self) -> PathBuf {
        self.base_dir.join("data")
    }

    /// The OS user the server runs as when we are root (else ourselves):
    /// a program that must reach its private socket runs as this user too.
    pub fn os_user(&self) -> Option<&str> {
        self.run_as.as_ref().map(|user| user.name.as_str())
    }

    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    pub fn log_file(&self) -> PathBuf {
        self.base_dir.join("postgres.log")
    }

    /// How a person reaches `dbname` on this cluster with psql (as the
    /// user who started it, or root).
    pub fn psql_command(&self, dbname: &str) -> String {
        format!(
            "psql -h {} -p {PORT} -U {SUPERUSER} {dbname}",
            self.socket_dir.display()
        )
    }

    /// A libpq-style connection string for `dbname` on this cluster.
    pub fn connection_string(&self, dbname: &str) -> String {
        format!(
            "host={} port={} user={} dbname={}",
            self.socket_dir.display(),
            PORT,
            SUPERUSER,
            dbname
        )
    }

    pub fn is_running(&self) -> bool {
        self.pg_ctl(&["status", "-D", &self.data_dir().to_string_lossy()])
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    /// Stop the server and wait for it (`pg_ctl stop -m fast`).
    pub fn stop(&self) -> Result<()> {
        self.stop_mode("fast")
    }

    /// Crash the server (`pg_ctl stop -m immediate`: no checkpoint, recovery
    /// from WAL on the next start) — for fault tests.
    pub fn crash(&self) -> Result<()> {
        self.stop_mode("immediate")
    }

    /// SIGKILL the server: the postmaster and every process it started, as
    /// when its machine dies (no shutdown, no checkpoint, nothing flushed
    /// after the kill) — for failover tests.
    pub fn kill(&self) -> Result<()> {
        let pid_file = self.data_dir().join("postmaster.pid");
        let text = fs::read_to_string(&pid_file).map_err(io_err("read", &pid_file))?;
        let postmaster: i32 = text
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or_else(|| Error::EmbeddedPostgres(format!("no pid in {}", pid_file.display())))?;
        let children = children_of(postmaster);
        for pid in std::iter::once(postmaster).chain(children) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        Ok(())
    }

    /// Promote a standby to primary (`pg_ctl promote`), waiting until it
    /// accepts writes.
    pub fn promote(&self) -> Result<()> {
        let out = self.pg_ctl(&["promote", "-D", &self.data_dir().to_string_lossy(), "-w"])?;
        if !out.status.success() {
            return Err(Error::EmbeddedPostgres(format!(
                "pg_ctl promote failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// Start the server again after [`stop`](Self::stop) or [`crash`](Self::crash).
    pub fn restart(&self) -> Result<()> {
        self.start_server()
    }

    /// A tool from the cluster's binaries (e.g. `pgbench`, `psql`), if present.
    pub fn tool(&self, name: &str) -> Option<PathBuf> {
        let p = self.bin_dir.join(name);
        p.exists().then_some(p)
    }

    fn stop_mode(&self, mode: &str) -> Result<()> {
        let out = self.pg_ctl(&[
            "stop",
            "-D",
            &self.data_dir().to_string_lossy(),
            "-m",
            mode,
            "-w",
        ])?;
        if !out.status.success() && self.is_running() {
            return Err(Error::EmbeddedPostgres(format!(
                "pg_ctl stop failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    fn prepare_dirs(&self) -> Result<()> {
        self.prepare_socket_dir()?;
        if let Some(user) = &self.run_as {
            lchown(&self.base_dir, Some(user.uid), Some(user.gid))
                .map_err(io_err("chown", &self.base_dir))?;
            if let Ok(entries) = fs::read_dir(&self.base_dir) {
                for entry in entries.flatten() {
                    let _ = lchown(entry.path(), Some(user.uid), Some(user.gid));
                }
            }
        }
        Ok(())
    }

    /// The socket directory, private (0700) to the user the server runs as.
    /// Its name under /tmp is predictable, so an existing entry must be a
    /// real directory (not a symlink) owned by that user or by us; /tmp's
    /// sticky bit then keeps others from swapping it.
    fn prepare_socket_dir(&self) -> Result<()> {
        let dir = &self.socket_dir;
        match fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create", dir)(e)),
        }
        let found = fs::symlink_metadata(dir).map_err(io_err("inspect", dir))?;
        let us = effective_uid();
        let server = self.run_as.as_ref().map_or(us, |user| user.uid);
        if !found.file_type().is_dir() {
            return Err(Error::EmbeddedPostgres(format!(
                "{} is not a directory (a symlink?): the cluster's socket must live in a                  private directory; remove it and start again",
                dir.display()
            )));
        }
        if found.uid() != us && found.uid() != server {
            return Err(Error::EmbeddedPostgres(format!(
                "{} belongs to uid {}, not to the user Postgres runs as (uid {server}):                  someone else created it; remove it and start again",
                dir.display(),
                found.uid()
            )));
        }
        if let Some(user) = &self.run_as {
            lchown(dir, Some(user.uid), Some(user.gid)).map_err(io_err("chown", dir))?;
        }
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err("chmod", dir))
    }

    fn initdb(&self, options: &ClusterOptions) -> Result<()> {
        let data = self.data_dir();
        let out = self
            .command("initdb")
            .args(["-D", &data.to_string_lossy()])
            .args([
                "-U",
                SUPERUSER,
                // Trust on the private socket only; TCP, should someone
                // turn it on, has no way in.
                "--auth-local=trust",
                "--auth-host=reject",
                "-E",
                "UTF8",
                "--no-instructions",
            ])
            .args(["--locale=C"])
            // A cluster that will run with fsync off need not be synced at
            // creation either: skips fsyncing every file initdb wrote
            // (0.05–0.1 s per cluster on this machine's disk; more on slow ones).
            .args(options.fast_unsafe_fsync_off.then_some("--no-sync"))
            .output()
            .map_err(|e| Error::EmbeddedPostgres(format!("could not run initdb: {e}")))?;
        if !out.status.success() {
            return Err(Error::EmbeddedPostgres(format!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let mut conf = format!(
            "\n# Added by Holdfast: a private cluster on a Unix socket.\n\
             listen_addresses = ''\n\
             unix_socket_directories = '{}'\n\
             port = {}\n\
             max_connections = {}\n",
            self.socket_dir.display(),
            PORT,
            options.max_connections
        );
        if options.fast_unsafe_fsync_off {
            conf.push_str("fsync = off\nfull_page_writes = off\n");
        }
        let conf_path = data.join("postgresql.conf");
        let mut existing = fs::read_to_string(&conf_path).map_err(io_err("read", &conf_path))?;
        existing.push_str(&conf);
        fs::write(&conf_path, existing).map_err(io_err("write", &conf_path))?;
        Ok(())
    }

    fn start_server(&self) -> Result<()> {
        // A crash (or a killed test run) can leave a stale socket lock file
        // behind; Postgres removes stale ones itself when the pid is gone.
        let out = self.pg_ctl(&[
            "start",
            "-D",
            &self.data_dir().to_string_lossy(),
            "-l",
            &self.log_file().to_string_lossy(),
            "-w",
            "-t",
            "60",
        ])?;
        if !out.status.success() {
            let log = fs::read_to_string(self.log_file()).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            return Err(Error::EmbeddedPostgres(format!(
                "pg_ctl start failed: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )));
        }
        Ok(())
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<Output> {
        self.command("pg_ctl")
            .args(args)
            .output()
            .map_err(|e| Error::EmbeddedPostgres(format!("could not run pg_ctl: {e}")))
    }

    /// A command for one of the cluster's binaries, as the unprivileged user
    /// when we are root.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin_dir.join(program));
        cmd.current_dir(&self.base_dir);
        // The server must outlive a Ctrl-C sent to our process group, so that
        // we (not the terminal) decide when and how it stops.
        cmd.process_group(0);
        if let Some(user) = &self.run_as {
            cmd.uid(user.uid).gid(user.gid);
            cmd.env("USER", &user.name).env("HOME", &self.base_dir);
        }
        cmd
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if self.stop_on_drop {
            match self.stop() {
                Ok(()) => {
                    let _ = fs::remove_file(self.owner_file());
                }
                Err(e) => tracing::warn!(error = %e, "stopping embedded postgres"),
            }
        }
    }
}

/// A process's start time (clock ticks after boot, from /proc/PID/stat), which
/// tells it from a later process given the same pid.
fn process_start_time(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the parenthesised command name: state is field 3, starttime 22.
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    fields.get(19).map(|s| (*s).to_owned())
}

/// When `user` cannot enter the directories above `base_dir` and no cluster
/// is there yet, put it in [`REACHABLE_HOME`] and a symlink at `base_dir`.
/// A symlink already there is followed as it is; files already there that
/// the user cannot reach are an error that says what to do.
fn place_where_reachable(base_dir: &Path, user: &OsUser) -> Result<()> {
    let parent = match base_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(io_err("create", &parent))?;
    let parent = parent.canonicalize().map_err(io_err("resolve", &parent))?;
    let place = parent.join(base_dir.file_name().unwrap_or_default());
    let Some(blocked) = unreachable_ancestor(&place, user) else {
        return Ok(());
    };
    if fs::symlink_metadata(&place).is_ok_and(|m| m.file_type().is_symlink()) {
        return Ok(());
    }
    let hash = Sha256::digest(place.to_string_lossy().as_bytes());
    let home = Path::new(REACHABLE_HOME).join(&hex::encode(hash)[..12]);
    let cannot = |why: String| {
        Error::EmbeddedPostgres(format!(
            "running as root, Postgres runs as {} (uid {}), which cannot enter {} (mode {:o}); {why}. \
             Start Holdfast from a directory that user can reach (e.g. under /srv or /tmp), let it \
             in (`chmod o+x {}`), or set HOLDFAST_DATABASE_URL to a Postgres of your own.",
            user.name,
            user.uid,
            blocked.display(),
            fs::metadata(&blocked).map_or(0, |m| m.mode() & 0o7777),
            blocked.display(),
        ))
    };
    if fs::read_dir(&place).is_ok_and(|mut d| d.next().is_some()) {
        return Err(cannot(format!(
            "{} already holds files, so the cluster stays there",
            place.display()
        )));
    }
    let elsewhere = |e: Error| {
        cannot(format!(
            "its cluster could not go to {} instead ({e})",
            home.display()
        ))
    };
    fs::create_dir_all(&home).map_err(|e| elsewhere(io_err("create", &home)(e)))?;
    lchown(&home, Some(user.uid), Some(user.gid))
        .map_err(|e| elsewhere(io_err("chown", &home)(e)))?;
    fs::set_permissions(&home, fs::Permissions::from_mode(0o700))
        .map_err(|e| elsewhere(io_err("chmod", &home)(e)))?;
    if place.exists() {
        fs::remove_dir(&place).map_err(|e| elsewhere(io_err("remove", &place)(e)))?;
    }
    std::os::unix::fs::symlink(&home, &place).map_err(|e| elsewhere(io_err("link", &place)(e)))?;
    tracing::info!(
        place = %place.display(),
        data = %home.display(),
        user = %user.name,
        "the cluster's user cannot enter {}: its files are in {} (linked from its place)",
        blocked.display(),
        home.display()
    );
    Ok(())
}

/// The first directory above `path` (from the root down) that `user` may
/// not pass through (no search permission for it as owner, group or other;
/// supplementary groups are not counted).
fn unreachable_ancestor(path: &Path, user: &OsUser) -> Option<PathBuf> {
    let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
    ancestors.reverse();
    ancestors.into_iter().find_map(|dir| {
        let meta = fs::metadata(dir).ok()?;
        let mode = meta.mode();
        let search = if meta.uid() == user.uid {
            mode & 0o100
        } else if meta.gid() == user.gid {
            mode & 0o010
        } else {
            mode & 0o001
        };
        (search == 0).then(|| dir.to_path_buf())
    })
}

/// Where the Postgres binaries are: `$PATH` first, then Debian's layout
/// (`/usr/lib/postgresql/<version>/bin`, newest first).
pub fn find_bin_dir() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                // Resolve symlinks so sibling tools (pgbench) are found too.
                let resolved = dir.join("initdb").canonicalize().ok();
                return Ok(resolved
                    .and_then(|p| p.parent().map(Path::to_path_buf))
                    .unwrap_or(dir));
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        Error::EmbeddedPostgres(
            "no PostgreSQL server binaries found (initdb, pg_ctl) on PATH or in \
             /usr/lib/postgresql/*/bin. Install them (Debian/Ubuntu: \
             `apt-get install postgresql`), or set HOLDFAST_DATABASE_URL to use an \
             existing server."
                .into(),
        )
    })
}

/// Socket paths are limited to ~107 bytes, so the socket lives in a short
/// directory under /tmp named after the cluster's path.
fn socket_dir_for(base_dir: &Path) -> PathBuf {
    let hash = Sha256::digest(base_dir.to_string_lossy().as_bytes());
    PathBuf::from(format!("/tmp/holdfast-{}", &hex::encode(hash)[..12]))
}

/// The processes whose parent is `parent` (from /proc).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // After the parenthesised command name: state, then ppid.
                    let (_, rest) = stat.rsplit_once(") ")?;
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

fn running_as_root() -> bool {
    effective_uid() == 0
}

fn effective_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// `postgres` if that user exists, else `nobody` (by the system's user
/// database, as getpwnam_r reads it).
fn unprivileged_user() -> Result<OsUser> {
    ["postgres", "nobody"]
        .iter()
        .find_map(|want| match nix::unistd::User::from_name(want) {
            Ok(Some(user)) if !user.uid.is_root() => Some(OsUser {
                name: user.name,
                uid: user.uid.as_raw(),
                gid: user.gid.as_raw(),
            }),
            _ => None,
        })
        .ok_or_else(|| {
            Error::EmbeddedPostgres(
                "running as root, and Postgres refuses to: no unprivileged user \
                 (postgres or nobody) to run it as. Create one (`useradd postgres`) \
                 or run Holdfast as a normal user."
                    .into(),
            )
        })
}

fn io_err<'a>(what: &'a str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::EmbeddedPostgres(format!("{what} {}: {e}", path.display()))
}
