//! Outbound HTTP(S): one crypto provider, one trust store, one way to build
//! a client. Every HTTP client Holdfast makes (model providers, MCP servers,
//! webhooks, `web_fetch`, `web_search`, machine wake URLs, the OTLP exporter,
//! and the API client of the CLI and the machine daemon) starts from
//! [`client_builder`] or [`blocking_client_builder`], so all of them verify
//! servers against the same roots with the same provider. The kinds a
//! tenant or a model can aim then add the egress policy's resolver on top
//! (`EgressPolicy::client_builder`, in the egress module).
//!
//! The trust store is the operating system's roots (read as OpenSSL does:
//! `SSL_CERT_FILE` / `SSL_CERT_DIR`, else the distribution's bundle, e.g.
//! Debian's `ca-certificates`) plus, when the operator sets
//! `HOLDFAST_CA_BUNDLE`, the certificates of that PEM file: the way to
//! reach a model gateway, an MCP server, a webhook receiver or a collector
//! whose certificate a private CA signed. The crypto provider is ring,
//! installed as the process default ([`crypto_provider`]), so a library
//! that builds its own rustls configuration gets the same one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// The setting naming the operator's CA bundle (a PEM file).
pub const CA_BUNDLE_VAR: &str = "HOLDFAST_CA_BUNDLE";

/// The trust of this process, set once: by [`configure`] at process start,
/// or on first use with the operating system's roots alone.
static TRUST: OnceLock<Trust> = OnceLock::new();

/// What outbound TLS trusts, ready to hand to a client.
struct Trust {
    tls: ClientConfig,
}

/// What [`configure`] loaded, for the start-up log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustSummary {
    /// Roots read from the operating system's store.
    pub system_roots: usize,
    /// Certificates read from the operator's CA bundle.
    pub bundle_roots: usize,
    pub bundle: Option<PathBuf>,
}

/// Why the trust store could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{CA_BUNDLE_VAR}: {path}: {message}")]
    Bundle { path: PathBuf, message: String },
    #[error(
        "the outbound trust store is configured once, at process start, before any HTTP client \
         is built"
    )]
    AlreadySet,
}

/// The process's crypto provider: the one installed as the process default,
/// installing ring when none is. Called at process start and by everything
/// that builds a rustls configuration (outbound HTTP, Postgres).
pub fn crypto_provider() -> Arc<CryptoProvider> {
    if let Some(installed) = CryptoProvider::get_default() {
        return installed.clone();
    }
    // Err means another thread installed one first: that one is the default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// Sets this process's trust store: the operating system's roots plus the
/// certificates in `ca_bundle` (PEM), when given. Call it once at process
/// start, before any client is built; a bundle that cannot be read, holds
/// no certificate or holds one rustls cannot use is an error naming the
/// file.
pub fn configure(ca_bundle: Option<&Path>) -> Result<TrustSummary, TrustError> {
    let (trust, summary) = load(ca_bundle)?;
    TRUST.set(trust).map_err(|_| TrustError::AlreadySet)?;
    if summary.system_roots + summary.bundle_roots == 0 {
        tracing::warn!(
            "no trusted root certificates: the operating system's store is empty (install \
             ca-certificates) and {CA_BUNDLE_VAR} is not set, so every HTTPS request will fail"
        );
    }
    Ok(summary)
}

/// A client builder carrying the process's TLS configuration (its crypto
/// provider and trust store). Callers add timeouts, redirects, a resolver.
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().use_preconfigured_tls(trust().tls.clone())
}

/// [`client_builder`] for the blocking client (the OTLP exporter's, which
/// runs on the SDK's own thread). Build it outside an async runtime.
#[cfg(feature = "blocking")]
pub fn blocking_client_builder() -> reqwest::blocking::ClientBuilder {
    reqwest::blocking::Client::builder().use_preconfigured_tls(trust().tls.clone())
}

fn trust() -> &'static Trust {
    TRUST.get_or_init(|| {
        let roots = system_roots();
        Trust {
            tls: tls_config(roots),
        }
    })
}

fn load(ca_bundle: Option<&Path>) -> Result<(Trust, TrustSummary), TrustError> {
    let mut roots = system_roots();
    let system_roots = roots.len();
    let mut bundle_roots = 0;
    if let Some(path) = ca_bundle {
        let bad = |message: String| TrustError::Bundle {
            path: path.to_owned(),
            message,
        };
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| bad(format!("cannot read it as PEM: {e}")))?;
        if certs.is_empty() {
            return Err(bad("holds no PEM certificate".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
            bundle_roots += 1;
        }
    }
    let summary = TrustSummary {
        system_roots,
        bundle_roots,
        bundle: ca_bundle.map(Path::to_owned),
    };
    Ok((
        Trust {
            tls: tls_config(roots),
        },
        summary,
    ))
}

/// The operating system's roots; certificates it cannot parse are skipped
/// (with a warning), as a browser would.
fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "reading the operating system's trusted certificates");
    }
    let mut roots = RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::warn!(
            ignored,
            "some of the operating system's trusted certificates could not be used"
        );
    }
    roots
}

/// TLS 1.2 and 1.3 with the process's provider, servers verified against
/// `roots` (chain and host name). ALPN offers HTTP/1.1, the only version
/// the workspace's reqwest is built to speak.
fn tls_config(roots: RootCertStore) -> ClientConfig {
    let mut config = ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .expect("the process's crypto provider supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

pub mod backoff;
pub mod sse;
