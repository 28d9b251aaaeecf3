//! Connections: how to reach Postgres ([`ConnectConfig`]: the server, and
//! TLS as libpq's `sslmode` / `sslrootcert`), a pool for short calls, and
//! dedicated sessions for LISTEN and for the worker's claims (a pooled
//! connection would drop notifications and would not give the worker one
//! stable backend pid).
//!
//! Every connection Holdfast opens goes through [`ConnectConfig::connect`]
//! (the pool's too), so TLS and the one-line connection errors hold for
//! every process alike.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures::future::BoxFuture;
use futures::StreamExt;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::sync::mpsc;
use tokio_postgres::config::{Host, SslMode as WireSslMode, TargetSessionAttrs};
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{AsyncMessage, Client, Config, Notification, Socket, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use holdfast_outbound::backoff::Backoff;

/// A connection's driver, as [`ConnectConfig::connect`] returns it next to
/// its client: spawn it (or poll it for notifications).
pub type Connection =
    tokio_postgres::Connection<Socket, <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream>;

/// When to use TLS and what to verify: libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Plain connections only.
    Disable,
    /// TLS if the server offers it, else plain; the certificate is not
    /// checked (libpq's default).
    Prefer,
    /// TLS or fail; the certificate is not checked, unless an
    /// `sslrootcert` is given: then as `verify-ca` (as libpq does).
    Require,
    /// TLS, and the certificate chain must lead to a trusted root.
    VerifyCa,
    /// As `verify-ca`, and the certificate must name the host connected to.
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl FromStr for SslMode {
    type Err = String;

    fn from_str(value: &str) -> std::result::Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "{other:?} is not a supported sslmode: use disable, prefer, require, \
                     verify-ca or verify-full"
                ))
            }
        })
    }
}

/// The TLS settings of one database URL, read from the URL and, where it
/// says nothing, from `PGSSLMODE` / `PGSSLROOTCERT` (the URL wins, as in
/// libpq).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// `sslrootcert`: a PEM file of trusted CA certificates, or `system`
    /// for the operating system's trust store (also what verify-ca and
    /// verify-full use when it is unset).
    pub root_cert: Option<String>,
}

/// How the server's certificate is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verification {
    /// Not at all: TLS protects against eavesdropping, not impersonation.
    None,
    /// The chain must lead to a trusted root; any host name.
    Chain,
    /// The chain, and the host name.
    ChainAndHost,
}

impl TlsSettings {
    fn verification(&self) -> Verification {
        match self.mode {
            SslMode::Disable | SslMode::Prefer => Verification::None,
            SslMode::Require if self.root_cert.is_some() => Verification::Chain,
            SslMode::Require => Verification::None,
            SslMode::VerifyCa => Verification::Chain,
            SslMode::VerifyFull => Verification::ChainAndHost,
        }
    }

    /// Where trusted roots come from, for messages.
    fn roots_described(&self) -> String {
        match self.root_cert.as_deref() {
            None | Some("system") => "the system trust store".to_owned(),
            Some(path) => format!("sslrootcert {path}"),
        }
    }
}

/// Where and how to connect to Postgres: the server (tokio-postgres's
/// [`Config`]) and the TLS settings it cannot hold (`verify-ca`,
/// `verify-full`, `sslrootcert`), with the TLS client built from them once.
#[derive(Clone)]
pub struct ConnectConfig {
    /// Host, port, user, database, timeouts. Its `ssl_mode` is derived from
    /// the TLS settings; do not set it here.
    pub postgres: Config,
    tls: TlsSettings,
    connector: MakeRustlsConnect,
}

impl fmt::Debug for ConnectConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Config's Debug redacts the password.
        f.debug_struct("ConnectConfig")
            .field("postgres", &self.postgres)
            .field("tls", &self.tls)
            .finish()
    }
}

impl ConnectConfig {
    /// Parse a database URL (`postgres://…`) or libpq key/value string,
    /// with `PGSSLMODE` / `PGSSLROOTCERT` from the environment where the
    /// URL has no `sslmode` / `sslrootcert`.
    pub fn parse(url: &str) -> Result<ConnectConfig> {
        ConnectConfig::parse_with_env(url, |name| std::env::var(name).ok())
    }

    /// [`parse`](Self::parse), with `env` for the environment.
    pub fn parse_with_env(
        url: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ConnectConfig> {
        let (server, tls) = split_tls_settings(url, env)?;
        let mut postgres = Config::from_str(&server).map_err(|e| Error::Invalid {
            field: Some("HOLDFAST_DATABASE_URL".into()),
            message: e.to_string(),
        })?;
        postgres.ssl_mode(match tls.mode {
            SslMode::Disable => WireSslMode::Disable,
            SslMode::Prefer => WireSslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireSslMode::Require,
        });
        let connector = MakeRustlsConnect::new(client_config(&tls)?);
        Ok(ConnectConfig {
            postgres,
            tls,
            connector,
        })
    }

    pub fn tls(&self) -> &TlsSettings {
        &self.tls
    }

    /// A libpq key/value connection string for this config, TLS settings
    /// and password included: for child processes (`--database-url`).
    pub fn to_connection_string(&self) -> String {
        let c = &self.postgres;
        let hosts: Vec<String> = c
            .get_hosts()
            .iter()
            .map(|host| match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let ports: Vec<String> = c.get_ports().iter().map(u16::to_string).collect();
        let password = c.get_password().map(String::from_utf8_lossy);
        let mut pairs: Vec<(&str, String)> = vec![("host", hosts.join(","))];
        if !ports.is_empty() {
            pairs.push(("port", ports.join(",")));
        }
        pairs.extend(c.get_user().map(|user| ("user", user.to_owned())));
        pairs.extend(password.map(|password| ("password", password.into_owned())));
        pairs.extend(c.get_dbname().map(|dbname| ("dbname", dbname.to_owned())));
        pairs.extend(
            c.get_application_name()
                .map(|name| ("application_name", name.to_owned())),
        );
        // Several hosts (a primary and its standbys): the child must pick
        // the writable one as this process does.
        match c.get_target_session_attrs() {
            TargetSessionAttrs::ReadWrite => {
                pairs.push(("target_session_attrs", "read-write".to_owned()))
            }
            TargetSessionAttrs::ReadOnly => {
                pairs.push(("target_session_attrs", "read-only".to_owned()))
            }
            _ => {}
        }
        pairs.push(("sslmode", self.tls.mode.as_str().to_owned()));
        pairs.extend(
            self.tls
                .root_cert
                .clone()
                .map(|root_cert| ("sslrootcert", root_cert)),
        );
        pairs
            .into_iter()
            .map(|(key, value)| format!("{key}={}", quote_value(&value)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Open a connection. Its error names the cause in one line: TLS
    /// required by the server, certificate not trusted, authentication
    /// failed, host unreachable, database does not exist.
    pub async fn connect(&self) -> Result<(Client, Connection)> {
        self.open(&self.postgres)
            .await
            .map_err(|e| self.connect_error(e))
    }

    /// Connect with `config` (this config's server, or the pool's copy of
    /// it) and this config's TLS. `prefer` falls back to a plain connection
    /// when the TLS attempt fails in the handshake or is refused by the
    /// server's pg_hba.conf, as libpq does.
    async fn open(
        &self,
        config: &Config,
    ) -> std::result::Result<(Client, Connection), tokio_postgres::Error> {
        // Postgres has no TLS on Unix sockets; libpq ignores sslmode there.
        let all_unix = config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, Host::Unix(_)));
        let mut config = config.clone();
        if all_unix {
            config.ssl_mode(WireSslMode::Disable);
        }
        match config.connect(self.connector.clone()).await {
            Err(e) if config.get_ssl_mode() == WireSslMode::Prefer && tls_attempt_refused(&e) => {
                config.ssl_mode(WireSslMode::Disable);
                config.connect(self.connector.clone()).await
            }
            connected => connected,
        }
    }

    fn connect_error(&self, error: tokio_postgres::Error) -> Error {
        Error::Connect {
            target: describe_target(&self.postgres),
            cause: connect_failure_cause(&error, &self.postgres, &self.tls),
            error,
        }
    }
}

/// Split the TLS parameters off a URL or key/value string: the rest (for
/// tokio-postgres, which knows only disable/prefer/require and no
/// `sslrootcert`), and the settings.
fn split_tls_settings(
    url: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(String, TlsSettings)> {
    let (server, params) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_url_params(url)
    } else {
        split_key_value_params(url)
    };
    let mut mode = None;
    let mut root_cert = None;
    for (key, value) in params {
        match key.as_str() {
            "sslmode" => mode = Some(("sslmode", value)),
            _ => root_cert = Some(value),
        }
    }
    let mode = mode.or_else(|| env("PGSSLMODE").map(|value| ("PGSSLMODE", value)));
    let mode = match mode {
        None => SslMode::Prefer,
        Some((field, value)) => value.parse().map_err(|message| Error::Invalid {
            field: Some(field.into()),
            message,
        })?,
    };
    let root_cert = root_cert
        .or_else(|| env("PGSSLROOTCERT"))
        .filter(|path| !path.is_empty());
    Ok((server, TlsSettings { mode, root_cert }))
}

/// The parameters Holdfast reads itself rather than tokio-postgres.
fn is_tls_param(key: &str) -> bool {
    key == "sslmode" || key == "sslrootcert"
}

/// `postgres://…?a=b&sslmode=…`: the URL without the TLS parameters, and
/// those (percent-decoded).
fn split_url_params(url: &str) -> (String, Vec<(String, String)>) {
    // A '?' before the host part would be inside the (encoded) password.
    let after_userinfo = url.rfind('@').map_or(0, |at| at + 1);
    let Some(question) = url[after_userinfo..].find('?').map(|q| q + after_userinfo) else {
        return (url.to_owned(), Vec::new());
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for param in url[question + 1..].split('&') {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        if is_tls_param(key) {
            let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
            taken.push((key.to_owned(), value.into_owned()));
        } else {
            kept.push(param);
        }
    }
    let mut rest = url[..question].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    (rest, taken)
}

/// `host=… sslmode=…`: the string without the TLS pairs, and those. A
/// string this cannot read is passed on whole, for tokio-postgres to report.
fn split_key_value_params(text: &str) -> (String, Vec<(String, String)>) {
    let Some(pairs) = key_value_pairs(text) else {
        return (text.to_owned(), Vec::new());
    };
    let mut rest = String::new();
    let mut taken = Vec::new();
    let mut copied_to = 0;
    for (key, value, span) in pairs {
        if is_tls_param(&key) {
            rest.push_str(&text[copied_to..span.start]);
            copied_to = span.end;
            taken.push((key, value));
        }
    }
    rest.push_str(&text[copied_to..]);
    (rest, taken)
}

/// The `key = value` pairs of a libpq key/value string, each with its byte
/// span; values unquoted and unescaped. None if it is not well formed.
fn key_value_pairs(text: &str) -> Option<Vec<(String, String, std::ops::Range<usize>)>> {
    let bytes = text.as_bytes();
    let mut pairs = Vec::new();
    let mut i = 0;
    let skip_space = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    loop {
        skip_space(&mut i);
        if i == bytes.len() {
            return Some(pairs);
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = text[start..i].to_owned();
        skip_space(&mut i);
        if bytes.get(i) != Some(&b'=') || key.is_empty() {
            return None;
        }
        i += 1;
        skip_space(&mut i);
        let mut value = Vec::new();
        let quoted = bytes.get(i) == Some(&b'\'');
        if quoted {
            i += 1;
        }
        loop {
            match bytes.get(i) {
                None if quoted => return None,
                None => break,
                Some(b'\'') if quoted => {
                    i += 1;
                    break;
                }
                Some(b) if !quoted && b.is_ascii_whitespace() => break,
                Some(b'\\') => {
                    value.push(*bytes.get(i + 1)?);
                    i += 2;
                }
                Some(b) => {
                    value.push(*b);
                    i += 1;
                }
            }
        }
        pairs.push((key, String::from_utf8(value).ok()?, start..i));
    }
}

/// A value quoted for a libpq key/value string.
fn quote_value(value: &str) -> String {
    if !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '\\')
    {
        return value.to_owned();
    }
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The rustls client for `tls`: the process's crypto provider, and a
/// certificate verifier for its verification level.
fn client_config(tls: &TlsSettings) -> Result<ClientConfig> {
    let provider = holdfast_outbound::crypto_provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid_root_cert(tls, e.to_string()))?;
    let config = match tls.verification() {
        Verification::None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate {
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth(),
        Verification::Chain => {
            let chain =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots(tls)?), provider)
                    .build()
                    .map_err(|e| invalid_root_cert(tls, e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly { chain }))
                .with_no_client_auth()
        }
        Verification::ChainAndHost => builder
            .with_root_certificates(roots(tls)?)
            .with_no_client_auth(),
    };
    Ok(config)
}

/// The trusted roots: the `sslrootcert` file, or the system's store.
fn roots(tls: &TlsSettings) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    match tls.root_cert.as_deref() {
        None | Some("system") => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(invalid_root_cert(
                    tls,
                    "no certificates in the system trust store: set sslrootcert to the \
                     server's CA file"
                        .into(),
                ));
            }
        }
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(PathBuf::from(path))
                .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| invalid_root_cert(tls, format!("cannot read {path}: {e}")))?;
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| invalid_root_cert(tls, format!("{path}: {e}")))?;
            }
            if roots.is_empty() {
                return Err(invalid_root_cert(
                    tls,
                    format!("{path} holds no PEM certificate"),
                ));
            }
        }
    }
    Ok(roots)
}

fn invalid_root_cert(tls: &TlsSettings, message: String) -> Error {
    let field = match tls.root_cert {
        Some(_) => "sslrootcert",
        None => "sslmode",
    };
    Error::Invalid {
        field: Some(field.into()),
        message,
    }
}

/// sslmode prefer / require (without sslrootcert): any certificate. The
/// handshake's signatures are still checked, so the session is encrypted to
/// whoever holds the certificate's key.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// sslmode verify-ca: the full WebPKI check of the chain, but a certificate
/// for another host name passes (the chain is checked before the name, so a
/// name error means the chain was good).
#[derive(Debug)]
struct ChainOnly {
    chain: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.chain.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

/// The rustls error inside a connection error, if the TLS handshake failed.
fn tls_error(error: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        // io::Error's source() skips the error it wraps: look inside.
        if let Some(tls) = e
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        next = e.source();
    }
    None
}

/// The io::Error under a connection error, if the socket failed.
fn io_error(error: &tokio_postgres::Error) -> Option<&io::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io);
        }
        next = e.source();
    }
    None
}

/// A TLS attempt that `prefer` answers by trying again without TLS.
fn tls_attempt_refused(error: &tokio_postgres::Error) -> bool {
    tls_error(error).is_some()
        || error.code() == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
}

/// `host:port` (or the socket directory) of each server, for messages.
fn describe_target(config: &Config) -> String {
    let ports = config.get_ports();
    let port_of = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(host) => format!("{host}:{}", port_of(i)),
            Host::Unix(dir) => format!("{} (Unix socket, port {})", dir.display(), port_of(i)),
        })
        .collect();
    if hosts.is_empty() {
        return format!("port {}", port_of(0));
    }
    hosts.join(", ")
}

/// Why a connection failed, in one line a person can act on.
fn connect_failure_cause(
    error: &tokio_postgres::Error,
    config: &Config,
    tls: &TlsSettings,
) -> String {
    let one_line = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(db) = error.as_db_error() {
        let message = one_line(db.message());
        let code = db.code();
        return if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
            && message.contains("no encryption")
        {
            format!(
                "the server requires TLS, and sslmode={} connected without it ({message}); \
                 use sslmode=verify-full (or require)",
                tls.mode.as_str()
            )
        } else if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            format!("authentication failed: {message}")
        } else if *code == SqlState::INVALID_CATALOG_NAME {
            format!("the database does not exist: {message}")
        } else {
            message
        };
    }
    if let Some(tls_failure) = tls_error(error) {
        return match tls_failure {
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
                "the server's TLS certificate is not trusted: no CA in {} signed it \
                 (set sslrootcert to the CA that did)",
                tls.roots_described()
            ),
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => {
                let host = match config.get_hosts().first() {
                    Some(Host::Tcp(host)) => host.clone(),
                    _ => String::new(),
                };
                format!(
                    "the server's TLS certificate does not name the host {host:?} \
                     (sslmode=verify-full checks it): {}",
                    one_line(&tls_failure.to_string())
                )
            }
            rustls::Error::InvalidCertificate(_) => format!(
                "the server's TLS certificate was rejected: {}",
                one_line(&tls_failure.to_string())
            ),
            other => format!("the TLS handshake failed: {}", one_line(&other.to_string())),
        };
    }
    let text = one_line(&error.to_string());
    if text.contains("server does not support TLS") {
        return format!(
            "the server does not accept TLS connections, and sslmode={} requires TLS",
            tls.mode.as_str()
        );
    }
    if text.contains("database does not allow writes") {
        return "no server accepts writes (target_session_attrs=read-write): each one \
                reached is read-only, e.g. a standby, or a primary still being promoted"
            .to_owned();
    }
    if let Some(io) = io_error(error) {
        return format!("the host is unreachable: {}", one_line(&io.to_string()));
    }
    text
}

/// A connection pool of at most `max_size` connections, each opened by
/// [`ConnectConfig::connect`]'s rules.
pub fn pool(config: ConnectConfig, max_size: usize) -> Result<Pool> {
    let manager = Manager::from_connect(
        config.postgres.clone(),
        PoolConnect(config),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(max_size)
        .build()
        .map_err(|e| Error::Pool(e.to_string()))
}

/// The pool's way to open a connection: ours.
struct PoolConnect(ConnectConfig);

impl deadpool_postgres::Connect for PoolConnect {
    fn connect(
        &self,
        pg_config: &Config,
    ) -> BoxFuture<
        '_,
        std::result::Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
    > {
        let pg_config = pg_config.clone();
        Box::pin(async move {
            let (client, connection) = self.0.open(&pg_config).await?;
            let driver = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "pooled connection ended");
                }
            });
            Ok((client, driver))
        })
    }
}

/// A dedicated session: the client, and a channel of the notifications it
/// receives. The channel closes when the connection ends, which is how the
/// owner learns it must reconnect (and LISTEN again).
pub struct Session {
    pub client: Client,
    pub notifications: mpsc::UnboundedReceiver<Notification>,
    /// Statements prepared on this session (the worker's claim and renewal
    /// run every few milliseconds under load: parse them once).
    statements: Mutex<HashMap<&'static str, Statement>>,
}

impl Session {
    /// `sql` prepared on this session, once: later calls reuse it.
    pub async fn prepared(
        &self,
        sql: &'static str,
    ) -> std::result::Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.cached(sql) {
            return Ok(statement);
        }
        let statement = self.client.prepare(sql).await?;
        self.statements
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(sql, statement.clone());
        Ok(statement)
    }

    fn cached(&self, sql: &str) -> Option<Statement> {
        self.statements
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(sql)
            .cloned()
    }
}

/// Refuse a server behind which Holdfast's connections would share Postgres
/// sessions: a pooler in transaction or statement mode (PgBouncer's
/// `pool_mode = transaction`). Holdfast keeps statements prepared on its
/// connections, LISTENs for wake hints, and knows a worker's leases by its
/// session; behind such a pooler the statements vanish between
/// transactions (`prepared statement "s3" does not exist`), notifications
/// go to whichever client holds the backend, and the lease's session is
/// not the worker's. `setting` names the URL in the error.
///
/// The probe: connection A asks for its backend, then B opens a
/// transaction (pinning a backend) and asks for its own, then A asks again.
/// On separate sessions (Postgres itself, a session-mode pooler) A keeps
/// its backend and B has another. Behind a transaction pooler, B is handed
/// the backend A just released (PgBouncer reuses the most recent one), or
/// A comes back on another (see [`PROBE_ROUNDS`]). Simple-protocol
/// queries only: a prepared
/// statement could itself fail across the pooler's switch.
pub async fn require_session_per_connection(config: &ConnectConfig, setting: &str) -> Result<()> {
    let (first, first_connection) = config.connect().await?;
    let first_task = tokio::spawn(first_connection);
    let (second, second_connection) = config.connect().await?;
    let second_task = tokio::spawn(second_connection);
    let probe = async {
        let mut seen = (0, 0, 0);
        for _ in 0..PROBE_ROUNDS {
            let before = backend_pid(&first).await?;
            second.simple_query("BEGIN").await?;
            let pinned = backend_pid(&second).await?;
            let after = backend_pid(&first).await?;
            second.simple_query("ROLLBACK").await?;
            seen = (before, pinned, after);
            if pinned == before || after != before {
                break;
            }
        }
        Ok::<_, Error>(seen)
    };
    let outcome = probe.await;
    drop((first, second));
    let _ = (first_task.await, second_task.await);
    let (before, pinned, after) = outcome.map_err(|e| Error::Invalid {
        field: Some(setting.into()),
        message: format!(
            "cannot check that each connection is a Postgres session of its own: {e}; \
             a pooler in statement mode refuses transactions: {}",
            SESSION_POOLING_FIX
        ),
    })?;
    if pinned == before || after != before {
        let seen = if pinned == before {
            format!("two connections ran on the same backend (pid {before})")
        } else {
            format!("one connection moved from backend pid {before} to pid {after}")
        };
        return Err(Error::Invalid {
            field: Some(setting.into()),
            message: format!(
                "it reaches a pooler that shares Postgres sessions between its clients \
                 (transaction or statement pooling: {seen}). Holdfast keeps statements \
                 prepared on its connections, LISTENs for wake hints and knows a worker's \
                 leases by its session, none of which survives a change of backend. {}",
                SESSION_POOLING_FIX
            ),
        });
    }
    Ok(())
}

/// Rounds of the pooler probe. Separate sessions pass every round; behind
/// a transaction pooler a round can pass only when other clients took and
/// returned backends at the same moment, so several rounds make that
/// unlikely.
const PROBE_ROUNDS: usize = 5;

/// What to do about a pooler that shares sessions, for the error.
const SESSION_POOLING_FIX: &str = "Point it at Postgres itself or at a pooler in session mode \
     (PgBouncer: pool_mode = session); see docs/guides/managed-postgres.md";

/// The backend serving `client`'s next statement, by the simple protocol.
async fn backend_pid(client: &Client) -> Result<i32> {
    let messages = client.simple_query("SELECT pg_backend_pid()").await?;
    messages
        .iter()
        .find_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0)?.parse().ok(),
            _ => None,
        })
        .ok_or_else(|| Error::Invalid {
            field: None,
            message: "SELECT pg_backend_pid() returned no row".into(),
        })
}

/// Open a dedicated session and LISTEN on `channels`.
pub async fn listen(config: &ConnectConfig, channels: &[&str]) -> Result<Session> {
    let (client, mut connection) = config.connect().await?;
    let (tx, notifications) = mpsc::unbounded_channel();
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "listen connection ended");
                    break;
                }
            }
        }
    });
    for channel in channels {
        // Channel names are ours (constants), never user input.
        client.batch_execute(&format!("LISTEN {channel}")).await?;
    }
    Ok(Session {
        client,
        notifications,
        statements: Mutex::new(HashMap::new()),
    })
}

/// How long opening a LISTEN session may take before it is abandoned and
/// tried again: across a partition that drops packets, the connection (or
/// a proxy's) can be accepted and then never answered, and nothing else
/// would end the wait.
pub const SESSION_OPEN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A LISTEN session on `channels` ([`listen`]), retried with `backoff`
/// until one opens, or `None` once `shutdown` fires. The one reconnect loop
/// of every process that listens (the worker, the webhook dispatcher, the
/// API's fan-out); `who` names it in the log.
pub async fn listen_retrying(
    config: &ConnectConfig,
    channels: &[&str],
    backoff: &Backoff,
    shutdown: &CancellationToken,
    who: &str,
) -> Option<Session> {
    let mut failures: u32 = 0;
    loop {
        let attempt = tokio::select! {
            _ = shutdown.cancelled() => return None,
            attempt = tokio::time::timeout(SESSION_OPEN_TIMEOUT, listen(config, channels)) => attempt,
        };
        let error = match attempt {
            Ok(Ok(session)) => return Some(session),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!(
                "no answer from Postgres within {SESSION_OPEN_TIMEOUT:?} (a network partition?)"
            ),
        };
        failures = failures.saturating_add(1);
        let delay = backoff.delay(failures, None);
        tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64, "{who}: cannot open a LISTEN session; retrying");
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    fn settings(url: &str, env: impl Fn(&str) -> Option<String>) -> (String, TlsSettings) {
        split_tls_settings(url, env).unwrap()
    }

    #[test]
    fn the_default_is_prefer_without_a_root_certificate() {
        let (rest, tls) = settings("postgres://u@db.example.com/holdfast", no_env);
        assert_eq!(rest, "postgres://u@db.example.com/holdfast");
        assert_eq!(tls.mode, SslMode::Prefer);
        assert_eq!(tls.root_cert, None);
    }

    #[test]
    fn url_parameters_are_read_and_removed_and_the_others_kept() {
        let (rest, tls) = settings(
            "postgres://u:p%40ss@db.example.com:6432/holdfast?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20dir%2Froot.pem&connect_timeout=5",
            no_env,
        );
        assert_eq!(
            rest,
            "postgres://u:p%40ss@db.example.com:6432/holdfast?application_name=x&connect_timeout=5"
        );
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert.as_deref(), Some("/etc/ca dir/root.pem"));
    }

    #[test]
    fn a_url_with_only_tls_parameters_loses_its_question_mark() {
        let (rest, tls) = settings("postgresql://db/holdfast?sslmode=verify-ca", no_env);
        assert_eq!(rest, "postgresql://db/holdfast");
        assert_eq!(tls.mode, SslMode::VerifyCa);
    }

    #[test]
    fn key_value_pairs_are_read_and_removed_quotes_included() {
        let (rest, tls) = settings(
            "host=db.example.com sslmode = verify-full  sslrootcert='/etc/my ca\\'s.pem' user=holdfast",
            no_env,
        );
        assert_eq!(
            rest.split_whitespace().collect::<Vec<_>>(),
            ["host=db.example.com", "user=holdfast"]
        );
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert.as_deref(), Some("/etc/my ca's.pem"));
        let config = Config::from_str(&rest).unwrap();
        assert_eq!(config.get_user(), Some("holdfast"));
    }

    #[test]
    fn pgssl_variables_apply_when_the_url_says_nothing() {
        let env = env_of(&[("PGSSLMODE", "verify-ca"), ("PGSSLROOTCERT", "/ca.pem")]);
        let (_, tls) = settings("host=db user=u", env);
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(tls.root_cert.as_deref(), Some("/ca.pem"));
    }

    #[test]
    fn the_url_wins_over_pgssl_variables() {
        let env = env_of(&[("PGSSLMODE", "disable"), ("PGSSLROOTCERT", "/env.pem")]);
        let (_, tls) = settings(
            "postgres://db/x?sslmode=verify-full&sslrootcert=/url.pem",
            env,
        );
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert.as_deref(), Some("/url.pem"));
        // One from each: the URL's sslmode, the environment's root.
        let env = env_of(&[("PGSSLMODE", "disable"), ("PGSSLROOTCERT", "/env.pem")]);
        let (_, tls) = settings("host=db sslmode=require", env);
        assert_eq!(tls.mode, SslMode::Require);
        assert_eq!(tls.root_cert.as_deref(), Some("/env.pem"));
    }

    #[test]
    fn an_unknown_sslmode_names_its_source_and_the_valid_modes() {
        let error = split_tls_settings("host=db sslmode=allow", no_env).unwrap_err();
        assert_eq!(error.field(), Some("sslmode"));
        assert!(error.to_string().contains("verify-full"), "{error}");
        let error =
            split_tls_settings("host=db", env_of(&[("PGSSLMODE", "verify_full")])).unwrap_err();
        assert_eq!(error.field(), Some("PGSSLMODE"));
    }

    #[test]
    fn require_with_a_root_certificate_verifies_the_chain_as_libpq_does() {
        let tls = |mode, root: Option<&str>| TlsSettings {
            mode,
            root_cert: root.map(str::to_owned),
        };
        assert_eq!(
            tls(SslMode::Require, None).verification(),
            Verification::None
        );
        assert_eq!(
            tls(SslMode::Require, Some("/ca.pem")).verification(),
            Verification::Chain
        );
        assert_eq!(
            tls(SslMode::Prefer, Some("/ca.pem")).verification(),
            Verification::None
        );
        assert_eq!(
            tls(SslMode::VerifyCa, None).verification(),
            Verification::Chain
        );
        assert_eq!(
            tls(SslMode::VerifyFull, None).verification(),
            Verification::ChainAndHost
        );
    }

    #[test]
    fn a_missing_root_certificate_file_is_a_clear_error() {
        let error = ConnectConfig::parse_with_env(
            "host=db sslmode=verify-full sslrootcert=/nonexistent/ca.pem",
            no_env,
        )
        .unwrap_err();
        assert_eq!(error.field(), Some("sslrootcert"));
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
    }

    #[test]
    fn the_wire_mode_given_to_tokio_postgres_is_require_for_the_verifying_modes() {
        for (mode, wire) in [
            ("disable", WireSslMode::Disable),
            ("prefer", WireSslMode::Prefer),
            ("require", WireSslMode::Require),
        ] {
            let config =
                ConnectConfig::parse_with_env(&format!("host=db sslmode={mode}"), no_env).unwrap();
            assert_eq!(config.postgres.get_ssl_mode(), wire);
        }
    }

    #[test]
    fn a_multi_host_url_keeps_every_host_the_writable_choice_and_tls() {
        let config = ConnectConfig::parse_with_env(
            "postgres://u:p@db-a.example.com:5432,db-b.example.com:5433/holdfast?target_session_attrs=read-write&sslmode=verify-full&sslrootcert=%2Fca.pem",
            no_env,
        );
        // The root file does not exist here: the settings were still read.
        let error = config.unwrap_err();
        assert_eq!(error.field(), Some("sslrootcert"));
        let (rest, tls) = settings(
            "postgres://u:p@db-a.example.com:5432,db-b.example.com:5433/holdfast?target_session_attrs=read-write&sslmode=verify-full&sslrootcert=%2Fca.pem",
            no_env,
        );
        assert_eq!(tls.mode, SslMode::VerifyFull);
        let postgres = Config::from_str(&rest).unwrap();
        assert_eq!(
            postgres.get_hosts(),
            [
                Host::Tcp("db-a.example.com".into()),
                Host::Tcp("db-b.example.com".into())
            ]
        );
        assert_eq!(postgres.get_ports(), [5432, 5433]);
        assert_eq!(
            postgres.get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
        assert_eq!(
            describe_target(&postgres),
            "db-a.example.com:5432, db-b.example.com:5433"
        );
    }

    #[test]
    fn the_connection_string_keeps_several_hosts_and_the_writable_choice() {
        let config = ConnectConfig::parse_with_env(
            "host=/tmp/a,/tmp/b port=5432,5433 user=holdfast dbname=x target_session_attrs=read-write",
            no_env,
        )
        .unwrap();
        let again = ConnectConfig::parse_with_env(&config.to_connection_string(), no_env).unwrap();
        assert_eq!(again.postgres.get_hosts(), config.postgres.get_hosts());
        assert_eq!(again.postgres.get_ports(), [5432, 5433]);
        assert_eq!(
            again.postgres.get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
    }

    #[test]
    fn the_connection_string_round_trips_tls_settings_and_quotes() {
        let config = ConnectConfig::parse_with_env(
            "host=/tmp/pg port=5433 user=holdfast password='a b' dbname=x sslmode=require",
            no_env,
        )
        .unwrap();
        let text = config.to_connection_string();
        assert_eq!(
            text,
            "host=/tmp/pg port=5433 user=holdfast password='a b' dbname=x sslmode=require"
        );
        let again = ConnectConfig::parse_with_env(&text, no_env).unwrap();
        assert_eq!(again.tls(), config.tls());
        assert_eq!(again.postgres.get_password(), Some(&b"a b"[..]));
    }
}
