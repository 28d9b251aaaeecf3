//! `holdfast api`: the HTTP API on HOLDFAST_LISTEN until SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use holdfast_api::ApiConfig;
use holdfast_engine::egress::EgressPolicy;
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
}

pub async fn run(db: &Database, args: ApiArgs, egress: Arc<EgressPolicy>) -> Result<()> {
    db.migrate().await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let shutdown = CancellationToken::new();
    cancel_on_signal(shutdown.clone())?;
    let config = ApiConfig {
        egress,
        ..ApiConfig::new(db.config.clone())
    };
    holdfast_api::serve(config, listener, shutdown).await?;
    Ok(())
}
