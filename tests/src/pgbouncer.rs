//! A real PgBouncer (Debian's `pgbouncer` package) in front of a test
//! cluster, in the pool mode a test asks for, on a loopback port of its
//! own. Stopped when dropped.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use holdfast_db::cluster::LocalCluster;
use holdfast_db::connect::ConnectConfig;

use crate::scenario::free_port;
use crate::ScratchDir;

/// PgBouncer's pool modes.
#[derive(Clone, Copy, Debug)]
pub enum PoolMode {
    /// A server connection per client connection, for its whole life.
    Session,
    /// A server connection per transaction: clients share backends.
    Transaction,
}

pub struct PgBouncer {
    child: Child,
    port: u16,
    dir: ScratchDir,
}

impl PgBouncer {
    /// Start PgBouncer in `mode` in front of `cluster` (every database, its
    /// superuser, no password), and wait until it accepts connections.
    pub async fn start(cluster: &LocalCluster, mode: PoolMode) -> PgBouncer {
        let dir = ScratchDir::new("pgbouncer");
        let port = free_port();
        let mode = match mode {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        };
        std::fs::write(
            dir.join("userlist.txt"),
            format!("\"{}\" \"\"\n", holdfast_db::cluster::SUPERUSER),
        )
        .unwrap();
        std::fs::write(
            dir.join("pgbouncer.ini"),
            format!(
                "[databases]\n\
                 * = host={socket} port=5432\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {dir}/userlist.txt\n\
                 pool_mode = {mode}\n\
                 max_client_conn = 400\n\
                 default_pool_size = 40\n",
                socket = cluster.socket_dir().display(),
                dir = dir.display(),
            ),
        )
        .unwrap();
        let program = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)");
        let mut command = Command::new(program);
        // PgBouncer refuses to run as root; it must reach the cluster's
        // private socket as the cluster's user.
        if let Some(user) = cluster.os_user() {
            command.args(["-u", user]);
        }
        let log = std::fs::File::create(dir.join("pgbouncer.log")).unwrap();
        let child = command
            .arg(dir.join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start pgbouncer");
        let bouncer = PgBouncer { child, port, dir };
        let config = bouncer.config("postgres");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok((client, connection)) = config.connect().await {
                let task = tokio::spawn(connection);
                let ready = client.simple_query("SELECT 1").await.is_ok();
                drop(client);
                let _ = task.await;
                if ready {
                    return bouncer;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "pgbouncer did not accept connections; its log: {}",
                bouncer.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A connection config for `dbname` through this PgBouncer.
    pub fn config(&self, dbname: &str) -> ConnectConfig {
        crate::loopback_config(self.port, dbname)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
