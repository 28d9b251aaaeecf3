//! `GET /v1/agents/{id}/stream`: Server-Sent Events. First the saved events
//! after `Last-Event-ID` (or `?after=`), read from the table; then live: new
//! events as they commit (`id: SEQ`, `event: TYPE`, `data: JSON`) and live
//! messages (no id, never saved): deltas (`event: delta` for text,
//! `event: thinking_delta` for extended thinking) and running commands'
//! output (`event: command_output`).
//!
//! Each stream is a task writing into a small bounded channel that the
//! response body drains. A client that does not take the next message within
//! `slow_client_timeout`, or falls further behind the agent's feed than the
//! feed keeps, is disconnected: memory per client stays bounded, and the
//! client resumes from the table with Last-Event-ID.
//!
//! With a read replica, the saved events a stream starts with are read from
//! the replica, then the rest from the primary: the bulk of a long history
//! loads the standby, and the tail the standby has not replayed yet (the
//! caller's own write included) comes from the primary, so a stream never
//! misses an event however far the replica lags.
//!
//! A stream outlives the request that authenticated it, so it re-checks its
//! key every `stream_key_recheck` (2 s) and ends once the key is revoked; the
//! client's reconnect then gets 401.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use holdfast_db::store;
use holdfast_wire::api::error::ErrorBody;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::fanout::{wire_event, Signal, Subscription, WireEvent};
use crate::observe::record_agent;
use crate::state::AppState;

/// Messages buffered between a stream's task and its response body.
const CLIENT_BUFFER: usize = 64;
/// Events per catch-up read.
const CATCH_UP_PAGE: i64 = 200;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Start after this seq (0: from the first event). `Last-Event-ID`
    /// takes precedence: a reconnecting EventSource sends both.
    #[param(minimum = 0)]
    after: Option<i64>,
}

/// Stream an agent's events and live deltas.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/stream",
    tag = "events",
    params(
        ("id" = Uuid, Path, description = "agent id"),
        ("Last-Event-ID" = Option<i64>, Header, description = "resume after this seq"),
        StreamQuery,
    ),
    responses(
        (status = 200, description = "an SSE stream: saved events (`id: SEQ`, `event: TYPE`, `data: JSON`), live deltas (`event: delta` for answer text, `event: thinking_delta` for extended thinking; data `{\"text\", \"epoch\"}`), a running command's output (`event: command_output`; data `{\"command_id\", \"tool_call_id\", \"stream\", \"text\", \"limit_reached\"}`), heartbeat comments", content_type = "text/event-stream", body = holdfast_outbound::sse::SseEvent),
        (status = 400, description = "bad Last-Event-ID or after", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
pub async fn stream_events(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<StreamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    record_agent(id);
    // A bad `after` is refused even when Last-Event-ID, which wins, is sent.
    if query.after.is_some_and(|after| after < 0) {
        return Err(ApiError::invalid("after", "after must be ≥ 0"));
    }
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|seq| *seq >= 0)
            .ok_or_else(|| {
                ApiError::invalid(
                    "Last-Event-ID",
                    "Last-Event-ID must be an event seq (a whole number ≥ 0)",
                )
            })?,
        None => query.after.unwrap_or(0),
    };
    {
        let db = state.db().await?;
        if !store::agent_in_project(&db, caller.project_id, id).await? {
            return Err(ApiError::agent_not_found(id));
        }
    }
    let subscription = state.fanout().subscribe(id).await?;
    let (tx, mut rx) = mpsc::channel(CLIENT_BUFFER);
    let client = StreamClient::connect();
    tokio::spawn(pump(
        state.clone(),
        caller.key_id,
        id,
        after,
        subscription,
        tx,
        client,
    ));
    let body = futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|e| e.map(Ok)));
    Ok(Sse::new(body).keep_alive(
        KeepAlive::new()
            .interval(state.config().sse_heartbeat)
            .text("heartbeat"),
    ))
}

/// Why a stream ended early.
enum Stop {
    /// The client went away or the server is shutting down.
    Gone,
    /// The client could not keep up.
    Slow,
    /// The table could not be read.
    Database,
    /// The stream's API key was revoked.
    Revoked,
}

struct Pump {
    state: AppState,
    /// The first catch-up reads the replica before the primary.
    history_from_replica: bool,
    agent: Uuid,
    last_seq: i64,
    tx: mpsc::Sender<Event>,
    slow_after: Duration,
}

/// Feed one client until it goes, falls behind, its key is revoked, or the
/// server stops. `_client` counts it as open until then.
async fn pump(
    state: AppState,
    key_id: Uuid,
    agent: Uuid,
    after: i64,
    mut subscription: Subscription,
    tx: mpsc::Sender<Event>,
    _client: StreamClient,
) {
    let shutdown = state.shutdown().clone();
    let recheck_every = state.config().stream_key_recheck;
    let mut key_recheck =
        tokio::time::interval_at(tokio::time::Instant::now() + recheck_every, recheck_every);
    key_recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut pump = Pump {
        slow_after: state.config().slow_client_timeout,
        history_from_replica: state.read_replica().is_some(),
        state,
        agent,
        last_seq: after,
        tx,
    };
    let outcome = async {
        pump.catch_up().await?;
        loop {
            let signal = tokio::select! {
                _ = shutdown.cancelled() => return Err(Stop::Gone),
                _ = pump.tx.closed() => return Err(Stop::Gone),
                _ = key_recheck.tick() => {
                    pump.check_key(key_id).await?;
                    continue;
                }
                signal = subscription.recv() => signal,
            };
            match signal {
                Ok(Signal::Events(batch)) => pump.follow(&batch).await?,
                Ok(Signal::Live(event, json)) => {
                    pump.send(Event::default().event(event).data(&*json))
                        .await?
                }
                Ok(Signal::Resync) => pump.catch_up().await?,
                Err(RecvError::Lagged(_)) => return Err(Stop::Slow),
                Err(RecvError::Closed) => return Err(Stop::Gone),
            }
        }
    }
    .await;
    match outcome {
        Err(Stop::Slow) => {
            metrics::counter!("holdfast_api_stream_clients_dropped_total").increment(1);
            tracing::info!(%agent, last_seq = pump.last_seq, "dropped a stream client that fell behind");
        }
        Err(Stop::Database) => {
            tracing::warn!(%agent, last_seq = pump.last_seq, "ended a stream: the event table could not be read");
        }
        Err(Stop::Revoked) => {
            tracing::info!(%agent, %key_id, "ended a stream: its API key was revoked");
        }
        Err(Stop::Gone) | Ok(()) => {}
    }
}

impl Pump {
    /// End the stream if `key_id` no longer authenticates. A failed check
    /// (the database unreachable for a moment) keeps the stream: the next
    /// tick checks again.
    async fn check_key(&self, key_id: Uuid) -> Result<(), Stop> {
        let Ok(db) = self.state.db().await else {
            return Ok(());
        };
        match store::api_key_active(&db, key_id).await {
            Ok(false) => Err(Stop::Revoked),
            Ok(true) | Err(_) => Ok(()),
        }
    }

    /// Send every saved event after `last_seq`, from the table: the first
    /// time from the replica (if any) and then the primary, afterwards from
    /// the primary (a live event's gap is newer than the replica may be).
    async fn catch_up(&mut self) -> Result<(), Stop> {
        if std::mem::take(&mut self.history_from_replica) {
            match self.send_pages(true).await {
                // A replica that fails mid-read ends nothing: the primary
                // reads on from `last_seq`.
                Ok(()) | Err(Stop::Database) => {}
                Err(stop) => return Err(stop),
            }
        }
        self.send_pages(false).await
    }

    /// Send the saved events after `last_seq`, page by page; each page on
    /// a connection of its own, released before sending (a slow client
    /// must not hold one).
    async fn send_pages(&mut self, from_replica: bool) -> Result<(), Stop> {
        loop {
            let page = async {
                let db = if from_replica {
                    self.state.read_db(None, None).await
                } else {
                    self.state.db().await
                }
                .map_err(|_| Stop::Database)?;
                store::events_after(&db, self.agent, self.last_seq, CATCH_UP_PAGE)
                    .await
                    .map_err(|_| Stop::Database)
            }
            .await?;
            for event in &page {
                self.send_saved(&wire_event(event)).await?;
            }
            if (page.len() as i64) < CATCH_UP_PAGE {
                return Ok(());
            }
        }
    }

    /// Send a feed batch, skipping what was sent already; a gap means this
    /// stream missed something, so it reads the table instead.
    async fn follow(&mut self, batch: &[WireEvent]) -> Result<(), Stop> {
        for event in batch {
            if event.seq <= self.last_seq {
                continue;
            }
            if event.seq > self.last_seq + 1 {
                return self.catch_up().await;
            }
            self.send_saved(event).await?;
        }
        Ok(())
    }

    async fn send_saved(&mut self, event: &WireEvent) -> Result<(), Stop> {
        self.send(
            Event::default()
                .id(event.seq.to_string())
                .event(event.kind.replace(['\r', '\n'], " "))
                .data(&event.json),
        )
        .await?;
        self.last_seq = event.seq;
        Ok(())
    }

    async fn send(&self, event: Event) -> Result<(), Stop> {
        match self.tx.send_timeout(event, self.slow_after).await {
            Ok(()) => Ok(()),
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => Err(Stop::Slow),
            Err(mpsc::error::SendTimeoutError::Closed(_)) => Err(Stop::Gone),
        }
    }
}

/// Counts open streams in the `holdfast_api_stream_clients` gauge.
struct StreamClient;

impl StreamClient {
    fn connect() -> StreamClient {
        metrics::gauge!("holdfast_api_stream_clients").increment(1.0);
        StreamClient
    }
}

impl Drop for StreamClient {
    fn drop(&mut self) {
        metrics::gauge!("holdfast_api_stream_clients").decrement(1.0);
    }
}
