//! One LISTEN connection per API process, fanned out to every SSE stream
//! and every machine claim long-poll.
//!
//! Three channels: `holdfast_events` (payload: an agent id; one per agent per
//! committing transaction) says "this agent has new saved events",
//! `holdfast_stream` (never saved) carries live text deltas (payload:
//! `{"agent_id", "epoch", "kind", "text"}`, sent by workers) and pieces of
//! running commands' output (`{"agent_id", "kind": "command_output",
//! "command_id", "tool_call_id", "stream", "text"}`, sent by the API for a
//! machine's daemon, `holdfast.command_output`), and `holdfast_commands`
//! (payload: a machine id; one per machine per committing transaction) says
//! "a command was queued for this machine, or its token or existence
//! changed": it wakes that machine's claim long-polls ([`CommandHints`]),
//! no others.
//!
//! Each agent with at least one open stream has a *feed*: a task that, on an
//! events hint, reads the agent's new events from the table once and
//! broadcasts them to all its streams, and passes live messages (deltas,
//! command output) through in arrival order (so one never overtakes the
//! events committed before it). A
//! thousand streams on one agent cost one read per commit, not a thousand.
//! Notifications are hints: the feed reads the table from its own position,
//! so an event is never skipped or doubled, and after a lost LISTEN
//! connection every feed re-reads. Streams check that what they receive
//! continues their own sequence and re-read the table on any gap.
//!
//! Events hints are sent only for agents someone follows: each feed
//! registers a *stream watch* (`holdfast.watch_agent_events`, naming the
//! LISTEN session's pid) before it reads the agent's position, and drops it
//! when its last stream ends; when the LISTEN session reconnects, every feed
//! is registered again with the new pid before the feeds re-read. Every
//! change to the watches is made under one lock (`Inner::listener`), so a
//! feed is registered either by its own creation or by the reconnect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::Pool;
use holdfast_db::connect::{self, ConnectConfig};
use holdfast_db::store;
use holdfast_outbound::backoff::Backoff;
use holdfast_providers::DeltaKind;
use serde::Deserialize;
use tokio::sync::{broadcast, mpsc, watch, Mutex as AsyncMutex};
use tokio::task::JoinHandle;
use tokio_postgres::Notification;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Saved events: the agent id in the payload.
pub const EVENTS_CHANNEL: &str = "holdfast_events";
/// Live messages: deltas `{"agent_id", "epoch", "kind", "text"}` (`kind`
/// `text` or `thinking`; absent means `text`) and command output
/// (`kind` `command_output`).
pub const STREAM_CHANNEL: &str = "holdfast_stream";
/// A machine's commands or credentials changed: the machine id.
pub const COMMANDS_CHANNEL: &str = "holdfast_commands";
/// The LISTEN session's application_name (visible in pg_stat_activity).
pub const LISTEN_APPLICATION_NAME: &str = "holdfast-api-listen";

/// Messages a feed keeps for its slowest stream; a stream further behind
/// is dropped (it resumes from the table with Last-Event-ID).
const FEED_CAPACITY: usize = 1024;
/// Hints and deltas waiting for a feed's reader.
const INBOX_CAPACITY: usize = 1024;
/// Events per read.
const READ_PAGE: i64 = 500;
/// How often the LISTEN connection is checked with a query: a connection
/// dropped silently by the network would otherwise look idle forever.
const PROBE_INTERVAL: Duration = Duration::from_secs(30);
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Reconnecting the LISTEN session: from 100 ms, at most 10 s apart.
const LISTEN_RETRY: Backoff = Backoff {
    base: Duration::from_millis(100),
    cap: Duration::from_secs(10),
};

/// One saved event, serialized once for all streams.
#[derive(Debug)]
pub struct WireEvent {
    pub seq: i64,
    pub kind: String,
    /// The event as its JSON (docs/events.md).
    pub json: String,
}

/// What a stream receives.
#[derive(Clone, Debug)]
pub enum Signal {
    /// New saved events, contiguous, oldest first.
    Events(Arc<[WireEvent]>),
    /// A live message, never saved: its SSE event name and its JSON (a
    /// delta's `{"text", "epoch"}`, a command's output piece).
    Live(&'static str, Arc<str>),
    /// The feed could not read the table: the stream reads it itself.
    Resync,
}

enum Inbound {
    Saved,
    Live(&'static str, Arc<str>),
}

/// The SSE event name a live delta of `kind` is sent as.
pub fn sse_event(kind: DeltaKind) -> &'static str {
    match kind {
        DeltaKind::Text => "delta",
        DeltaKind::Thinking => "thinking_delta",
    }
}

/// The SSE event name of a piece of a running command's output.
pub const COMMAND_OUTPUT_EVENT: &str = "command_output";

/// The fan-out: cheap to clone.
#[derive(Clone)]
pub struct Fanout {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    feeds: Mutex<HashMap<Uuid, Feed>>,
    /// Per machine with a claim waiting: marked on each hint for it.
    machines: Mutex<HashMap<Uuid, watch::Sender<()>>>,
    connected: AtomicBool,
    /// The LISTEN session's backend pid while it is up. Held while feeds
    /// are created and while stream watches are written, so that creating a
    /// feed and re-registering every feed after a reconnect never
    /// interleave.
    listener: AsyncMutex<Option<i32>>,
}

struct Feed {
    signals: broadcast::Sender<Signal>,
    inbox: mpsc::Sender<Inbound>,
    /// Set when a hint found the inbox full: the reader reads anyway.
    behind: Arc<AtomicBool>,
    /// This feed's row in `holdfast.stream_watches`.
    watch: Uuid,
}

/// A `holdfast_stream` payload: a delta, or a piece of command output.
#[derive(Deserialize)]
#[serde(untagged)]
enum StreamPayload {
    Output(OutputPayload),
    Delta(DeltaPayload),
}

#[derive(Deserialize)]
struct DeltaPayload {
    agent_id: Uuid,
    epoch: i64,
    #[serde(default)]
    kind: DeltaKind,
    text: String,
}

#[derive(Deserialize)]
struct OutputPayload {
    agent_id: Uuid,
    kind: OutputKind,
    command_id: Uuid,
    tool_call_id: Uuid,
    stream: String,
    text: String,
    #[serde(default)]
    limit_reached: bool,
}

/// The `kind` of a command output payload (only that one).
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum OutputKind {
    CommandOutput,
}

impl Fanout {
    /// Start the LISTEN task; it runs until `shutdown` is cancelled.
    pub fn start(
        pool: Pool,
        database: &ConnectConfig,
        shutdown: CancellationToken,
    ) -> (Fanout, JoinHandle<()>) {
        let inner = Arc::new(Inner {
            pool,
            feeds: Mutex::new(HashMap::new()),
            machines: Mutex::new(HashMap::new()),
            connected: AtomicBool::new(false),
            listener: AsyncMutex::new(None),
        });
        let mut config = database.clone();
        config.postgres.application_name(LISTEN_APPLICATION_NAME);
        let task = tokio::spawn(listen(inner.clone(), config, shutdown));
        (Fanout { inner }, task)
    }

    /// True while the LISTEN connection is up.
    pub fn is_connected(&self) -> bool {
        self.inner.connected.load(Ordering::Acquire)
    }

    /// Follow an agent's feed. Subscribe before reading the table: whatever
    /// commits after the subscription reaches the stream through it.
    pub async fn subscribe(&self, agent: Uuid) -> holdfast_db::Result<Subscription> {
        if let Some(receiver) = self.inner.join(agent) {
            return Ok(self.subscription(agent, receiver));
        }
        // Feeds are created one at a time: a feed created while another
        // waited for the lock is joined.
        let listener = self.inner.listener.lock().await;
        if let Some(receiver) = self.inner.join(agent) {
            return Ok(self.subscription(agent, receiver));
        }
        // Registered, then the start read: an event committed after the
        // watch is hinted, one committed before it is at or before the
        // start (or read by the stream's own first read, which comes after
        // this one). Without a LISTEN session there is nothing to register
        // with; the reconnect registers this feed before its wake-up.
        let watch = Uuid::new_v4();
        let start = {
            let db = self.inner.pool.get().await?;
            if let Some(pid) = *listener {
                store::watch_agent_events(&db, watch, agent, pid).await?;
            }
            store::last_event_seq(&db, agent).await?.unwrap_or(0)
        };
        let (signals, receiver) = broadcast::channel(FEED_CAPACITY);
        let (inbox, inbox_rx) = mpsc::channel(INBOX_CAPACITY);
        let behind = Arc::new(AtomicBool::new(false));
        tokio::spawn(read_feed(
            self.inner.pool.clone(),
            agent,
            start,
            inbox_rx,
            signals.clone(),
            behind.clone(),
        ));
        lock(&self.inner.feeds).insert(
            agent,
            Feed {
                signals,
                inbox,
                behind,
                watch,
            },
        );
        drop(listener);
        Ok(self.subscription(agent, receiver))
    }

    /// Follow the hints for `machine`'s commands. Take it before the first
    /// claim: a hint that arrives during a claim is kept, and the next
    /// [`CommandHints::changed`] returns at once.
    pub fn watch_commands(&self, machine: Uuid) -> CommandHints {
        let receiver = lock(&self.inner.machines)
            .entry(machine)
            .or_insert_with(|| watch::channel(()).0)
            .subscribe();
        CommandHints {
            machine,
            receiver: Some(receiver),
            inner: self.inner.clone(),
        }
    }

    fn subscription(&self, agent: Uuid, receiver: broadcast::Receiver<Signal>) -> Subscription {
        Subscription {
            agent,
            receiver: Some(receiver),
            inner: self.inner.clone(),
        }
    }
}

impl Inner {
    fn join(&self, agent: Uuid) -> Option<broadcast::Receiver<Signal>> {
        lock(&self.feeds)
            .get(&agent)
            .map(|feed| feed.signals.subscribe())
    }

    fn dispatch(&self, notification: &Notification) {
        match notification.channel() {
            EVENTS_CHANNEL => match notification.payload().parse::<Uuid>() {
                Ok(agent) => self.hint(agent),
                Err(_) => tracing::debug!(
                    payload = notification.payload(),
                    "events hint without an agent id"
                ),
            },
            STREAM_CHANNEL => match serde_json::from_str::<StreamPayload>(notification.payload()) {
                Ok(payload) => {
                    let (agent, event, json) = match payload {
                        StreamPayload::Delta(delta) => (
                            delta.agent_id,
                            sse_event(delta.kind),
                            serde_json::json!({"text": delta.text, "epoch": delta.epoch}),
                        ),
                        StreamPayload::Output(output) => {
                            let OutputKind::CommandOutput = output.kind;
                            (
                                output.agent_id,
                                COMMAND_OUTPUT_EVENT,
                                serde_json::json!({
                                    "command_id": output.command_id,
                                    "tool_call_id": output.tool_call_id,
                                    "stream": output.stream,
                                    "text": output.text,
                                    "limit_reached": output.limit_reached,
                                }),
                            )
                        }
                    };
                    let feeds = lock(&self.feeds);
                    if let Some(feed) = feeds.get(&agent) {
                        // A full inbox means the reader is stuck on the
                        // database; a live message is worth nothing late.
                        let _ = feed
                            .inbox
                            .try_send(Inbound::Live(event, json.to_string().into()));
                    }
                }
                Err(e) => tracing::debug!(error = %e, "malformed stream message"),
            },
            COMMANDS_CHANNEL => match notification.payload().parse::<Uuid>() {
                Ok(machine) => {
                    if let Some(waiters) = lock(&self.machines).get(&machine) {
                        waiters.send_replace(());
                    }
                }
                Err(_) => tracing::debug!(
                    payload = notification.payload(),
                    "commands hint without a machine id"
                ),
            },
            other => tracing::debug!(channel = other, "notification on an unexpected channel"),
        }
    }

    fn hint(&self, agent: Uuid) {
        if let Some(feed) = lock(&self.feeds).get(&agent) {
            feed.wake();
        }
    }

    /// After a (re)connect, before the wake-up: register every feed's watch
    /// with the new LISTEN session (pid `listener`), so that what commits
    /// from now on is hinted to it.
    async fn watch_all(&self, listener: i32) -> holdfast_db::Result<()> {
        let mut current = self.listener.lock().await;
        let watches: Vec<(Uuid, Uuid)> = lock(&self.feeds)
            .iter()
            .map(|(agent, feed)| (*agent, feed.watch))
            .collect();
        let db = self.pool.get().await?;
        for (agent, watch) in watches {
            store::watch_agent_events(&db, watch, agent, listener).await?;
        }
        *current = Some(listener);
        Ok(())
    }

    /// The LISTEN session is gone: feeds created from now on wait for the
    /// reconnect to register them.
    async fn listener_lost(&self) {
        *self.listener.lock().await = None;
    }

    /// Drop an ended feed's watch, in the background (the feed ends in a
    /// `Drop`). Best effort: a watch left behind only costs hints nobody
    /// reads, and maintenance drops it once the LISTEN session is gone.
    fn unwatch(self: &Arc<Self>, watch: Uuid) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.clone();
        runtime.spawn(async move {
            let _listener = inner.listener.lock().await;
            let dropped = async {
                let db = inner.pool.get().await?;
                store::unwatch_agent_events(&db, watch).await
            }
            .await;
            if let Err(e) = dropped {
                tracing::debug!(%watch, error = %e, "dropping a stream watch failed");
            }
        });
    }

    /// After a (re)connect: anything may have committed unheard.
    fn wake_all(&self) {
        for feed in lock(&self.feeds).values() {
            feed.wake();
        }
        for waiters in lock(&self.machines).values() {
            waiters.send_replace(());
        }
    }
}

impl Feed {
    fn wake(&self) {
        if self.inbox.try_send(Inbound::Saved).is_err() {
            self.behind.store(true, Ordering::Release);
        }
    }
}

/// A stream's place on an agent's feed. Dropping the last one stops the feed.
pub struct Subscription {
    agent: Uuid,
    /// Always `Some` until drop (taken there so the count excludes it).
    receiver: Option<broadcast::Receiver<Signal>>,
    inner: Arc<Inner>,
}

impl Subscription {
    pub async fn recv(&mut self) -> Result<Signal, broadcast::error::RecvError> {
        match self.receiver.as_mut() {
            Some(receiver) => receiver.recv().await,
            None => Err(broadcast::error::RecvError::Closed),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut feeds = lock(&self.inner.feeds);
        // Under the lock, so no one joins between the count and the removal.
        drop(self.receiver.take());
        if feeds
            .get(&self.agent)
            .is_some_and(|feed| feed.signals.receiver_count() == 0)
        {
            // Dropping the feed closes its inbox; its reader then ends.
            if let Some(feed) = feeds.remove(&self.agent) {
                self.inner.unwatch(feed.watch);
            }
        }
    }
}

/// A claim long-poll's place among its machine's waiters. Dropping the
/// last one for a machine forgets the machine.
pub struct CommandHints {
    machine: Uuid,
    /// Always `Some` until drop (taken there so the count excludes it).
    receiver: Option<watch::Receiver<()>>,
    inner: Arc<Inner>,
}

impl CommandHints {
    /// Until a hint for the machine arrives (or arrived since the last
    /// call), or the LISTEN connection was re-established.
    pub async fn changed(&mut self) {
        if let Some(receiver) = self.receiver.as_mut() {
            // The sender lives while this receiver does: no error to see.
            let _ = receiver.changed().await;
        }
    }
}

impl Drop for CommandHints {
    fn drop(&mut self) {
        let mut machines = lock(&self.inner.machines);
        // Under the lock, so no one joins between the count and the removal.
        drop(self.receiver.take());
        if machines
            .get(&self.machine)
            .is_some_and(|waiters| waiters.receiver_count() == 0)
        {
            machines.remove(&self.machine);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves the map consistent
    // (every critical section is a single map operation).
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An agent's feed: read new events on each hint, pass deltas through.
async fn read_feed(
    pool: Pool,
    agent: Uuid,
    mut position: i64,
    mut inbox: mpsc::Receiver<Inbound>,
    signals: broadcast::Sender<Signal>,
    behind: Arc<AtomicBool>,
) {
    while let Some(message) = inbox.recv().await {
        match message {
            Inbound::Saved => read_new_events(&pool, agent, &mut position, &signals).await,
            Inbound::Live(event, json) => {
                let _ = signals.send(Signal::Live(event, json));
            }
        }
        if behind.swap(false, Ordering::AcqRel) {
            read_new_events(&pool, agent, &mut position, &signals).await;
        }
    }
}

async fn read_new_events(
    pool: &Pool,
    agent: Uuid,
    position: &mut i64,
    signals: &broadcast::Sender<Signal>,
) {
    loop {
        let page = async {
            let db = pool.get().await?;
            store::events_after(&db, agent, *position, READ_PAGE).await
        }
        .await;
        let events = match page {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(%agent, error = %e, "reading new events failed; streams re-read");
                let _ = signals.send(Signal::Resync);
                return;
            }
        };
        let Some(last) = events.last() else { return };
        *position = last.seq;
        let full = events.len() as i64 == READ_PAGE;
        let wire: Vec<WireEvent> = events.iter().map(wire_event).collect();
        let _ = signals.send(Signal::Events(wire.into()));
        if !full {
            return;
        }
    }
}

/// An event as streams send it.
pub fn wire_event(event: &holdfast_wire::domain::Event) -> WireEvent {
    WireEvent {
        seq: event.seq,
        kind: event.kind.clone(),
        // Serializing a struct of plain fields and a JSON value cannot fail.
        json: serde_json::to_string(event).unwrap_or_default(),
    }
}

/// The LISTEN loop: connect, LISTEN, register every feed's watch,
/// dispatch; on loss, reconnect with backoff and jitter and wake every feed
/// and every claim.
async fn listen(inner: Arc<Inner>, config: ConnectConfig, shutdown: CancellationToken) {
    let mut connected_before = false;
    let mut watch_failures: u32 = 0;
    loop {
        let channels = [EVENTS_CHANNEL, COMMANDS_CHANNEL, STREAM_CHANNEL];
        let Some(mut session) =
            connect::listen_retrying(&config, &channels, &LISTEN_RETRY, &shutdown, "API").await
        else {
            return;
        };
        let watched = async {
            let pid: i32 = session
                .client
                .query_one("SELECT pg_backend_pid()", &[])
                .await?
                .get(0);
            inner.watch_all(pid).await
        }
        .await;
        if let Err(e) = watched {
            watch_failures = watch_failures.saturating_add(1);
            let delay = LISTEN_RETRY.delay(watch_failures, None);
            tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "API: cannot register the stream watches; reconnecting");
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(delay) => continue,
            }
        }
        watch_failures = 0;
        if connected_before {
            metrics::counter!("holdfast_api_listen_reconnects_total").increment(1);
            tracing::info!("LISTEN connection re-established");
        }
        connected_before = true;
        // Wake before reporting connected: whoever sees `connected` (the
        // readiness probe, a claim choosing its poll) started after this
        // wake, so the reconnect's catch-up never reaches it spuriously.
        inner.wake_all();
        inner.connected.store(true, Ordering::Release);
        let mut probe = tokio::time::interval(PROBE_INTERVAL);
        probe.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    inner.connected.store(false, Ordering::Relaxed);
                    return;
                }
                notification = session.notifications.recv() => match notification {
                    Some(notification) => inner.dispatch(&notification),
                    None => break,
                },
                _ = probe.tick() => {
                    let alive = tokio::time::timeout(PROBE_TIMEOUT, session.client.simple_query("SELECT 1")).await;
                    if !matches!(alive, Ok(Ok(_))) {
                        break;
                    }
                }
            }
        }
        inner.connected.store(false, Ordering::Relaxed);
        inner.listener_lost().await;
        tracing::warn!("LISTEN connection lost; reconnecting");
    }
}
