//! `holdfast server api`: the HTTP API on HOLDFAST_LISTEN until SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use holdfast_api::rate_limit::{parse_rate_limit, RateLimit, DEFAULT_RATE_LIMIT};
use holdfast_api::ApiConfig;
use holdfast_db::connect::{self, ConnectConfig};
use holdfast_db::store;
use holdfast_providers::egress::EgressPolicy;
use holdfast_providers::secrets::SecretKey;
use holdfast_wire::domain::AttachmentQuotas;
use holdfast_wire::duration::parse_duration;
use tokio_util::sync::CancellationToken;

use crate::database::Database;
use crate::run_worker::GroupCommitArgs;
use crate::signals::cancel_on_signal;

#[derive(clap::Args)]
pub struct ApiArgs {
    #[command(flatten)]
    listen: ListenArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
    /// Requests per API key: `N/s`, `N/m` or `N/h`, optionally `,burst=B`
    /// (default burst: twice the rate); `off` or `0` for no limit.
    #[arg(
        long = "api-rate-limit",
        env = "HOLDFAST_API_RATE_LIMIT",
        default_value = DEFAULT_RATE_LIMIT,
        value_parser = parse_rate_limit,
    )]
    rate_limit: RateLimitSetting,
    /// How long a request may take to be answered (a stream: until its
    /// headers); past it, 503 `timeout`. At least 1s.
    #[arg(
        long = "api-request-timeout",
        env = "HOLDFAST_API_REQUEST_TIMEOUT",
        default_value = "30s",
        value_parser = parse_request_timeout,
    )]
    request_timeout: Duration,
    #[command(flatten)]
    group_commit: GroupCommitArgs,
    #[command(flatten)]
    attachment_quotas: AttachmentQuotaArgs,
    /// A streaming standby of the database: event listings and stream
    /// history read from it, lag-aware (docs/scaling.md). The same TLS
    /// settings apply (its own sslmode, or PGSSLMODE).
    #[arg(
        long = "read-database-url",
        env = "HOLDFAST_READ_DATABASE_URL",
        hide_env_values = true
    )]
    read_database_url: Option<String>,
}

/// Where the API listens (`holdfast server api`, `holdfast up`).
#[derive(clap::Args)]
pub struct ListenArgs {
    /// Address to serve HTTP on.
    #[arg(
        long = "listen",
        env = "HOLDFAST_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: SocketAddr,
}

/// Who may read `GET /metrics` (`holdfast server api`, `holdfast up`).
#[derive(clap::Args)]
pub struct MetricsArgs {
    /// Require `Authorization: Bearer <this>` on GET /metrics (its figures
    /// cover every project). Unset or empty: /metrics is open.
    #[arg(
        long = "metrics-token",
        env = "HOLDFAST_METRICS_TOKEN",
        hide_env_values = true
    )]
    metrics_token: Option<String>,
}

impl MetricsArgs {
    pub fn token(&self) -> Option<String> {
        self.metrics_token.clone().filter(|token| !token.is_empty())
    }
}

/// The operator's attachment quotas (`holdfast api`, `holdfast up`): every
/// API process writes them to `holdfast.attachment_quotas` at start, where
/// the SQL that stores files reads them.
#[derive(clap::Args)]
pub struct AttachmentQuotaArgs {
    /// Most bytes of images and documents one agent may have stored; an
    /// input or tool result past it is refused (422).
    #[arg(
        long = "max-attachment-bytes-per-agent",
        env = "HOLDFAST_MAX_ATTACHMENT_BYTES_PER_AGENT",
        default_value_t = AttachmentQuotas::default().bytes_per_agent,
        value_parser = clap::value_parser!(i64).range(1..),
    )]
    bytes_per_agent: i64,
    /// Most bytes of images and documents one project's agents may have
    /// stored together.
    #[arg(
        long = "max-attachment-bytes-per-project",
        env = "HOLDFAST_MAX_ATTACHMENT_BYTES_PER_PROJECT",
        default_value_t = AttachmentQuotas::default().bytes_per_project,
        value_parser = clap::value_parser!(i64).range(1..),
    )]
    bytes_per_project: i64,
}

impl AttachmentQuotaArgs {
    /// Write the quotas to the database (`holdfast.set_attachment_quotas`).
    pub async fn record(&self, db: &Database) -> Result<()> {
        let (client, connection) = db.config.connect().await?;
        tokio::spawn(connection);
        let quotas = AttachmentQuotas {
            bytes_per_agent: self.bytes_per_agent,
            bytes_per_project: self.bytes_per_project,
        };
        store::set_attachment_quotas(&client, &quotas).await?;
        Ok(())
    }
}

/// `None` is no limit (an alias, so that clap takes the parser's value
/// whole instead of reading `Option` as "the flag may be absent").
type RateLimitSetting = Option<RateLimit>;

pub async fn run(db: &Database, args: ApiArgs, egress: Arc<EgressPolicy>) -> Result<()> {
    db.migrate().await?;
    args.attachment_quotas.record(db).await?;
    let listen = args.listen.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let shutdown = CancellationToken::new();
    cancel_on_signal(shutdown.clone())?;
    let read_database = args
        .read_database_url
        .as_deref()
        .map(ConnectConfig::parse)
        .transpose()
        .context("HOLDFAST_READ_DATABASE_URL")?;
    if let Some(replica) = &read_database {
        connect::require_session_per_connection(replica, "HOLDFAST_READ_DATABASE_URL").await?;
    }
    let config = ApiConfig {
        read_database,
        egress,
        metrics_token: args.metrics.token(),
        rate_limit: args.rate_limit,
        request_timeout: args.request_timeout,
        group_commit: args.group_commit.settings(),
        secret_key: SecretKey::from_lookup(|name| std::env::var(name).ok())?,
        ..ApiConfig::new(db.config.clone())
    };
    holdfast_api::serve(config, listener, shutdown).await?;
    Ok(())
}

/// `--api-request-timeout`: a duration of at least a second (a claim's
/// long-poll answers a second before it).
fn parse_request_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if timeout < Duration::from_secs(1) {
        return Err(format!("{text}: the request timeout must be at least 1s"));
    }
    Ok(timeout)
}
