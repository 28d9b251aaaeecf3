//! `holdfast server maintenance`: release dead leases, wake delayed agents, time
//! out commands and machines, deliver webhooks. Flags mirror the
//! environment variables of docs/configuration.md.

use std::time::Duration;

use std::sync::Arc;

use anyhow::Result;
use holdfast_providers::egress::EgressPolicy;
use holdfast_wire::duration::parse_duration;
use holdfast_worker::maintenance::{self, Settings};
use holdfast_worker::webhooks::DispatcherSettings;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::database::Database;

#[derive(clap::Args)]
pub struct MaintenanceArgs {
    /// Time between maintenance passes (expired leases, dead sessions, delays).
    #[arg(long = "maintenance-interval", env = "HOLDFAST_MAINTENANCE_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// A command its machine has not accepted within this time fails (never runs late).
    #[arg(long = "command-accept-timeout", env = "HOLDFAST_COMMAND_ACCEPT_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    command_accept_timeout: Duration,
    /// A machine with no heartbeat for this long is offline: its queued commands
    /// fail (unless a wake attempt is in progress) and agents waiting on its
    /// accepted commands get machine_unreachable.
    #[arg(long = "machine-offline-after", env = "HOLDFAST_MACHINE_OFFLINE_AFTER", default_value = "30s", value_parser = parse_duration)]
    machine_offline_after: Duration,
    /// Time between retention passes (event partitions ahead, expired ones
    /// dropped, finished agents' rows past their project's retention pruned).
    #[arg(long = "retention-interval", env = "HOLDFAST_RETENTION_INTERVAL", default_value = "1h", value_parser = parse_duration)]
    retention_interval: Duration,
    /// A schedule's slot more than this late (maintenance was away) is
    /// missed: skipped, or fired once for all missed slots, by the
    /// schedule's policy.
    #[arg(long = "schedule-late-after", env = "HOLDFAST_SCHEDULE_LATE_AFTER", default_value = "1m", value_parser = parse_duration)]
    schedule_late_after: Duration,
    /// Retry a webhook delivery until this long after its event, then mark it failed.
    #[arg(long = "webhook-retry-window", env = "HOLDFAST_WEBHOOK_RETRY_WINDOW", default_value = "10m", value_parser = parse_duration)]
    webhook_retry_window: Duration,
    /// Give up on one webhook request after this long.
    #[arg(long = "webhook-timeout", env = "HOLDFAST_WEBHOOK_TIMEOUT", default_value = "15s", value_parser = parse_duration)]
    webhook_timeout: Duration,
    /// Webhook requests in flight at once in this process.
    #[arg(
        long = "webhook-concurrency",
        env = "HOLDFAST_WEBHOOK_CONCURRENCY",
        default_value_t = 64
    )]
    webhook_concurrency: usize,
    /// Webhook requests in flight at once per endpoint, across all processes.
    #[arg(
        long = "webhook-max-per-endpoint",
        env = "HOLDFAST_WEBHOOK_MAX_PER_ENDPOINT",
        default_value_t = 16
    )]
    webhook_max_per_endpoint: i32,
    /// Delay before the first webhook retry; doubles per retry (with jitter).
    #[arg(long = "webhook-backoff-base", env = "HOLDFAST_WEBHOOK_BACKOFF_BASE", default_value = "1s", value_parser = parse_duration)]
    webhook_backoff_base: Duration,
    /// Longest delay between two webhook retries.
    #[arg(long = "webhook-backoff-max", env = "HOLDFAST_WEBHOOK_BACKOFF_MAX", default_value = "2m", value_parser = parse_duration)]
    webhook_backoff_max: Duration,
}

impl MaintenanceArgs {
    /// The maintenance settings; `egress` decides what webhooks may reach.
    pub fn settings(&self, egress: Arc<EgressPolicy>) -> Settings {
        Settings {
            interval: self.interval,
            command_accept_timeout: self.command_accept_timeout,
            machine_offline_after: self.machine_offline_after,
            retention_interval: self.retention_interval,
            schedule_late_after: self.schedule_late_after,
            webhooks: DispatcherSettings {
                retry_window: self.webhook_retry_window,
                request_timeout: self.webhook_timeout,
                concurrency: self.webhook_concurrency,
                max_per_endpoint: self.webhook_max_per_endpoint,
                backoff_base: self.webhook_backoff_base,
                backoff_max: self.webhook_backoff_max,
                egress,
                poll_interval: self.interval,
            },
        }
    }
}

/// Run until SIGTERM or SIGINT, then stop every task and return.
pub async fn run(db: &Database, args: MaintenanceArgs, egress: Arc<EgressPolicy>) -> Result<()> {
    anyhow::ensure!(
        !args.command_accept_timeout.is_zero()
            && !args.machine_offline_after.is_zero()
            && !args.retention_interval.is_zero(),
        "HOLDFAST_COMMAND_ACCEPT_TIMEOUT, HOLDFAST_MACHINE_OFFLINE_AFTER and HOLDFAST_RETENTION_INTERVAL must be positive"
    );
    db.migrate().await?;
    let shutdown = CancellationToken::new();
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
            _ = interrupt.recv() => tracing::info!("SIGINT: stopping"),
        }
        on_signal.cancel();
    });
    maintenance::run(args.settings(egress), db.config.clone(), shutdown).await
}
