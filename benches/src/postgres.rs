//! The bench's private Postgres: one cluster per bench run (fsync off, the
//! same helper the tests and `holdfast up` use), a fresh migrated database
//! per scenario, and the same-run baselines taken on it (pgbench, raw
//! NOTIFY round trips).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use holdfast_engine::cluster::{ClusterOptions, LocalCluster, SUPERUSER};
use holdfast_engine::{connect, migrate};
use serde_json::{json, Value};
use tokio::sync::OnceCell;
use tokio_postgres::{Client, Config, NoTls};

use crate::stats::{round3, Samples};

/// Room for a worker at concurrency 1,000 (its pool grows to concurrency +
/// 2 connections), 1,000 SSE clients' API, and the driver.
const MAX_CONNECTIONS: u32 = 1500;
const PGBENCH_DB: &str = "pgbench";

pub struct BenchCluster {
    cluster: LocalCluster,
    base_dir: PathBuf,
    /// The pgbench scale the `pgbench` database was initialised with.
    pgbench_scale: OnceCell<u32>,
}

impl BenchCluster {
    /// Create and start a new cluster in `base_dir` (which must not hold one).
    pub async fn start(base_dir: &Path) -> Result<BenchCluster> {
        if base_dir.exists() {
            bail!(
                "{} exists: remove it, or pick another --dir",
                base_dir.display()
            );
        }
        let dir = base_dir.to_path_buf();
        let cluster = tokio::task::spawn_blocking(move || {
            LocalCluster::start(
                &dir,
                &ClusterOptions {
                    fast_unsafe_fsync_off: true,
                    max_connections: MAX_CONNECTIONS,
                },
            )
        })
        .await??;
        Ok(BenchCluster {
            cluster,
            base_dir: base_dir.to_path_buf(),
            pgbench_scale: OnceCell::new(),
        })
    }

    /// Stop the server and delete the cluster's files.
    pub fn destroy(self) -> Result<()> {
        let BenchCluster {
            cluster, base_dir, ..
        } = self;
        cluster.stop()?;
        drop(cluster);
        std::fs::remove_dir_all(&base_dir)
            .with_context(|| format!("removing {}", base_dir.display()))
    }

    /// A libpq key/value URL for child processes; `application_name` tags
    /// their sessions in pg_stat_activity (how the driver sees them ready).
    pub fn url(&self, dbname: &str, application_name: &str) -> String {
        format!(
            "{} application_name={application_name}",
            self.cluster.connection_string(dbname)
        )
    }

    pub fn config(&self, dbname: &str) -> Result<Config> {
        Ok(connect::parse_config(
            &self.cluster.connection_string(dbname),
        )?)
    }

    pub async fn admin(&self) -> Result<Client> {
        connect_to(&self.config("postgres")?).await
    }

    /// Drop `name` if it exists, create it, and apply the migrations.
    pub async fn fresh_database(&self, name: &str) -> Result<Config> {
        self.drop_database(name).await?;
        self.admin()
            .await?
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await?;
        let config = self.config(name)?;
        let (mut client, connection) = config.connect(NoTls).await?;
        let task = tokio::spawn(connection);
        migrate::migrate(&mut client).await?;
        drop(client);
        let _ = task.await;
        Ok(config)
    }

    pub async fn drop_database(&self, name: &str) -> Result<()> {
        self.admin()
            .await?
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await?;
        Ok(())
    }

    pub async fn server_version(&self) -> Result<String> {
        let row = self
            .admin()
            .await?
            .query_one("SHOW server_version", &[])
            .await?;
        Ok(row.get(0))
    }

    /// The postmaster's pid (first line of `postmaster.pid`): its children
    /// are the backends whose CPU time the throughput scenario adds up.
    pub fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.cluster.data_dir().join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// `pgbench -N` (simple-update: one UPDATE, one SELECT, one INSERT per
    /// transaction) on this cluster now. The database is initialised at
    /// `scale` on first use. Returns the tps and the command line.
    pub async fn pgbench(&self, scale: u32, clients: u32, seconds: u32) -> Result<Value> {
        let pgbench = self
            .cluster
            .tool("pgbench")
            .ok_or_else(|| anyhow!("pgbench not found next to the Postgres binaries"))?;
        let initialised = *self
            .pgbench_scale
            .get_or_try_init(|| async {
                self.admin()
                    .await?
                    .batch_execute(&format!("CREATE DATABASE {PGBENCH_DB}"))
                    .await?;
                let scale_arg = scale.to_string();
                self.run_pgbench(&pgbench, &["-i", "-q", "-s", &scale_arg])
                    .await?;
                anyhow::Ok(scale)
            })
            .await?;
        let clients_arg = clients.to_string();
        let threads_arg = clients.clamp(1, 2).to_string();
        let seconds_arg = seconds.to_string();
        let args = [
            "-N",
            "-n",
            "-M",
            "prepared",
            "-c",
            &clients_arg,
            "-j",
            &threads_arg,
            "-T",
            &seconds_arg,
        ];
        let out = self.run_pgbench(&pgbench, &args).await?;
        let tps = out
            .lines()
            .find_map(|line| {
                line.strip_prefix("tps = ")?
                    .split_whitespace()
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .ok_or_else(|| anyhow!("no tps line in pgbench output:\n{out}"))?;
        Ok(json!({
            "pgbench_tps": round3(tps),
            "pgbench_command": format!("pgbench {} {PGBENCH_DB}", args.join(" ")),
            "pgbench_scale": initialised,
        }))
    }

    async fn run_pgbench(&self, pgbench: &Path, args: &[&str]) -> Result<String> {
        let out = tokio::process::Command::new(pgbench)
            .args(args)
            .args(["-h", &self.cluster.socket_dir().to_string_lossy()])
            .args(["-p", "5432", "-U", SUPERUSER, PGBENCH_DB])
            .stdin(Stdio::null())
            .output()
            .await
            .context("running pgbench")?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "pgbench {} failed:\n{stdout}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(stdout)
    }
}

/// A new session on `config`, its connection driven by a task.
pub async fn connect_to(config: &Config) -> Result<Client> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// What Postgres alone gives: `NOTIFY` committed on one session until the
/// notification reaches a LISTENing session of this process, `samples`
/// times. The floor under wake latency and stream fan-out delay.
pub async fn notify_round_trip(config: &Config, samples: usize) -> Result<Samples> {
    let mut listener = connect::listen(config, &["bench_ping"]).await?;
    let sender = connect_to(config).await?;
    let mut out = Samples::new();
    for i in 0..samples {
        let payload = i.to_string();
        let started = Instant::now();
        sender
            .execute("SELECT pg_notify('bench_ping', $1)", &[&payload])
            .await?;
        loop {
            let n = tokio::time::timeout(Duration::from_secs(5), listener.notifications.recv())
                .await
                .context("waiting for a NOTIFY")?
                .ok_or_else(|| anyhow!("listen session closed"))?;
            if n.payload() == payload {
                break;
            }
        }
        out.push(started.elapsed());
    }
    Ok(out)
}

/// The next transaction id to be assigned, read at a quiet moment (no
/// writer in flight: the snapshot's xmax is then the next xid). Its
/// difference over a run is the number of transactions that wrote
/// (committed or not): read-only transactions take no xid; NOTIFY takes one.
pub async fn next_xid(client: &Client) -> Result<i64> {
    let row = client
        .query_one(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint",
            &[],
        )
        .await?;
    Ok(row.get(0))
}
