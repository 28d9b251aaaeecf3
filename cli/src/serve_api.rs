//! `holdfast api`: the HTTP API on HOLDFAST_LISTEN until SIGTERM/SIGINT.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use holdfast_api::ApiConfig;
use holdfast_engine::domain::webhook_private_urls_allowed;
use holdfast_engine::secrets::SecretKey;
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
        secret_key: SecretKey::from_lookup(|name| std::env::var(name).ok())?,
        ..ApiConfig::new(db.config.clone())
    };
    holdfast_api::serve(config, listener, shutdown).await?;
    Ok(())
}
