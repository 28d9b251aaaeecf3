//! The maintenance process (`holdfast maintenance`): a loop that calls
//! `holdfast.maintenance_tick()` every interval (release expired leases and
//! the leases of dead sessions, wake delayed agents) and
//! `holdfast.machine_tick()` (commands not accepted in time, offline and
//! unreachable machines), and the webhook dispatcher, side by side.
//!
//! Several instances may run at once: the tick's sweeps and the dispatcher's
//! claims take their rows with SKIP LOCKED. Postgres going away is not fatal:
//! every database call is retried with backoff and jitter, and the pool opens
//! fresh connections when the server is back. Shutdown is a cancellation
//! token; [`run`] returns once both loops and all their tasks have stopped.

use std::time::Duration;

use deadpool_postgres::Pool;
use holdfast_engine::{connect, store};
use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::webhooks::{self, DispatcherSettings};

/// How the maintenance process runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Time between two maintenance ticks (`HOLDFAST_MAINTENANCE_INTERVAL`).
    /// The dispatcher also polls for due retries at this rate.
    pub interval: Duration,
    /// A queued command not accepted by its machine within this time fails
    /// (`HOLDFAST_COMMAND_ACCEPT_TIMEOUT`).
    pub command_accept_timeout: Duration,
    /// A machine with no heartbeat for this long is offline
    /// (`HOLDFAST_MACHINE_OFFLINE_AFTER`).
    pub machine_offline_after: Duration,
    pub webhooks: DispatcherSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            interval: Duration::from_secs(1),
            command_accept_timeout: Duration::from_secs(300),
            machine_offline_after: Duration::from_secs(30),
            webhooks: DispatcherSettings::default(),
        }
    }
}

/// A database call that does not answer within this time is abandoned and
/// retried (a partitioned server must not hang the loops forever).
pub(crate) const DB_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Run maintenance until `shutdown` is cancelled; returns after every task
/// has stopped. Errors only when it cannot start (an invalid setting).
pub async fn run(
    settings: Settings,
    mut db: connect::ConnectConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if db.postgres.get_connect_timeout().is_none() {
        db.postgres.connect_timeout(Duration::from_secs(5));
    }
    // The ticks need one connection; the dispatcher records outcomes from
    // many tasks, which queue briefly for a connection rather than hold many.
    let pool = connect::pool(db.clone(), 8)?;
    let mut dispatcher_settings = settings.webhooks.clone();
    dispatcher_settings.poll_interval = settings.interval;
    tracing::info!(
        interval = ?settings.interval,
        retry_window = ?dispatcher_settings.retry_window,
        "maintenance started"
    );
    // A dispatcher that cannot start stops the ticks too, so `run` returns
    // its error instead of running half a maintenance process.
    let stop = shutdown.child_token();
    let ticks = tick_loop(settings.clone(), pool.clone(), stop.clone());
    let dispatcher = async {
        let result = webhooks::run(dispatcher_settings, pool, db, stop.clone()).await;
        stop.cancel();
        result
    };
    let ((), dispatched) = tokio::join!(ticks, dispatcher);
    tracing::info!("maintenance stopped");
    dispatched
}

/// Call `maintenance_tick` (and `machine_tick`) every interval, and report
/// what they did.
async fn tick_loop(settings: Settings, pool: Pool, shutdown: CancellationToken) {
    let interval = settings.interval;
    let mut failures: u32 = 0;
    loop {
        let wait = match tick(&pool, &settings).await {
            Ok(()) => {
                failures = 0;
                interval
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                metrics::counter!("holdfast_maintenance_errors_total").increment(1);
                let wait = backoff_delay(
                    Duration::from_millis(100),
                    Duration::from_secs(10),
                    failures,
                );
                tracing::warn!(error = %e, retry_in = ?wait, "maintenance tick failed");
                wait
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

async fn tick(pool: &Pool, settings: &Settings) -> anyhow::Result<()> {
    let work = async {
        let client = pool.get().await?;
        let report = store::maintenance_tick(&**client).await?;
        let machines = store::machine_tick(
            &**client,
            settings.command_accept_timeout,
            settings.machine_offline_after,
        )
        .await?;
        let queue = store::webhook_queue_stats(&**client).await?;
        Ok::<_, holdfast_engine::Error>((report, machines, queue))
    };
    let (report, machines, queue) = tokio::time::timeout(DB_CALL_TIMEOUT, work).await??;
    metrics::counter!("holdfast_maintenance_ticks_total").increment(1);
    metrics::counter!("holdfast_maintenance_released_total", "reason" => "lease_expired")
        .increment(report.expired.unsigned_abs());
    metrics::counter!("holdfast_maintenance_released_total", "reason" => "session_gone")
        .increment(report.session_gone.unsigned_abs());
    metrics::counter!("holdfast_maintenance_woken_total").increment(report.woken.unsigned_abs());
    metrics::counter!("holdfast_maintenance_subagents_cancelled_total")
        .increment(report.subagents_cancelled.unsigned_abs());
    for (outcome, count) in [
        ("lost", machines.lost),
        ("accept_timeout", machines.accept_timeout),
        ("machine_offline", machines.machine_offline),
        ("unreachable", machines.unreachable),
    ] {
        metrics::counter!("holdfast_maintenance_commands_total", "outcome" => outcome)
            .increment(count.unsigned_abs());
    }
    if machines != holdfast_engine::domain::MachineTickReport::default() {
        tracing::info!(
            lost = machines.lost,
            accept_timeout = machines.accept_timeout,
            machine_offline = machines.machine_offline,
            unreachable = machines.unreachable,
            "resolved commands of absent machines"
        );
    }
    metrics::gauge!("holdfast_webhook_oldest_due_seconds").set(queue.oldest_due_seconds);
    metrics::gauge!("holdfast_webhook_in_flight").set(queue.in_flight as f64);
    if report.expired > 0 || report.session_gone > 0 {
        tracing::info!(
            expired = report.expired,
            session_gone = report.session_gone,
            "released agents whose holder is gone"
        );
    }
    Ok(())
}

/// Exponential backoff with jitter: `base * 2^(n-1)`, at most `max`, then a
/// random point in its upper half, so that many processes retrying after
/// the same outage (a Postgres restart) spread out.
pub(crate) fn backoff_delay(base: Duration, max: Duration, n: u32) -> Duration {
    let exponent = n.saturating_sub(1).min(20);
    let full = base.saturating_mul(1 << exponent).min(max);
    let half = full / 2;
    half + rand::rng().random_range(Duration::ZERO..=half)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter_in_the_upper_half() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        for (n, full) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (5, 1600),
            (6, 2000),
            (60, 2000),
        ] {
            let full = Duration::from_millis(full);
            for _ in 0..50 {
                let d = backoff_delay(base, max, n);
                assert!(d >= full / 2 && d <= full, "attempt {n}: {d:?} vs {full:?}");
            }
        }
    }
}
