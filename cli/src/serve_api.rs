//! `holdfast api`: the HTTP API on HOLDFAST_LISTEN until SIGTERM/SIGINT.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use holdfast_api::ApiConfig;
use holdfast_engine::domain::webhook_private_urls_allowed;
use tokio_util::sync::CancellationToken;

use crate::database::Database;
use crate::signals::cancel_on_signal;

#[derive(clap::Args)]
pub struct ApiArgs {
    /// Address to serve HTTP on.
    #[arg(
        long = "listen",
        env = "HOLDFAST_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    listen: SocketAddr,
    /// Allow webhook endpoints on private/loopback addresses (default: only
    /// when listening on loopback).
    #[arg(long = "webhook-allow-private", env = "HOLDFAST_WEBHOOK_ALLOW_PRIVATE")]
    webhook_allow_private: Option<bool>,
    #[command(flatten)]
    metrics: MetricsArgs,
}

/// Who may read `GET /metrics` (`holdfast api`, `holdfast up`).
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

pub async fn run(db: &Database, args: ApiArgs) -> Result<()> {
    db.migrate().await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let shutdown = CancellationToken::new();
    cancel_on_signal(shutdown.clone())?;
    let config = ApiConfig {
        webhook_allow_private: webhook_private_urls_allowed(
            &args.listen.to_string(),
            args.webhook_allow_private,
        ),
        metrics_token: args.metrics.token(),
        ..ApiConfig::new(db.config.clone())
    };
    holdfast_api::serve(config, listener, shutdown).await?;
    Ok(())
}
