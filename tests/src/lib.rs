//! Test support: real Postgres for every test.
//!
//! One shared cluster serves the whole test run (all test binaries, all
//! processes): the first process to need it starts it under a file lock and
//! leaves it running for the next runs. A template database is migrated once
//! per migration set; each test gets a fresh database cloned from it and
//! dropped when the test ends, so tests run in parallel and leave nothing.
//!
//! `HOLDFAST_TEST_DATABASE_URL` points the harness at an existing server
//! instead (a superuser URL: the harness creates and drops databases; its
//! `sslmode` / `sslrootcert`, or `PGSSLMODE` / `PGSSLROOTCERT`, apply to
//! every connection the tests and their child processes make).
//!
//! Fault tests that restart Postgres use [`private_cluster`] for a cluster of
//! their own.

pub mod browser;
pub mod counting_http;
pub mod event_schemas;
pub mod failover;
pub mod invariants;
pub mod mcp_server;
pub mod otlp_receiver;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use holdfast_db::cluster::{ClusterOptions, LocalCluster};
use holdfast_db::connect::{self, ConnectConfig};
use holdfast_db::migrate;
use tokio_postgres::Client;
use uuid::Uuid;

pub mod partition_proxy;
pub mod pgbouncer;
pub mod process;
pub mod scenario;
pub mod search_backend;
pub mod small_disk;
pub mod tls_cluster;
pub mod tls_server;
pub mod webhook_receiver;

/// The server the tests use: a connection config for its admin database.
struct Server {
    admin: ConnectConfig,
}

static SERVER: OnceLock<Server> = OnceLock::new();

fn server() -> &'static Server {
    SERVER.get_or_init(|| {
        if let Ok(url) = std::env::var("HOLDFAST_TEST_DATABASE_URL") {
            let admin = ConnectConfig::parse(&url).expect("HOLDFAST_TEST_DATABASE_URL");
            return Server { admin };
        }
        let base = shared_cluster_dir();
        std::fs::create_dir_all(&base).expect("create test cluster dir");
        // Serialize cluster creation across concurrently starting test processes.
        let lock = File::create(base.with_extension("lock")).expect("create lock file");
        lock.lock().expect("lock test cluster");
        let mut cluster = LocalCluster::start(
            &base,
            &ClusterOptions {
                fast_unsafe_fsync_off: true,
                max_connections: 1000,
            },
        )
        .expect("start the shared test cluster");
        // Left running for the other test processes and later runs.
        cluster.detach();
        let admin = ConnectConfig::parse(&cluster.connection_string("postgres")).unwrap();
        drop(lock);
        Server { admin }
    })
}

/// /tmp, so that the unprivileged user Postgres runs as (when tests run as
/// root) can reach it wherever the checkout lives. Keyed by the workspace
/// path, so two checkouts do not share a cluster.
fn shared_cluster_dir() -> PathBuf {
    let workspace = env!("CARGO_MANIFEST_DIR");
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in workspace.bytes() {
        hash = (hash ^ b as u64).wrapping_mul(0x100000001b3);
    }
    PathBuf::from(format!("/tmp/holdfast-test-cluster-{hash:016x}"))
}

async fn admin_client(config: &ConnectConfig) -> Client {
    let (client, connection) = config.connect().await.expect("connect to test server");
    tokio::spawn(connection);
    client
}

/// The migrated template for this migration set, created once per server.
async fn template_name(admin: &Client) -> String {
    let name = format!("holdfast_tpl_{}", migrate::fingerprint());
    // Advisory lock: one process builds the template, the others wait for it.
    admin
        .execute("SELECT pg_advisory_lock(4242)", &[])
        .await
        .unwrap();
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await
        .unwrap()
        .is_some();
    if !exists {
        let building = format!("{name}_building");
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)"))
            .await
            .unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {building}"))
            .await
            .unwrap();
        let mut config = server().admin.clone();
        config.postgres.dbname(&building);
        let (mut client, connection) = config.connect().await.unwrap();
        let task = tokio::spawn(connection);
        migrate::migrate(&mut client)
            .await
            .expect("migrate template");
        drop(client);
        let _ = task.await;
        // Renaming makes the finished template appear atomically.
        admin
            .batch_execute(&format!("ALTER DATABASE {building} RENAME TO {name}"))
            .await
            .unwrap();
    }
    admin
        .execute("SELECT pg_advisory_unlock(4242)", &[])
        .await
        .unwrap();
    name
}

/// A fresh, migrated database for one test; dropped when this value drops.
pub struct TestDb {
    pub name: String,
    pub config: ConnectConfig,
}

impl TestDb {
    pub async fn new() -> TestDb {
        let server = server();
        let admin = admin_client(&server.admin).await;
        let template = template_name(&admin).await;
        let name = format!("holdfast_test_{}", Uuid::new_v4().simple());
        admin
            .batch_execute(&format!(
                "CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY"
            ))
            .await
            .expect("create test database");
        let mut config = server.admin.clone();
        config.postgres.dbname(&name);
        TestDb { name, config }
    }

    /// An empty database, never migrated: for the runner's own tests.
    pub async fn empty() -> TestDb {
        let server = server();
        let admin = admin_client(&server.admin).await;
        let name = format!("holdfast_test_{}", Uuid::new_v4().simple());
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        let mut config = server.admin.clone();
        config.postgres.dbname(&name);
        TestDb { name, config }
    }

    /// A new connection of its own (its own session: for COMMIT, NOTIFY,
    /// several sessions, or killing one).
    pub async fn connect(&self) -> Client {
        let (client, connection) = self.config.connect().await.expect("connect");
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    pub fn pool(&self, size: usize) -> deadpool_postgres::Pool {
        connect::pool(self.config.clone(), size).unwrap()
    }

    /// The libpq connection string (TLS settings included), for child
    /// processes.
    pub fn url(&self) -> String {
        self.config.to_connection_string()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = server().admin.clone();
        let name = self.name.clone();
        // Drop runs outside any async context guarantee: use a thread with
        // its own small runtime, and wait for it so nothing is left behind.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let client = admin_client(&admin).await;
                let _ = client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
            });
        })
        .join();
    }
}

/// A cluster of the test's own, for fault tests that crash or restart
/// Postgres. It lives in a temporary directory and is stopped and removed
/// when the returned value drops.
pub struct PrivateCluster {
    pub cluster: LocalCluster,
    dir: PathBuf,
}

impl PrivateCluster {
    pub async fn start() -> PrivateCluster {
        let dir = PathBuf::from(format!("/tmp/holdfast-private-{}", Uuid::new_v4().simple()));
        let cluster = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || {
                LocalCluster::start(
                    &dir,
                    &ClusterOptions {
                        fast_unsafe_fsync_off: true,
                        max_connections: 200,
                    },
                )
            }
        })
        .await
        .unwrap()
        .expect("start private cluster");
        let config = ConnectConfig::parse(&cluster.connection_string("postgres")).unwrap();
        let (mut client, connection) = config.connect().await.unwrap();
        tokio::spawn(connection);
        migrate::migrate(&mut client)
            .await
            .expect("migrate private cluster");
        PrivateCluster { cluster, dir }
    }

    pub fn config(&self) -> ConnectConfig {
        ConnectConfig::parse(&self.cluster.connection_string("postgres")).unwrap()
    }
}

/// A streaming standby of a [`PrivateCluster`] (hot standby: it serves
/// reads), in a temporary directory removed when this value drops.
pub struct StandbyCluster {
    pub cluster: LocalCluster,
    dir: PathBuf,
}

impl PrivateCluster {
    /// Start a streaming standby of this cluster (`pg_basebackup -R`).
    pub async fn start_standby(&self) -> StandbyCluster {
        let dir = PathBuf::from(format!("/tmp/holdfast-standby-{}", Uuid::new_v4().simple()));
        let cluster =
            tokio::task::block_in_place(|| LocalCluster::start_standby(&self.cluster, &dir))
                .expect("start a standby");
        StandbyCluster { cluster, dir }
    }
}

impl StandbyCluster {
    /// The standby's copy of the primary's `postgres` database.
    pub fn config(&self) -> ConnectConfig {
        ConnectConfig::parse(&self.cluster.connection_string("postgres")).unwrap()
    }
}

impl Drop for StandbyCluster {
    fn drop(&mut self) {
        let _ = self.cluster.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = self.cluster.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh directory `/tmp/holdfast-{tag}-{uuid}`, removed with everything
/// in it when dropped. Derefs to its path.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new(tag: &str) -> ScratchDir {
        // /tmp, not $TMPDIR: an embedded Postgres started inside runs as
        // another user when the tests run as root, and must reach it.
        let path = PathBuf::from(format!(
            "/tmp/holdfast-{tag}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&path).expect("create a scratch directory");
        ScratchDir(path)
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Wait until `check` returns true, polling every 20 ms, for at most
/// `timeout`; panics with `what` on timeout. For conditions observable only
/// by looking (a row appears, a process exits), never a fixed sleep.
/// A config for `dbname` as the test superuser over TCP on 127.0.0.1:`port`
/// (a pooler or proxy in front of a test cluster).
pub fn loopback_config(port: u16, dbname: &str) -> holdfast_db::connect::ConnectConfig {
    holdfast_db::connect::ConnectConfig::parse(&format!(
        "host=127.0.0.1 port={port} user={} dbname={dbname} sslmode=disable",
        holdfast_db::cluster::SUPERUSER
    ))
    .unwrap()
}

pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until some session of `db` is blocked on a lock (pg_stat_activity),
/// to make a race happen on purpose.
pub async fn wait_for_lock_wait(observer: &Client, db: &str) {
    wait_for_lock_wait_in(observer, db, "%").await;
}

/// Wait until a session of `db` whose statement is LIKE `statement` is
/// blocked on a lock: a specific step held at a specific point.
pub async fn wait_for_lock_wait_in(observer: &Client, db: &str, statement: &str) {
    wait_until(
        Duration::from_secs(10),
        &format!("a session blocked on a lock (statement LIKE {statement:?})"),
        || async {
            observer
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                  WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE $2",
                    &[&db, &statement],
                )
                .await
                .map(|r| r.get::<_, i64>(0) > 0)
                .unwrap_or(false)
        },
    )
    .await;
}

/// A project and an agent with a valid default config; returns (project, agent).
pub async fn project_and_agent(client: &Client) -> (Uuid, Uuid) {
    let project: Uuid = client
        .query_one(
            "SELECT holdfast.ensure_project($1)",
            &[&format!("p{}", Uuid::new_v4().simple())],
        )
        .await
        .unwrap()
        .get(0);
    let agent = new_agent(client, project).await;
    (project, agent)
}

/// An agent with a valid default config in `project`.
pub async fn new_agent(client: &Client, project: Uuid) -> Uuid {
    client
        .query_one(
            "SELECT holdfast.create_agent($1, $2)",
            &[&project, &default_config()],
        )
        .await
        .unwrap()
        .get(0)
}

pub fn default_config() -> serde_json::Value {
    serde_json::json!({"model": {"provider": "anthropic", "name": "claude-test"}, "tools": []})
}

/// Runs `holdfast.maintenance_tick()` every 50 ms in this process (the same
/// SQL the maintenance process runs), reconnecting when Postgres restarts.
/// Stops when dropped.
pub struct MaintenanceLoop {
    task: tokio::task::JoinHandle<()>,
}

impl MaintenanceLoop {
    pub fn start(config: &ConnectConfig) -> MaintenanceLoop {
        let config = config.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok((client, connection)) = config.connect().await {
                    let connection = tokio::spawn(connection);
                    while holdfast_db::store::maintenance_tick(&client).await.is_ok() {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    connection.abort();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        MaintenanceLoop { task }
    }
}

impl Drop for MaintenanceLoop {
    fn drop(&mut self) {
        self.task.abort();
    }
}
pub mod api_server;
pub mod api_sse;
