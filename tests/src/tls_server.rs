//! HTTPS for the tests' fake servers: a private certificate authority made
//! here (rcgen), whose PEM file is what Holdfast is given as
//! `HOLDFAST_CA_BUNDLE`, and a TLS listener axum serves on that counts the
//! handshakes clients broke off (a client that does not trust the server's
//! certificate ends the handshake with an alert).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::ScratchDir;

/// A self-signed CA: its issuer (to sign with) and its certificate's PEM.
pub fn certificate_authority(name: &str) -> (Issuer<'static, KeyPair>, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let pem = params.self_signed(&key).unwrap().pem();
    (Issuer::new(params, key), pem)
}

/// A private CA no operating system trusts, with its certificate in a PEM
/// file.
pub struct PrivateCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's certificate (PEM): a `HOLDFAST_CA_BUNDLE`.
    pub ca_file: PathBuf,
    _files: ScratchDir,
}

impl PrivateCa {
    pub fn new() -> PrivateCa {
        let files = ScratchDir::new("private-ca");
        let (issuer, pem) = certificate_authority("Holdfast test private CA");
        let ca_file = files.join("ca.pem");
        std::fs::write(&ca_file, pem).unwrap();
        PrivateCa {
            issuer,
            ca_file,
            _files: files,
        }
    }

    /// A TLS listener on a free port of 127.0.0.1 presenting a certificate
    /// for `localhost` that this CA signed; its origin is
    /// `https://localhost:PORT`.
    pub async fn listener(&self) -> (TlsListener, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config =
            rustls::ServerConfig::builder_with_provider(holdfast_outbound::crypto_provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("https://localhost:{}", tcp.local_addr().unwrap().port());
        let listener = TlsListener {
            tcp,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            broken_off: watch::Sender::new(0),
        };
        (listener, origin)
    }
}

impl Default for PrivateCa {
    fn default() -> Self {
        PrivateCa::new()
    }
}

/// Accepts TCP connections and completes their TLS handshakes one at a
/// time (these are tests' servers); a handshake the client breaks off is
/// counted, not served.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    broken_off: watch::Sender<usize>,
}

impl TlsListener {
    /// Counts the handshakes clients broke off, to await after the
    /// listener is handed to a server.
    pub fn handshakes(&self) -> BrokenHandshakes {
        BrokenHandshakes(self.broken_off.subscribe())
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else {
                continue;
            };
            match self.acceptor.accept(stream).await {
                Ok(tls) => return (tls, addr),
                Err(_) => self.broken_off.send_modify(|n| *n += 1),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// The number of TLS handshakes a [`TlsListener`]'s clients broke off.
pub struct BrokenHandshakes(watch::Receiver<usize>);

impl BrokenHandshakes {
    pub fn count(&self) -> usize {
        *self.0.borrow()
    }

    /// Wait until a client has broken off a handshake (panics after
    /// `timeout`).
    pub async fn wait_for_one(&mut self, timeout: Duration) {
        tokio::time::timeout(timeout, self.0.wait_for(|n| *n > 0))
            .await
            .expect("a client breaks off a TLS handshake in time")
            .expect("the listener is alive");
    }
}
