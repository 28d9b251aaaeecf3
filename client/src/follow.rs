//! Following an agent's stream for as long as the caller wants: saved
//! events in order, each exactly once, and live text deltas; after a broken
//! connection (server restart, proxy timeout, silence past three
//! heartbeats) it reconnects with `Last-Event-ID` and continues where it
//! stopped. Used by `holdfast tail` and by the demo.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use holdfast_outbound::backoff::Backoff;
use holdfast_outbound::sse::{SseDecoder, SseEvent};

use crate::http::{CallError, Client};

/// The API sends a heartbeat comment every 15 s; a stream silent for this
/// long is taken for dead and reopened.
const SILENCE_LIMIT: Duration = Duration::from_secs(45);
/// Waits between tries to reopen a broken stream.
const REOPEN_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(100),
    cap: Duration::from_secs(5),
};

/// A saved event (docs/events.md).
#[derive(Clone, Debug)]
pub struct SavedEvent {
    pub seq: i64,
    pub kind: String,
    pub data: Value,
    /// The event as the server sent it: `{"seq", "id", "agent_id", "type", "data", "created_at"}`.
    pub json: Value,
}

/// What the follower hands on.
#[derive(Clone, Debug)]
pub enum StreamItem {
    Saved(SavedEvent),
    /// Live text of the model call in flight under lease `epoch` (never saved).
    Delta {
        text: String,
        epoch: i64,
    },
    /// The connection broke and was reopened after `after`. Anything that
    /// was waiting may have been answered meanwhile: re-read it.
    Reconnected {
        after: i64,
    },
}

/// Follow `agent` from after seq `after` until `stop` fires or `items` is
/// closed. Returns an error when the first connection fails, or for
/// answers that another try would not change (401, 404, 400); once
/// connected, every break is retried with backoff.
pub async fn follow(
    api: Client,
    agent: Uuid,
    after: i64,
    items: mpsc::Sender<StreamItem>,
    stop: CancellationToken,
) -> Result<(), CallError> {
    let mut last_seq = after;
    // Tries since data last flowed.
    let mut failures: u32 = 0;
    let mut connected_before = false;
    let mut outage_reported = false;
    loop {
        let opened = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            opened = api.open_stream(agent, last_seq) => opened,
        };
        match opened {
            Ok(mut response) => {
                outage_reported = false;
                if connected_before
                    && items
                        .send(StreamItem::Reconnected { after: last_seq })
                        .await
                        .is_err()
                {
                    return Ok(());
                }
                connected_before = true;
                let mut decoder = SseDecoder::default();
                loop {
                    let chunk = tokio::select! {
                        _ = stop.cancelled() => return Ok(()),
                        _ = items.closed() => return Ok(()),
                        chunk = tokio::time::timeout(SILENCE_LIMIT, response.chunk()) => chunk,
                    };
                    let bytes = match chunk {
                        Ok(Ok(Some(bytes))) => bytes,
                        // Ended, broken, or silent: reopen after what we have.
                        Ok(Ok(None)) | Ok(Err(_)) | Err(_) => break,
                    };
                    // Data flowing again: a later break starts from a short wait.
                    failures = 0;
                    for event in decoder.push(&bytes) {
                        let Some(item) = item_of(event, last_seq) else {
                            continue;
                        };
                        if let StreamItem::Saved(saved) = &item {
                            last_seq = saved.seq;
                        }
                        if items.send(item).await.is_err() {
                            return Ok(());
                        }
                    }
                }
            }
            // Refused outright (401, 404), or never reachable at all (a
            // wrong URL): another try would not help.
            Err(e) if e.status().is_some_and(|s| s.is_client_error()) => return Err(e),
            Err(e) if !connected_before => return Err(e),
            Err(e) => {
                if !outage_reported {
                    tracing::warn!("stream interrupted ({e}); reconnecting");
                    outage_reported = true;
                }
            }
        }
        failures += 1;
        let delay = REOPEN_BACKOFF.delay(failures, None);
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// A decoded SSE event as a stream item; `None` for what was seen already
/// (a resumed stream never repeats, but a client must not rely on that) or
/// does not parse.
fn item_of(event: SseEvent, last_seq: i64) -> Option<StreamItem> {
    let json: Value = serde_json::from_str(&event.data).ok()?;
    if event.event.as_deref() == Some("delta") {
        return Some(StreamItem::Delta {
            text: json["text"].as_str()?.to_owned(),
            epoch: json["epoch"].as_i64().unwrap_or_default(),
        });
    }
    let seq: i64 = event.id?.parse().ok()?;
    if seq <= last_seq {
        return None;
    }
    Some(StreamItem::Saved(SavedEvent {
        seq,
        kind: json["type"].as_str().unwrap_or_default().to_owned(),
        data: json["data"].clone(),
        json,
    }))
}
