//! Which database to use: `HOLDFAST_DATABASE_URL`, or the embedded cluster.

use std::path::Path;

use anyhow::{Context, Result};
use holdfast_engine::cluster::{ClusterOptions, LocalCluster};
use holdfast_engine::{connect, migrate, store};
use tokio_postgres::{Config, NoTls};

/// The embedded cluster's home, relative to the working directory.
const EMBEDDED_DIR: &str = ".holdfast/pg";
const EMBEDDED_DBNAME: &str = "holdfast";

/// An open database: its connection config, and the embedded cluster that
/// serves it when no URL was given (stopped when this value drops).
pub struct Database {
    pub config: Config,
    _cluster: Option<LocalCluster>,
}

impl Database {
    pub async fn open(url: Option<&str>) -> Result<Database> {
        if let Some(url) = url {
            return Ok(Database {
                config: connect::parse_config(url)?,
                _cluster: None,
            });
        }
        let cluster = tokio::task::spawn_blocking(|| {
            LocalCluster::start(Path::new(EMBEDDED_DIR), &ClusterOptions::default())
        })
        .await??;
        tracing::info!(data_dir = %cluster.data_dir().display(), "embedded postgres is up");
        let admin = connect::parse_config(&cluster.connection_string("postgres"))?;
        let (client, connection) = admin.connect(NoTls).await?;
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
            config: connect::parse_config(&cluster.connection_string(EMBEDDED_DBNAME))?,
            _cluster: Some(cluster),
        })
    }

    pub async fn migrate(&self) -> Result<Vec<&'static str>> {
        let (mut client, connection) = self
            .config
            .connect(NoTls)
            .await
            .context("connecting to Postgres")?;
        tokio::spawn(connection);
        Ok(migrate::migrate(&mut client).await?)
    }
}

pub async fn print_status(db: &Database) -> Result<()> {
    let (client, connection) = db.config.connect(NoTls).await?;
    tokio::spawn(connection);
    println!("agents by state:");
    for (state, agents) in store::queue_depth(&client).await? {
        println!("  {state:<9} {agents}");
    }
    let leases = client
        .query(
            "SELECT worker, agents_held, oldest_lease_expires_at::text FROM holdfast.worker_leases ORDER BY worker",
            &[],
        )
        .await?;
    println!("workers holding leases: {}", leases.len());
    for row in leases {
        println!(
            "  {:<30} {:>5} agents, next expiry {}",
            row.get::<_, String>(0),
            row.get::<_, i64>(1),
            row.get::<_, String>(2)
        );
    }
    let stuck = client
        .query(
            "SELECT agent_id::text, reason FROM holdfast.stuck_agents LIMIT 20",
            &[],
        )
        .await?;
    println!("stuck agents: {}", stuck.len());
    for row in stuck {
        println!("  {}  {}", row.get::<_, String>(0), row.get::<_, String>(1));
    }
    Ok(())
}
