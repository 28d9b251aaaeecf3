//! Live deltas (answer text and extended thinking): batched per kind (every
//! 50 ms or 1 KiB, and whenever the kind changes, so their order holds) and
//! sent as notifications on `holdfast_stream`, never saved.

use std::time::Duration;

use deadpool_postgres::Pool;
use holdfast_db::store;
use holdfast_providers::{Delta, DeltaKind};
use holdfast_wire::domain::Claim;
use tokio::sync::mpsc;

const FLUSH_EVERY: Duration = Duration::from_millis(50);
const FLUSH_BYTES: usize = 1024;
/// Text per notification, well under Postgres' 8000-byte payload limit
/// once JSON-escaped (escaping can grow text up to 6x for control bytes,
/// so long buffers are split).
const MAX_TEXT_PER_NOTIFY: usize = 1200;

/// Deltas of one kind waiting to be sent.
struct Buffer {
    kind: DeltaKind,
    text: String,
}

/// Forward deltas from `rx` until it closes, then flush what is left.
/// Delivery is best effort: a failed notify is logged, never retried, and
/// never fails the step (the saved response is the source of truth).
pub async fn publish(pool: Pool, claim: Claim, mut rx: mpsc::UnboundedReceiver<Delta>) {
    let mut buffer = Buffer {
        kind: DeltaKind::Text,
        text: String::new(),
    };
    loop {
        let next = if buffer.text.is_empty() {
            rx.recv().await
        } else {
            match tokio::time::timeout(FLUSH_EVERY, rx.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    flush(&pool, claim, &mut buffer).await;
                    continue;
                }
            }
        };
        match next {
            Some(delta) => {
                if delta.kind != buffer.kind {
                    flush(&pool, claim, &mut buffer).await;
                    buffer.kind = delta.kind;
                }
                buffer.text.push_str(&delta.text);
                if buffer.text.len() >= FLUSH_BYTES {
                    flush(&pool, claim, &mut buffer).await;
                }
            }
            None => {
                flush(&pool, claim, &mut buffer).await;
                return;
            }
        }
    }
}

async fn flush(pool: &Pool, claim: Claim, buffer: &mut Buffer) {
    if buffer.text.is_empty() {
        return;
    }
    let text = std::mem::take(&mut buffer.text);
    let client = match pool.get().await {
        Ok(client) => client,
        Err(e) => {
            tracing::debug!(error = %e, "dropping deltas: no connection");
            return;
        }
    };
    for chunk in chunks(&text, MAX_TEXT_PER_NOTIFY) {
        if let Err(e) = store::stream_delta(&client, claim, buffer.kind, chunk).await {
            tracing::debug!(error = %e, "dropping a delta");
        }
    }
}

/// Split at char boundaries into pieces of at most `max` bytes.
fn chunks(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(max);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (head, tail) = rest.split_at(end);
        out.push(head);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::chunks;

    #[test]
    fn chunks_respect_char_boundaries_and_size() {
        let text = "héllo wörld ".repeat(300);
        let parts = chunks(&text, 100);
        assert!(parts.iter().all(|p| p.len() <= 100));
        assert_eq!(parts.concat(), text);
    }
}
