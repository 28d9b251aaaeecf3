//! `holdfast server api|worker|maintenance`: the server roles, one process
//! each, and the flags they share (the database, what outbound requests may
//! reach). `holdfast up` runs all three in one process.

use std::sync::Arc;

use anyhow::Result;
use clap::{Args, Subcommand};
use holdfast_providers::egress::EgressPolicy;

use crate::database::DatabaseArgs;
use crate::maintenance::MaintenanceArgs;
use crate::run_worker::WorkerArgs;
use crate::serve_api::ApiArgs;
use crate::{maintenance, run_worker, serve_api};

#[derive(Subcommand)]
pub enum ServerCommand {
    /// Serve the HTTP API until SIGTERM/SIGINT. Applies pending migrations
    /// at start, as `holdfast migrate` does.
    Api(Server<ApiArgs>),
    /// Claim agents and run their steps until SIGTERM/SIGINT (then drain).
    /// Applies pending migrations at start, as `holdfast migrate` does.
    Worker(Server<WorkerArgs>),
    /// Release dead leases, wake delayed agents, time out commands and
    /// machines, deliver webhooks, prune by retention (safe to run several).
    /// Applies pending migrations at start, as `holdfast migrate` does.
    Maintenance(Server<MaintenanceArgs>),
}

/// A server role's own flags with the ones every server process shares.
#[derive(Args)]
pub struct Server<Role: Args> {
    #[command(flatten)]
    pub database: DatabaseArgs,
    #[command(flatten)]
    pub egress: EgressArgs,
    #[command(flatten)]
    pub role: Role,
}

/// What tenant- and model-aimed requests may reach (the server roles and
/// `up`; a bad value stops them at start).
#[derive(Args)]
pub struct EgressArgs {
    /// Special-purpose address ranges (private, loopback, link-local, ...)
    /// that tenant- and model-aimed requests may reach, per kind:
    /// `kind=range;range,...` with kinds web_fetch, mcp, webhook, wake,
    /// model, content_url or *, and ranges in CIDR, single addresses or *.
    /// Unset: public addresses only.
    #[arg(long = "egress-allow", env = "HOLDFAST_EGRESS_ALLOW")]
    egress_allow: Option<String>,
}

impl EgressArgs {
    pub fn policy(&self) -> Result<Arc<EgressPolicy>> {
        let policy = EgressPolicy::configure(self.egress_allow.as_deref(), |name| {
            std::env::var(name).ok()
        })?;
        Ok(Arc::new(policy))
    }
}

pub async fn run(command: ServerCommand) -> Result<()> {
    match command {
        ServerCommand::Api(server) => {
            let egress = server.egress.policy()?;
            serve_api::run(&server.database.open().await?, server.role, egress).await
        }
        ServerCommand::Worker(server) => {
            let egress = server.egress.policy()?;
            run_worker::run(&server.database.open().await?, &server.role, egress).await
        }
        ServerCommand::Maintenance(server) => {
            let egress = server.egress.policy()?;
            maintenance::run(&server.database.open().await?, server.role, egress).await
        }
    }
}
