//! The worker loop: claim agents, run one step each as its own task, renew
//! their leases in one batched call, stop steps whose lease is lost or whose
//! turn is cancelled, and drain on shutdown.
//!
//! Claims and renewals go through one dedicated session (never a pooled
//! connection): its backend pid is recorded on every claim, so when this
//! process dies, maintenance sees the session gone and releases its agents
//! at once. The same session LISTENs on `holdfast_ready`, `holdfast_cancel`
//! and `holdfast_interrupt`; notifications are hints, so the loop also polls
//! (and renewals report cancels and interrupts).
//!
//! A step whose end leaves its agent ready keeps the lease (at the next
//! epoch) when no other agent waits to be claimed, and its task takes the
//! agent's next step at once: a busy agent stays on this worker, in its
//! slot, without a release and a re-claim.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use holdfast_db::connect::{self, ConnectConfig, Session};
use holdfast_db::{store, Error, Result};
use holdfast_outbound::backoff::Backoff;
use holdfast_providers::Providers;
use holdfast_wire::domain::{Claim, StepContext};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_postgres::Notification;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::committer::Committer;
use crate::deps::StepDeps;
use crate::outcome::StepOutcome;
use crate::settings::WorkerSettings;
use crate::step;
use crate::stop::{StopReason, StopSignal};
use crate::tools::mcp::{McpLimits, McpRegistry};
use crate::tools::web_fetch::{web_fetch_client, WebFetchLimits};

/// An agent in flight: its lease, the task running its steps.
struct InFlight {
    lease: Arc<Mutex<HeldLease>>,
    stop: StopSignal,
    /// The steps' task: if it ever ends abnormally (a panic outside the
    /// step's own containment), the slot is still freed by this id.
    task: tokio::task::Id,
}

/// A lease this worker holds, shared by the loop that renews it and the
/// task whose step moves it on to the next epoch when it keeps it.
struct HeldLease {
    epoch: i64,
    /// Until when the lease is surely still ours, on this process's
    /// monotonic clock: measured from *before* the claim, renewal or
    /// commit that set it was sent, so clock skew and slow replies only
    /// make it more cautious.
    valid_until: Instant,
}

fn held(lease: &Mutex<HeldLease>) -> std::sync::MutexGuard<'_, HeldLease> {
    // Nothing panics while holding it; a poisoned lock still holds a lease.
    lease.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Run a worker until `shutdown` fires, then drain: stop claiming, give
/// in-flight steps `drain_timeout` to finish, stop the rest (they release
/// their agents explicitly), and return once every step task has ended.
pub async fn run(
    settings: WorkerSettings,
    db: ConnectConfig,
    providers: Arc<Providers>,
    shutdown: CancellationToken,
) -> Result<()> {
    // Steps hold a connection only to load and to commit, never across a
    // model or tool call: a small pool serves many in-flight steps
    // (1,000 steps on 1,001 sessions cost Postgres 1.5 GB; see docs/internals/benchmarks.md).
    let pool = connect::pool(db.clone(), settings.concurrency.min(16) + 2)?;
    store::set_limit_maxima(&**pool.get().await?, &settings.limits).await?;
    let web_fetch_limits = WebFetchLimits {
        egress: settings.egress.clone(),
        ..WebFetchLimits::default()
    };
    let web_fetch_client = web_fetch_client(&web_fetch_limits).map_err(|e| Error::Invalid {
        field: Some("web_fetch".into()),
        message: e.to_string(),
    })?;
    let web_search_client = holdfast_outbound::client_builder()
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!(
            "holdfast/",
            env!("CARGO_PKG_VERSION"),
            " (web_search)"
        ))
        .build()
        .map_err(|e| Error::Invalid {
            field: Some("web_search".into()),
            message: e.to_string(),
        })?;
    let (committer, committing) = Committer::start(
        pool.clone(),
        settings.group_commit,
        Some(settings.lease_ttl),
    );
    let deps = Arc::new(StepDeps {
        pool,
        providers,
        settings: settings.clone(),
        web_fetch_client,
        web_fetch_limits,
        web_search_client,
        mcp: McpRegistry::new(McpLimits {
            egress: settings.egress.clone(),
            ..McpLimits::default()
        }),
        committer,
        shutdown: shutdown.clone(),
    });
    let mut worker = Worker {
        settings,
        db,
        deps,
        in_flight: HashMap::new(),
        tasks: tokio::task::JoinSet::new(),
        session: None,
    };
    worker.run(shutdown).await;
    // Every step has ended; the committer ends after the commits it holds.
    drop(worker);
    if let Err(error) = committing.await {
        tracing::error!(%error, "the group committer ended abnormally");
    }
    Ok(())
}

struct Worker {
    settings: WorkerSettings,
    db: ConnectConfig,
    deps: Arc<StepDeps>,
    in_flight: HashMap<Uuid, InFlight>,
    tasks: tokio::task::JoinSet<()>,
    session: Option<Session>,
}

impl Worker {
    async fn run(&mut self, shutdown: CancellationToken) {
        let mut poll = tokio::time::interval(self.settings.poll_interval);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut renew = tokio::time::interval(self.settings.renew_interval);
        renew.set_missed_tick_behavior(MissedTickBehavior::Delay);
        renew.reset();
        // Lease validity is checked often, independent of renewal success.
        let mut lease_check = tokio::time::interval(LEASE_CHECK_INTERVAL);
        lease_check.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut drain_deadline: Option<Instant> = None;
        let mut want_claim = true;

        tracing::info!(worker = %self.settings.name, concurrency = self.settings.concurrency, "worker started");
        loop {
            if drain_deadline.is_none() {
                if self.session.is_none() {
                    self.reconnect(&shutdown).await;
                    want_claim = true;
                }
                if want_claim {
                    want_claim = false;
                    self.take_queued();
                    self.claim().await;
                }
            } else if self.in_flight.is_empty() {
                break;
            }

            let notification = async {
                match self.session.as_mut() {
                    Some(session) => session.notifications.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled(), if drain_deadline.is_none() => {
                    tracing::info!(in_flight = self.in_flight.len(), "draining");
                    drain_deadline = Some(Instant::now() + self.settings.drain_timeout);
                }
                _ = sleep_until_opt(drain_deadline) => {
                    tracing::info!(in_flight = self.in_flight.len(), "drain timeout: releasing the rest");
                    for flight in self.in_flight.values() {
                        flight.stop.stop(StopReason::Drain);
                    }
                    // Wait for the step tasks to release; they end promptly.
                    drain_deadline = Some(Instant::now() + Duration::from_secs(3600));
                }
                message = notification => match message {
                    Some(n) => want_claim |= self.on_notification(&n),
                    None => {
                        tracing::warn!("listen session lost; reconnecting");
                        self.session = None;
                    }
                },
                _ = poll.tick() => want_claim = true,
                Some(done) = self.tasks.join_next_with_id() => {
                    self.forget(done);
                    want_claim = true;
                }
                _ = renew.tick() => self.renew().await,
                _ = lease_check.tick() => self.stop_expired_leases(),
            }
        }
        while self.tasks.join_next().await.is_some() {}
        tracing::info!(worker = %self.settings.name, "worker stopped");
    }

    /// Act on one notification; true for a wake hint (a claim is due).
    fn on_notification(&self, n: &Notification) -> bool {
        match n.channel() {
            "holdfast_interrupt" => {
                // "agent_id input_id" (create_input_or_replay).
                let mut ids = n.payload().split(' ').map(str::parse::<Uuid>);
                if let (Some(Ok(agent)), Some(Ok(input))) = (ids.next(), ids.next()) {
                    if let Some(flight) = self.in_flight.get(&agent) {
                        flight.stop.interrupt(input);
                    }
                }
                false
            }
            "holdfast_cancel" => {
                if let Ok(agent) = n.payload().parse::<Uuid>() {
                    if let Some(flight) = self.in_flight.get(&agent) {
                        tracing::info!(%agent, "cancel requested");
                        flight.stop.stop(StopReason::Cancel);
                    }
                }
                false
            }
            _ => true,
        }
    }

    /// Before a claim, take in everything already queued for the loop: the
    /// steps that have ended (their slots) and the notifications (ready
    /// hints fold into this claim). The steps of one group commit end
    /// together and a burst of commits queues a burst of hints; taken one
    /// loop turn at a time they would each cost a claim (a transaction and
    /// a WAL flush) for one agent, where one claim serves them all.
    fn take_queued(&mut self) {
        while let Some(done) = self.tasks.try_join_next_with_id() {
            self.forget(done);
        }
        while let Some(n) = self
            .session
            .as_mut()
            .and_then(|session| session.notifications.try_recv().ok())
        {
            self.on_notification(&n);
        }
    }

    /// Take an ended step out of the in-flight table. By task, not by
    /// agent: the agent's next step may have been claimed (a new task in
    /// its slot) before this one's end was seen here, and that step's lease
    /// must go on being renewed.
    fn forget(&mut self, done: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        let task = match done {
            Ok((task, ())) => task,
            Err(e) => {
                tracing::error!(error = %e, "a step task ended abnormally");
                e.id()
            }
        };
        self.in_flight.retain(|_, flight| flight.task != task);
    }

    /// Open the claim session again. Steps in flight keep running
    /// meanwhile, and are stopped when their lease may have run out: a
    /// partition can keep the reconnect waiting far longer than a lease.
    async fn reconnect(&mut self, shutdown: &CancellationToken) {
        if self.session.is_some() {
            return;
        }
        let session = {
            let opening = connect::listen_retrying(
                &self.db,
                &["holdfast_ready", "holdfast_cancel", "holdfast_interrupt"],
                &RECONNECT,
                shutdown,
                "worker",
            );
            tokio::pin!(opening);
            let mut lease_check = tokio::time::interval(LEASE_CHECK_INTERVAL);
            loop {
                tokio::select! {
                    session = &mut opening => break session,
                    _ = lease_check.tick() => self.stop_expired_leases(),
                }
            }
        };
        self.session = session;
    }

    /// Claim ready agents for every free slot, with their step contexts,
    /// and start their steps. One claim for them all: once an agent has
    /// waited ready past `holdfast.kept_lease_grace()`, every step's end
    /// releases its lease instead of keeping it (claims stay fair), so a
    /// claim that left some behind for a later one would turn a busy
    /// worker's kept leases into claims.
    async fn claim(&mut self) {
        let free = self
            .settings
            .concurrency
            .saturating_sub(self.in_flight.len());
        let Some(session) = self.session.as_ref() else {
            return;
        };
        if free == 0 {
            return;
        }
        let sent_at = Instant::now();
        let max = i32::try_from(free).unwrap_or(i32::MAX);
        // Bounded like a renewal: across a partition that drops packets the
        // claim would otherwise wait forever, and the loop with it.
        let claimed = tokio::time::timeout(
            self.settings.renew_interval,
            store::claim_agents_with_context(
                session,
                &self.settings.name,
                max,
                self.settings.lease_ttl,
            ),
        )
        .await;
        let claims = match claimed {
            Ok(Ok(claims)) => claims,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "claim failed");
                if e.is_retryable() {
                    self.session = None;
                }
                return;
            }
            Err(_) => {
                tracing::warn!(
                    "claim timed out (no answer from Postgres within the renew interval); reconnecting"
                );
                self.session = None;
                return;
            }
        };
        metrics::counter!("holdfast_claims_total").increment(claims.len() as u64);
        for store::ClaimedStep { claim, context } in claims {
            let stop = StopSignal::default();
            let lease = Arc::new(Mutex::new(HeldLease {
                epoch: claim.epoch,
                valid_until: sent_at + self.settings.lease_ttl,
            }));
            let task = self.tasks.spawn(run_steps(
                self.deps.clone(),
                claim,
                context,
                stop.clone(),
                lease.clone(),
            ));
            self.in_flight.insert(
                claim.agent_id,
                InFlight {
                    lease,
                    stop,
                    task: task.id(),
                },
            );
        }
    }

    /// One batched renewal of every lease in flight.
    async fn renew(&mut self) {
        let Some(session) = self.session.as_ref() else {
            return;
        };
        if self.in_flight.is_empty() {
            return;
        }
        let claims: Vec<Claim> = self
            .in_flight
            .iter()
            .map(|(agent, flight)| Claim {
                agent_id: *agent,
                epoch: held(&flight.lease).epoch,
            })
            .collect();
        let sent_epochs: HashMap<Uuid, i64> =
            claims.iter().map(|c| (c.agent_id, c.epoch)).collect();
        let sent_at = Instant::now();
        let renewed = tokio::time::timeout(
            self.settings.renew_interval,
            store::renew_leases(
                session,
                &self.settings.name,
                &claims,
                self.settings.lease_ttl,
            ),
        )
        .await;
        let renewals = match renewed {
            Ok(Ok(renewals)) => renewals,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "lease renewal failed");
                if e.is_retryable() {
                    self.session = None;
                }
                return;
            }
            Err(_) => {
                tracing::warn!("lease renewal timed out");
                self.session = None;
                return;
            }
        };
        for renewal in renewals {
            let Some(flight) = self.in_flight.get(&renewal.agent_id) else {
                continue;
            };
            let mut lease = held(&flight.lease);
            if sent_epochs.get(&renewal.agent_id) != Some(&lease.epoch) {
                // A step kept the lease for the next one meanwhile: the
                // renewal was of the epoch before, and the commit that
                // moved it on set the lease's expiry itself.
                continue;
            }
            if !renewal.renewed {
                tracing::warn!(agent = %renewal.agent_id, "lease lost");
                flight.stop.stop(StopReason::LeaseLost);
            } else {
                lease.valid_until = sent_at + self.settings.lease_ttl;
                if renewal.cancel_requested {
                    flight.stop.stop(StopReason::Cancel);
                }
                if let Some(input) = renewal.interrupt_input {
                    flight.stop.interrupt(input);
                }
            }
        }
    }

    /// Stop every step whose lease may have expired by now (renewals could
    /// not reach Postgres): better to stop than to overrun another worker.
    fn stop_expired_leases(&self) {
        let now = Instant::now();
        for (agent, flight) in &self.in_flight {
            if now >= held(&flight.lease).valid_until && flight.stop.reason().is_none() {
                tracing::warn!(%agent, "lease could not be renewed in time; stopping the step");
                flight.stop.stop(StopReason::LeaseLost);
            }
        }
    }
}

/// Run a claimed agent's steps: the claimed one, on the context the claim
/// read, then the next for as long as a step's end keeps the lease (the
/// agent stayed ready, nothing else waited to be claimed), each under its
/// own epoch and on the context the commit that kept the lease read. A
/// lease kept once the worker drains is released for another worker.
async fn run_steps(
    deps: Arc<StepDeps>,
    mut claim: Claim,
    claimed_context: Option<Box<StepContext>>,
    stop: StopSignal,
    lease: Arc<Mutex<HeldLease>>,
) {
    let mut loaded = claimed_context;
    loop {
        let span = tracing::info_span!(
            "step",
            agent_id = %claim.agent_id,
            epoch = claim.epoch,
            kind = tracing::field::Empty
        );
        let started = std::time::Instant::now();
        let outcome = step::run(deps.clone(), claim, loaded.take(), stop.clone())
            .instrument(span.clone())
            .await;
        metrics::histogram!("holdfast_step_seconds").record(started.elapsed().as_secs_f64());
        span.in_scope(|| tracing::debug!(outcome = outcome.as_str(), "step ended"));
        let StepOutcome::LeaseKept { since, next } = outcome else {
            return;
        };
        loaded = next;
        claim.epoch += 1;
        {
            let mut held = held(&lease);
            held.epoch = claim.epoch;
            held.valid_until = Instant::from_std(since) + deps.settings.lease_ttl;
        }
        stop.forget_interrupts();
        metrics::counter!("holdfast_leases_kept_total").increment(1);
        if deps.shutdown.is_cancelled() {
            let released = async {
                let client = deps.pool.get().await?;
                store::release_agent(&client, claim, None).await
            };
            if let Err(error) = released.await {
                tracing::warn!(agent_id = %claim.agent_id, %error, "releasing a kept lease while draining failed");
            }
            return;
        }
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// How often steps are checked for a lease that may have run out.
const LEASE_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Reconnects of the worker's listener: 200 ms doubling to 5 s.
const RECONNECT: Backoff = Backoff {
    base: Duration::from_millis(200),
    cap: Duration::from_secs(5),
};
