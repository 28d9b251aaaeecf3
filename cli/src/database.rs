//! Which database to use: `HOLDFAST_DATABASE_URL`, or the embedded cluster:
//! `up` keeps one in `.holdfast/pg` of the directory it runs in; every other
//! command uses the nearest one, found the way git finds `.git` (here, then
//! each parent directory), and never creates one.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;
use holdfast_db::cluster::{ClusterOptions, LocalCluster};
use holdfast_db::connect::{self, ConnectConfig};
use holdfast_db::{migrate, store};
use tokio_postgres::config::Host;

/// The embedded cluster's home, relative to the working directory.
const EMBEDDED_DIR: &str = ".holdfast/pg";
const EMBEDDED_DBNAME: &str = "holdfast";

/// Which database a command opens (the server roles, `up`, `migrate` and
/// the administration commands; never the client or the machine daemon).
#[derive(Args)]
pub struct DatabaseArgs {
    /// Postgres URL. Unset: the embedded cluster in .holdfast/pg, which
    /// `up` creates in its directory and other commands find in theirs or
    /// the nearest directory above.
    #[arg(
        long = "database-url",
        env = "HOLDFAST_DATABASE_URL",
        hide_env_values = true,
        global = true
    )]
    database_url: Option<String>,
}

impl DatabaseArgs {
    /// The URL, else the nearest embedded cluster ([`Database::open`]).
    pub async fn open(&self) -> Result<Database> {
        Database::open(self.database_url.as_deref()).await
    }

    /// The URL, else this directory's embedded cluster, created on first
    /// use ([`Database::open_here`], for `up`).
    pub async fn open_here(&self) -> Result<Database> {
        Database::open_here(self.database_url.as_deref()).await
    }

    /// The URL, else the nearest embedded cluster, whose schema must be
    /// current: these commands never migrate (that is `holdfast migrate`'s
    /// job, or a server's at its start).
    pub async fn open_current(&self) -> Result<Database> {
        let db = self.open().await?;
        let (client, connection) = db.config.connect().await?;
        tokio::spawn(connection);
        let pending = migrate::pending(&client).await?;
        if !pending.is_empty() {
            bail!(
                "the database's schema is not current ({} to apply: {}): run `holdfast migrate` \
                 first (a server applies them too when it starts)",
                pending.len(),
                pending.join(", ")
            );
        }
        Ok(db)
    }
}

/// An open database: its connection config, and the embedded cluster that
/// serves it when no URL was given (stopped when this value drops).
pub struct Database {
    pub config: ConnectConfig,
    cluster: Option<LocalCluster>,
}

impl Database {
    /// `url`, else the nearest embedded cluster (an error saying how to
    /// name a database when there is none).
    async fn open(url: Option<&str>) -> Result<Database> {
        if let Some(url) = url {
            return Self::at_url(url);
        }
        let here = std::env::current_dir()?;
        let Some(found) = nearest_cluster(&here) else {
            bail!(
                "no database: HOLDFAST_DATABASE_URL is not set, and there is no embedded cluster \
                 ({EMBEDDED_DIR}, made by `holdfast up`) in {} or any directory above it. Run this \
                 command in the directory where `holdfast up` runs, or set HOLDFAST_DATABASE_URL \
                 (or --database-url) to your Postgres.",
                here.display()
            );
        };
        tracing::info!(cluster = %found.display(), "using the embedded Postgres of `holdfast up`");
        Self::embedded(found).await
    }

    /// For `up`: `url`, else the embedded cluster in this directory,
    /// created on first use.
    async fn open_here(url: Option<&str>) -> Result<Database> {
        match url {
            Some(url) => Self::at_url(url),
            None => Self::embedded(PathBuf::from(EMBEDDED_DIR)).await,
        }
    }

    fn at_url(url: &str) -> Result<Database> {
        Ok(Database {
            config: ConnectConfig::parse(url)?,
            cluster: None,
        })
    }

    async fn embedded(dir: PathBuf) -> Result<Database> {
        // A server a killed `up` left running is taken over, and stopped
        // when this process is done with it.
        let cluster = tokio::task::spawn_blocking(move || {
            LocalCluster::start_taking_over(&dir, &ClusterOptions::default())
        })
        .await??;
        tracing::info!(data_dir = %cluster.data_dir().display(), "embedded postgres is up");
        let admin = ConnectConfig::parse(&cluster.connection_string("postgres"))?;
        let (client, connection) = admin.connect().await?;
        tokio::spawn(connection);
        let exists = client
            .query_opt(
                "SELECT 1 FROM pg_database WHERE datname = $1",
                &[&EMBEDDED_DBNAME],
            )
            .await?
            .is_some();
        if !exists {
            client
                .batch_execute(&format!("CREATE DATABASE {EMBEDDED_DBNAME}"))
                .await?;
        }
        Ok(Database {
            config: ConnectConfig::parse(&cluster.connection_string(EMBEDDED_DBNAME))?,
            cluster: Some(cluster),
        })
    }

    /// Where the data lives, for people: the embedded cluster's directory,
    /// or the server's host and database (never the password).
    pub fn location(&self) -> String {
        if let Some(cluster) = &self.cluster {
            return format!("embedded Postgres in {}", cluster.data_dir().display());
        }
        let host = match self.config.postgres.get_hosts().first() {
            Some(Host::Tcp(host)) => host.clone(),
            Some(Host::Unix(path)) => path.display().to_string(),
            None => "localhost".into(),
        };
        format!(
            "Postgres at {host}, database {}",
            self.config.postgres.get_dbname().unwrap_or("(default)")
        )
    }

    /// How to reach the embedded cluster with psql (None for a URL: its
    /// owner knows how).
    pub fn psql_command(&self) -> Option<String> {
        let cluster = self.cluster.as_ref()?;
        let dbname = self.config.postgres.get_dbname().unwrap_or(EMBEDDED_DBNAME);
        Some(cluster.psql_command(dbname))
    }

    /// Close: stop the embedded cluster if this process started it (or
    /// took it over), and wait until it has stopped. Says what became of
    /// the database, for people.
    pub async fn close(self) -> Result<String> {
        let outcome = match &self.cluster {
            None => "database connections closed".to_owned(),
            Some(cluster) if cluster.stops_on_drop() => "embedded Postgres stopped".to_owned(),
            Some(cluster) => match cluster.owner() {
                Some(pid) => format!(
                    "embedded Postgres left running for the process that started it (pid {pid})"
                ),
                None => "embedded Postgres left running".to_owned(),
            },
        };
        tokio::task::spawn_blocking(move || drop(self)).await?;
        Ok(outcome)
    }

    /// Apply pending migrations. Every server role, `up` and `migrate`
    /// start here, so this first refuses a pooler that shares sessions
    /// between connections, before anything relies on one.
    pub async fn migrate(&self) -> Result<Vec<&'static str>> {
        connect::require_session_per_connection(&self.config, "HOLDFAST_DATABASE_URL").await?;
        // The error says why, in one line (TLS, certificate, password, ...).
        let (mut client, connection) = self.config.connect().await?;
        tokio::spawn(connection);
        Ok(migrate::migrate(&mut client).await?)
    }
}

/// The nearest directory's embedded cluster: `dir/.holdfast/pg`, else its
/// parent's, up to the root; only one with a cluster in it (`PG_VERSION`).
fn nearest_cluster(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .map(|d| d.join(EMBEDDED_DIR))
        .find(|pg| pg.join("data/PG_VERSION").is_file())
}

/// The queue overview from the DBA views: agents by state, leases by
/// worker, stuck agents. `json`: one document for scripts.
pub async fn print_status(db: &Database, json: bool) -> Result<()> {
    let (client, connection) = db.config.connect().await?;
    tokio::spawn(connection);
    let depth = store::queue_depth(&client).await?;
    let workers = store::worker_leases(&client).await?;
    let stuck = store::stuck_agents(&client, STUCK_SHOWN).await?;
    let unsandboxed = store::unsandboxed_machines(&client).await?;
    if json {
        let by_state: serde_json::Map<String, serde_json::Value> = depth
            .iter()
            .map(|(state, agents)| (state.clone(), (*agents).into()))
            .collect();
        let document = serde_json::json!({
            "queue_depth": by_state,
            "workers": workers,
            "stuck_agents": stuck,
            "unsandboxed_machines": unsandboxed,
        });
        println!("{}", serde_json::to_string_pretty(&document)?);
        return Ok(());
    }
    println!("agents by state:");
    for (state, agents) in depth {
        println!("  {state:<9} {agents}");
    }
    println!("workers holding leases: {}", workers.len());
    for worker in workers {
        let expiry = worker
            .oldest_lease_expires_at
            .map_or_else(|| "-".to_owned(), |t| t.to_rfc3339());
        println!(
            "  {:<30} {:>5} agents, next expiry {expiry}",
            worker.worker, worker.agents_held
        );
    }
    println!("stuck agents: {}", stuck.len());
    for agent in stuck {
        println!("  {}  {}", agent.agent_id, agent.reason);
    }
    for machine in unsandboxed {
        println!(
            "warning: machine {:?} (project {}) runs its commands unsandboxed (--sandbox none): \
             they can read its token and every file of its daemon's user (docs/sandbox.md)",
            machine.name, machine.project_id
        );
    }
    Ok(())
}

/// Stuck agents listed by `status` (the view itself has them all).
const STUCK_SHOWN: i64 = 20;
