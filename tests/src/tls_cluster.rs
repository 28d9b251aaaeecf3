//! A private Postgres that accepts TLS connections only, as a managed
//! Postgres does: `ssl = on`, TCP on a free loopback port, and a
//! `pg_hba.conf` of `hostssl` lines with password (SCRAM) authentication.
//! Its CA and server certificate are made here (rcgen); the CA's PEM file is
//! what clients give as `sslrootcert`.

use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rcgen::{CertificateParams, DnType, KeyPair};

use crate::tls_server::certificate_authority;
use crate::{PrivateCluster, ScratchDir};

/// The superuser's password on a [`TlsCluster`].
pub const PASSWORD: &str = "tls-test-password";

/// Write `server.crt` and `server.key` into the data directory `data`,
/// owned by the server's user and private to it (or Postgres refuses to
/// start), for `ssl_cert_file = 'server.crt'`, `ssl_key_file = 'server.key'`.
pub fn install_server_certificate(data: &Path, cert_pem: &str, key_pem: &str) {
    let owner = std::fs::metadata(data).unwrap();
    for (name, contents) in [("server.crt", cert_pem), ("server.key", key_pem)] {
        let path = data.join(name);
        std::fs::write(&path, contents).unwrap();
        chown(&path, Some(owner.uid()), Some(owner.gid())).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

pub struct TlsCluster {
    pub cluster: PrivateCluster,
    pub port: u16,
    /// The CA that signed the server's certificate (PEM).
    pub ca_file: PathBuf,
    /// Another CA, which signed nothing the server presents (PEM).
    pub other_ca_file: PathBuf,
    _files: ScratchDir,
}

impl TlsCluster {
    /// A migrated private cluster, restarted TLS-only with a certificate
    /// for `localhost` (and no other name or address).
    pub async fn start() -> TlsCluster {
        let cluster = PrivateCluster::start().await;
        let (client, connection) = cluster.config().connect().await.unwrap();
        tokio::spawn(connection);
        for statement in [
            format!("ALTER ROLE holdfast PASSWORD '{PASSWORD}'"),
            "CREATE DATABASE tls_e2e".to_owned(),
        ] {
            client.batch_execute(&statement).await.unwrap();
        }
        drop(client);

        let files = ScratchDir::new("tls-certs");
        let (ca, ca_pem) = certificate_authority("Holdfast test CA");
        let (_, other_ca_pem) = certificate_authority("Some other CA");
        let server_key = KeyPair::generate().unwrap();
        let mut server = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        server
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let server_cert = server.signed_by(&server_key, &ca).unwrap();
        let ca_file = files.join("ca.pem");
        let other_ca_file = files.join("other-ca.pem");
        std::fs::write(&ca_file, ca_pem).unwrap();
        std::fs::write(&other_ca_file, other_ca_pem).unwrap();

        let data = cluster.cluster.data_dir();
        install_server_certificate(&data, &server_cert.pem(), &server_key.serialize_pem());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("find a free port")
            .port();
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str(&format!(
            "\n# TLS-only test server\nlisten_addresses = '127.0.0.1'\nport = {port}\n\
             ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"
        ));
        std::fs::write(&conf, text).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "hostssl all all 127.0.0.1/32 scram-sha-256\n",
        )
        .unwrap();
        cluster.cluster.stop().expect("stop before the TLS restart");
        cluster.cluster.restart().expect("restart with TLS on");
        TlsCluster {
            cluster,
            port,
            ca_file,
            other_ca_file,
            _files: files,
        }
    }

    /// A URL for database `tls_e2e` at `host` with `params` (e.g.
    /// `sslmode=verify-full&sslrootcert=…`).
    pub fn url(&self, host: &str, params: &str) -> String {
        format!(
            "postgres://holdfast:{PASSWORD}@{host}:{}/tls_e2e?{params}",
            self.port
        )
    }

    /// `sslmode=verify-full` with the server's CA, at `localhost`.
    pub fn verify_full_url(&self) -> String {
        self.url(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={}", self.ca_file.display()),
        )
    }
}
