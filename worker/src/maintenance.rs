//! The maintenance process (`holdfast maintenance`): a loop that calls
//! `holdfast.maintenance_tick()` every interval (release expired leases and
//! the leases of dead sessions, wake delayed agents) and
//! `holdfast.machine_tick()` (commands not accepted in time, offline and
//! unreachable machines), the retention pass every retention interval
//! (`store::retention_tick`: event partitions ahead of time, expired ones
//! dropped, finished agents' old rows pruned), the schedules' pass every
//! interval (fire_schedules: each due slot's input), and the webhook
//! dispatcher, side by side.
//!
//! Several instances may run at once: the tick's sweeps and the dispatcher's
//! claims take their rows with SKIP LOCKED. Postgres going away is not fatal:
//! every database call is retried with backoff and jitter, and the pool opens
//! fresh connections when the server is back. Shutdown is a cancellation
//! token; [`run`] returns once both loops and all their tasks have stopped.

use std::time::Duration;

use deadpool_postgres::Pool;
use holdfast_db::{connect, store};
use holdfast_outbound::backoff::Backoff;
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
    /// Time between two retention passes (`HOLDFAST_RETENTION_INTERVAL`).
    pub retention_interval: Duration,
    /// A schedule's slot more than this late is missed
    /// (`HOLDFAST_SCHEDULE_LATE_AFTER`; wire/src/schedule.rs).
    pub schedule_late_after: Duration,
    pub webhooks: DispatcherSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            interval: Duration::from_secs(1),
            command_accept_timeout: Duration::from_secs(300),
            machine_offline_after: Duration::from_secs(30),
            retention_interval: Duration::from_secs(3600),
            schedule_late_after: Duration::from_secs(60),
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
    let retention = retention_loop(settings.retention_interval, pool.clone(), stop.clone());
    let schedules = schedule_loop(settings.clone(), pool.clone(), stop.clone());
    let dispatcher = async {
        let result = webhooks::run(dispatcher_settings, pool, db, stop.clone()).await;
        stop.cancel();
        result
    };
    let ((), (), (), dispatched) = tokio::join!(ticks, retention, schedules, dispatcher);
    tracing::info!("maintenance stopped");
    dispatched
}

/// Call `maintenance_tick` (and `machine_tick`) every interval, and report
/// what they did.
async fn tick_loop(settings: Settings, pool: Pool, shutdown: CancellationToken) {
    let interval = settings.interval;
    repeat_pass(
        "maintenance tick",
        interval,
        Duration::MAX,
        shutdown,
        || tick(&pool, &settings),
    )
    .await;
}

/// Run `pass` every `interval` until shutdown. A failed pass is retried
/// after the database backoff (`DB_RETRY`, at most `max_retry_wait`),
/// counted in `holdfast_maintenance_errors_total` and logged as "`what`
/// failed".
async fn repeat_pass<F, Fut>(
    what: &'static str,
    interval: Duration,
    max_retry_wait: Duration,
    shutdown: CancellationToken,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut failures: u32 = 0;
    loop {
        let wait = match pass().await {
            Ok(()) => {
                failures = 0;
                interval
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                metrics::counter!("holdfast_maintenance_errors_total").increment(1);
                let wait = DB_RETRY.delay(failures, None).min(max_retry_wait);
                tracing::warn!(error = %e, retry_in = ?wait, "{what} failed");
                wait
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Rows of each kind one retention call prunes (one transaction each): small
/// enough that its row locks and WAL stay short under load.
const RETENTION_BATCH: i32 = 10_000;

/// Run a retention pass every interval; a pass repeats `retention_tick`
/// while it prunes full batches, so a backlog goes in one pass, in small
/// transactions. A failed pass is retried no later than the next interval.
async fn retention_loop(interval: Duration, pool: Pool, shutdown: CancellationToken) {
    let pass_shutdown = shutdown.clone();
    repeat_pass("retention pass", interval, interval, shutdown, || {
        retention_pass(&pool, &pass_shutdown)
    })
    .await;
}

async fn retention_pass(pool: &Pool, shutdown: &CancellationToken) -> anyhow::Result<()> {
    loop {
        let work = async {
            let client = pool.get().await?;
            Ok::<_, anyhow::Error>(store::retention_tick(&client, RETENTION_BATCH).await?)
        };
        let report = tokio::time::timeout(DB_CALL_TIMEOUT, work).await??;
        for (kind, count) in [
            ("partitions", i64::from(report.partitions_dropped)),
            ("events", report.events_deleted),
            ("deliveries", report.deliveries_deleted),
            ("tool_outputs", report.tool_outputs_pruned),
            ("inputs", report.inputs_pruned),
            ("attachments", report.attachments_deleted),
        ] {
            metrics::counter!("holdfast_retention_pruned_total", "kind" => kind)
                .increment(count.unsigned_abs());
        }
        if report != holdfast_wire::domain::RetentionReport::default() {
            tracing::info!(
                partitions_created = report.partitions_created,
                partitions_dropped = report.partitions_dropped,
                events_deleted = report.events_deleted,
                deliveries_deleted = report.deliveries_deleted,
                tool_outputs_pruned = report.tool_outputs_pruned,
                inputs_pruned = report.inputs_pruned,
                attachments_deleted = report.attachments_deleted,
                "retention pass"
            );
        }
        let full = i64::from(RETENTION_BATCH);
        let more = report.events_deleted >= full
            || report.deliveries_deleted >= full
            || report.tool_outputs_pruned >= full
            || report.inputs_pruned >= full
            || report.attachments_deleted >= full;
        if !more || shutdown.is_cancelled() {
            return Ok(());
        }
    }
}

/// Due schedules one transaction claims: their inputs and events commit
/// together, in a transaction short enough to hold the schedules' locks.
const SCHEDULE_BATCH: i32 = 100;

/// Fire the due schedules every interval.
async fn schedule_loop(settings: Settings, pool: Pool, shutdown: CancellationToken) {
    let pass_shutdown = shutdown.clone();
    repeat_pass(
        "schedule pass",
        settings.interval,
        Duration::MAX,
        shutdown,
        || schedule_pass(&pool, settings.schedule_late_after, &pass_shutdown),
    )
    .await;
}

/// Claim due schedules (SKIP LOCKED: another maintenance process takes the
/// others), decide each one's slots (wire/src/schedule.rs) and advance it
/// in the same transaction, batch after batch while batches come back full.
/// A crash before the commit leaves the slots due for the next pass; the
/// fence in advance_schedule and the slot's idempotency key keep a slot
/// from firing twice.
async fn schedule_pass(
    pool: &Pool,
    late_after: Duration,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    loop {
        let work = async {
            let mut client = pool.get().await?;
            let tx = client.transaction().await?;
            let due = store::claim_due_schedules(&tx, SCHEDULE_BATCH).await?;
            for schedule in &due {
                let outcome = match fire_plan(schedule, late_after) {
                    Ok(plan) => {
                        store::advance_schedule(&tx, schedule.id, schedule.due, &plan).await?
                    }
                    Err(problem) => {
                        // A stored expression this build cannot read (a
                        // time zone its database lacks): it stays due, and
                        // the log says why.
                        tracing::warn!(schedule = %schedule.id, %problem, "schedule cannot be planned");
                        continue;
                    }
                };
                metrics::counter!("holdfast_schedule_fires_total", "outcome" => outcome)
                    .increment(1);
            }
            tx.commit().await?;
            Ok::<_, anyhow::Error>(due.len())
        };
        let claimed = tokio::time::timeout(DB_CALL_TIMEOUT, work).await??;
        if claimed < SCHEDULE_BATCH as usize || shutdown.is_cancelled() {
            return Ok(());
        }
    }
}

fn fire_plan(
    schedule: &holdfast_wire::domain::DueSchedule,
    late_after: Duration,
) -> Result<holdfast_wire::schedule::FirePlan, String> {
    let recurrence = holdfast_wire::schedule::recurrence(
        schedule.cron.as_deref(),
        &schedule.timezone,
        schedule.every,
    )?;
    let timing = holdfast_wire::schedule::Timing {
        recurrence,
        start_at: schedule.start_at,
        created_at: schedule.created_at,
        end_at: schedule.end_at,
    };
    Ok(timing.plan(schedule.due, schedule.now, late_after, schedule.missed))
}

async fn tick(pool: &Pool, settings: &Settings) -> anyhow::Result<()> {
    let work = async {
        let client = pool.get().await?;
        let report = store::maintenance_tick(&client).await?;
        let machines = store::machine_tick(
            &client,
            settings.command_accept_timeout,
            settings.machine_offline_after,
        )
        .await?;
        let queue = store::webhook_queue_stats(&client).await?;
        Ok::<_, holdfast_db::Error>((report, machines, queue))
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
    if machines != holdfast_wire::domain::MachineTickReport::default() {
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

/// Retries of a failed database call in the background loops (maintenance
/// ticks, the webhook dispatcher's claims and listener): 100 ms doubling to
/// 10 s, so that many processes retrying after the same outage (a Postgres
/// restart) spread out.
pub(crate) const DB_RETRY: Backoff = Backoff {
    base: Duration::from_millis(100),
    cap: Duration::from_secs(10),
};
