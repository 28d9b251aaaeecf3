//! A primary and a synchronous streaming standby, as managed HA runs them
//! (`synchronous_standby_names`), for failover tests: the primary is
//! SIGKILLed, the standby promoted, and a new standby built where the dead
//! primary was, so the pair can fail over again. Clients reach it with one
//! multi-host config (`target_session_attrs=read-write`) that finds
//! whichever side is the primary. Both are stopped and removed on drop.
//! [`FailoverPair::serve_tls`] makes both sides serve TLS over TCP too, as a
//! managed Postgres does, for clients that connect with `sslmode=verify-full`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use holdfast_db::cluster::{ClusterOptions, LocalCluster, SUPERUSER};
use holdfast_db::connect::ConnectConfig;
use holdfast_db::migrate;
use tokio_postgres::Client;
use uuid::Uuid;

use rcgen::{CertificateParams, DnType, KeyPair};

use crate::tls_cluster::{install_server_certificate, PASSWORD};
use crate::tls_server::certificate_authority;
use crate::wait_until;

/// The TCP address side `i` serves TLS on after [`FailoverPair::serve_tls`]
/// (loopback has all of 127.0.0.0/8, so both sides keep port 5432, which
/// also names their sockets).
fn tls_address(side: usize) -> String {
    format!("127.0.0.{}", side + 2)
}

pub struct FailoverPair {
    /// Index 0 and 1 are the two places (data and socket directories);
    /// `primary` says which one is the primary now.
    sides: [Option<LocalCluster>; 2],
    dirs: [PathBuf; 2],
    primary: usize,
}

impl FailoverPair {
    /// A migrated primary and its synchronous standby.
    pub async fn start() -> FailoverPair {
        let dirs = [0, 1].map(|_| {
            PathBuf::from(format!(
                "/tmp/holdfast-failover-{}",
                Uuid::new_v4().simple()
            ))
        });
        let first = dirs[0].clone();
        let primary = tokio::task::spawn_blocking(move || {
            LocalCluster::start(
                &first,
                &ClusterOptions {
                    fast_unsafe_fsync_off: true,
                    max_connections: 200,
                },
            )
        })
        .await
        .unwrap()
        .expect("start the primary");
        let config = ConnectConfig::parse(&primary.connection_string("postgres")).unwrap();
        let (mut client, connection) = config.connect().await.unwrap();
        tokio::spawn(connection);
        migrate::migrate(&mut client)
            .await
            .expect("migrate the primary");
        let mut pair = FailoverPair {
            sides: [Some(primary), None],
            dirs,
            primary: 0,
        };
        pair.build_standby().await;
        pair
    }

    /// Every client's config: both sides, the writable one chosen at each
    /// connect.
    pub fn config(&self) -> ConnectConfig {
        let sockets: Vec<String> = (0..2)
            .map(|side| socket_of(self.sides[side].as_ref().unwrap()))
            .collect();
        ConnectConfig::parse(&format!(
            "host={} port=5432,5432 user={} dbname=postgres target_session_attrs=read-write",
            sockets.join(","),
            holdfast_db::cluster::SUPERUSER
        ))
        .unwrap()
    }

    /// Make both sides serve TLS over TCP as well (they keep their sockets,
    /// which replication and this harness use): side `i` on
    /// `127.0.0.{i+2}:5432`, with one certificate for both addresses from a
    /// CA made here, `hostssl` lines with SCRAM passwords, and the
    /// superuser's password [`PASSWORD`]. Each side is restarted (the
    /// standby first). For one failover: a standby built later copies the
    /// primary's configuration, its address included.
    pub async fn serve_tls(&mut self) {
        let primary = connect_to(self.sides[self.primary].as_ref().unwrap()).await;
        primary
            .batch_execute(&format!("ALTER ROLE {SUPERUSER} PASSWORD '{PASSWORD}'"))
            .await
            .unwrap();
        let (ca, ca_pem) = certificate_authority("Holdfast failover test CA");
        let server_key = KeyPair::generate().unwrap();
        let mut server = CertificateParams::new(vec![tls_address(0), tls_address(1)]).unwrap();
        server
            .distinguished_name
            .push(DnType::CommonName, "holdfast-failover-pair");
        let server_cert = server.signed_by(&server_key, &ca).unwrap();
        std::fs::write(self.tls_ca_file(), ca_pem).unwrap();
        for side in [1 - self.primary, self.primary] {
            let cluster = self.sides[side].take().unwrap();
            let data = cluster.data_dir();
            install_server_certificate(&data, &server_cert.pem(), &server_key.serialize_pem());
            let conf = data.join("postgresql.conf");
            let mut text = std::fs::read_to_string(&conf).unwrap();
            text.push_str(&format!(
                "\n# TLS over TCP, as a managed Postgres serves it\n\
                 listen_addresses = '{}'\nssl = on\nssl_cert_file = 'server.crt'\n\
                 ssl_key_file = 'server.key'\n",
                tls_address(side)
            ));
            std::fs::write(&conf, text).unwrap();
            // First: the cluster's own lines reject every TCP connection.
            let hba = data.join("pg_hba.conf");
            let text = std::fs::read_to_string(&hba).unwrap();
            std::fs::write(
                &hba,
                format!("hostssl all all 127.0.0.0/8 scram-sha-256\n{text}"),
            )
            .unwrap();
            let cluster = tokio::task::spawn_blocking(move || {
                cluster.stop().expect("stop a side to serve TLS");
                cluster.restart().expect("restart a side serving TLS");
                cluster
            })
            .await
            .unwrap();
            self.sides[side] = Some(cluster);
        }
    }

    /// The CA of [`Self::serve_tls`] (PEM), beside the first side's data:
    /// removed with the pair.
    fn tls_ca_file(&self) -> PathBuf {
        self.dirs[0].join("tls-ca.pem")
    }

    /// After [`Self::serve_tls`]: every process's config to reach the pair
    /// over TLS, `host=a,b target_session_attrs=read-write
    /// sslmode=verify-full sslrootcert=CA`.
    pub fn tls_config(&self) -> ConnectConfig {
        let ca_file = self.tls_ca_file();
        assert!(ca_file.exists(), "serve_tls first");
        ConnectConfig::parse(&format!(
            "host={},{} port=5432,5432 user={SUPERUSER} password={PASSWORD} dbname=postgres \
             target_session_attrs=read-write sslmode=verify-full sslrootcert={}",
            tls_address(0),
            tls_address(1),
            ca_file.display()
        ))
        .unwrap()
    }

    /// A connection to the standby (reads only).
    pub async fn standby_client(&self) -> Client {
        connect_to(self.sides[1 - self.primary].as_ref().unwrap()).await
    }

    /// SIGKILL the primary (every process of it).
    pub fn kill_primary(&self) {
        self.sides[self.primary]
            .as_ref()
            .unwrap()
            .kill()
            .expect("kill the primary");
    }

    /// `count(table)` on the standby once its replay has come to rest
    /// (after [`Self::kill_primary`]: everything the primary acknowledged,
    /// with synchronous replication). The replay position, not the receive
    /// position, is watched: a record cut off by the kill is received in
    /// part and never replayed.
    pub async fn replayed_count(&self, table: &str) -> i64 {
        let client = self.standby_client().await;
        let mut last = String::new();
        let mut unchanged_since = Instant::now();
        let started = Instant::now();
        loop {
            let replayed: String = client
                .query_one("SELECT pg_last_wal_replay_lsn()::text", &[])
                .await
                .unwrap()
                .get(0);
            if replayed != last {
                last = replayed;
                unchanged_since = Instant::now();
            } else if unchanged_since.elapsed() > Duration::from_millis(500) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the standby's replay did not come to rest"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0)
    }

    /// Promote the standby and let it accept writes alone (no synchronous
    /// standby until [`Self::build_standby`]). Returns when it accepts
    /// writes.
    pub async fn promote_standby(&mut self) {
        let promoted = 1 - self.primary;
        let standby = self.sides[promoted].take().unwrap();
        let standby = tokio::task::spawn_blocking(move || {
            standby.promote().expect("promote the standby");
            standby
        })
        .await
        .unwrap();
        // Its configuration is the old primary's copy: it would wait for a
        // synchronous standby it no longer has.
        let client = connect_to(&standby).await;
        // ALTER SYSTEM runs alone (not in a multi-statement implicit transaction).
        client
            .batch_execute("ALTER SYSTEM RESET synchronous_standby_names")
            .await
            .unwrap();
        client
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .unwrap();
        self.sides[promoted] = Some(standby);
        self.primary = promoted;
    }

    /// A new synchronous standby in the dead primary's place (its data
    /// removed, a base backup of the primary), once replication is in sync.
    pub async fn build_standby(&mut self) {
        let place = 1 - self.primary;
        if let Some(dead) = self.sides[place].take() {
            let _ = dead.kill();
            let data = dead.data_dir();
            drop(dead);
            std::fs::remove_dir_all(&data).expect("remove the dead primary's data");
        }
        let primary = self.sides[self.primary].take().unwrap();
        let dir = self.dirs[place].clone();
        let (primary, standby) = tokio::task::spawn_blocking(move || {
            let standby = LocalCluster::start_standby(&primary, &dir).expect("start a standby");
            (primary, standby)
        })
        .await
        .unwrap();
        let client = connect_to(&primary).await;
        self.sides[self.primary] = Some(primary);
        self.sides[place] = Some(standby);
        // ALTER SYSTEM runs alone (not in a multi-statement implicit transaction).
        client
            .batch_execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            .await
            .unwrap();
        client
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .unwrap();
        wait_until(Duration::from_secs(60), "the standby in sync", || async {
            client
                .query_one(
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                    &[],
                )
                .await
                .map(|r| r.get::<_, i64>(0) == 1)
                .unwrap_or(false)
        })
        .await;
    }

    /// Time from now until `count(table)` on the primary exceeds `baseline`
    /// (polled every 10 ms), or None after `timeout` (no new row).
    pub async fn wait_for_more_rows(
        &self,
        table: &str,
        baseline: i64,
        timeout: Duration,
    ) -> Option<Duration> {
        let started = Instant::now();
        let client = connect_to(self.sides[self.primary].as_ref().unwrap()).await;
        let sql = format!("SELECT count(*) FROM {table}");
        while started.elapsed() < timeout {
            let count: i64 = client.query_one(&sql, &[]).await.unwrap().get(0);
            if count > baseline {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }
}

fn socket_of(cluster: &LocalCluster) -> String {
    cluster.socket_dir().display().to_string()
}

async fn connect_to(cluster: &LocalCluster) -> Client {
    let config = ConnectConfig::parse(&cluster.connection_string("postgres")).unwrap();
    let (client, connection) = config.connect().await.expect("connect to a side");
    tokio::spawn(connection);
    client
}

impl Drop for FailoverPair {
    fn drop(&mut self) {
        for side in self.sides.iter_mut() {
            if let Some(cluster) = side.take() {
                let _ = cluster.stop();
            }
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
