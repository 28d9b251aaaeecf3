//! A running command's output, relayed live: what its pipes deliver is
//! copied here as it comes ([`LiveOutput::push`], bounded to what the API
//! relays per command), and [`relay`] sends what gathered every
//! [`RELAY_EVERY`] (`POST /v1/machine/commands/{id}/output`) until the
//! command ends. Best effort: the result, sent when the command ends, is
//! the record; a piece the API could not take is dropped, never retried.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use holdfast_wire::api::machines::OutputRequest;
use holdfast_wire::domain::{
    LiveOutputOutcome, LIVE_OUTPUT_MAX_BYTES, LIVE_OUTPUT_MIN_INTERVAL, LIVE_OUTPUT_PIECE_MAX_BYTES,
};
use holdfast_wire::pg_text::storable_str;
use uuid::Uuid;

use super::client::{ApiClient, CallError};

/// How often gathered output is sent (above the API's minimum interval).
pub const RELAY_EVERY: Duration = Duration::from_millis(250);
const _: () = assert!(RELAY_EVERY.as_millis() > LIVE_OUTPUT_MIN_INTERVAL.as_millis());

/// Which pipe bytes came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pipe {
    Stdout,
    Stderr,
}

/// Output gathered and not yet sent.
#[derive(Debug, Default)]
pub struct LiveOutput {
    inner: Mutex<Gathered>,
}

#[derive(Debug, Default)]
struct Gathered {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// Bytes taken to send so far.
    taken: usize,
    /// The API takes no more of this command (it ended, or its bound).
    closed: bool,
}

impl LiveOutput {
    fn gathered(&self) -> std::sync::MutexGuard<'_, Gathered> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keep `bytes` from `pipe` to send, as far as the command's live bound
    /// leaves room.
    pub fn push(&self, pipe: Pipe, bytes: &[u8]) {
        let mut gathered = self.gathered();
        if gathered.closed {
            return;
        }
        let held = gathered.taken + gathered.stdout.len() + gathered.stderr.len();
        let room = LIVE_OUTPUT_MAX_BYTES.saturating_sub(held);
        let kept = &bytes[..bytes.len().min(room)];
        match pipe {
            Pipe::Stdout => gathered.stdout.extend_from_slice(kept),
            Pipe::Stderr => gathered.stderr.extend_from_slice(kept),
        }
    }

    /// What to send now: at most [`LIVE_OUTPUT_PIECE_MAX_BYTES`] in all,
    /// stdout first, each cut before a character its pipe has not finished
    /// (the rest waits for the next call). `None` when there is nothing.
    fn take(&self) -> Option<OutputRequest> {
        let mut gathered = self.gathered();
        let stdout = take_text(&mut gathered.stdout, LIVE_OUTPUT_PIECE_MAX_BYTES);
        let stderr = take_text(
            &mut gathered.stderr,
            LIVE_OUTPUT_PIECE_MAX_BYTES - stdout.len(),
        );
        gathered.taken += stdout.len() + stderr.len();
        (!stdout.is_empty() || !stderr.is_empty()).then_some(OutputRequest { stdout, stderr })
    }

    fn close(&self) {
        let mut gathered = self.gathered();
        gathered.closed = true;
        gathered.stdout = Vec::new();
        gathered.stderr = Vec::new();
    }
}

/// Up to `max` bytes of `buffer` as text (drained from it), cut at a
/// character boundary and before an unfinished character at its end;
/// invalid UTF-8 becomes U+FFFD, and so does U+0000 (as in the result).
fn take_text(buffer: &mut Vec<u8>, max: usize) -> String {
    let mut end = buffer.len().min(max);
    if let Err(error) = std::str::from_utf8(&buffer[..end]) {
        if error.error_len().is_none() {
            // The cut (or the pipe) is inside a character: keep it whole
            // for the next call.
            end = error.valid_up_to();
        }
    }
    let bytes: Vec<u8> = buffer.drain(..end).collect();
    // A replacement character is 3 bytes where an invalid byte was 1: cut
    // again if that passed `max`.
    let mut text = storable_str(&String::from_utf8_lossy(&bytes)).into_owned();
    while text.len() > max {
        text.pop();
    }
    text
}

/// Send what `output` gathers every [`RELAY_EVERY`], until the task is
/// dropped (the command ended) or the API takes no more of `command`.
pub async fn relay(client: ApiClient, command: Uuid, output: Arc<LiveOutput>) {
    let mut ticker = tokio::time::interval(RELAY_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(piece) = output.take() else {
            continue;
        };
        match client.relay_output(command, &piece).await {
            Ok(LiveOutputOutcome::Relayed) => {}
            Ok(LiveOutputOutcome::TooSoon) => {
                tracing::debug!(%command, "live output sent too soon; dropped");
            }
            Ok(LiveOutputOutcome::NotRunning | LiveOutputOutcome::Limit) => {
                output.close();
                return;
            }
            Err(e @ (CallError::Unavailable(_) | CallError::TooLarge)) => {
                tracing::debug!(%command, error = %e, "relaying live output; dropped a piece");
            }
            Err(e) => {
                tracing::warn!(%command, error = %e, "relaying live output refused; relaying no more");
                output.close();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_between_reads_waits_whole_for_the_next_call() {
        let output = LiveOutput::default();
        let euro = "€".as_bytes();
        output.push(Pipe::Stdout, b"price: ");
        output.push(Pipe::Stdout, &euro[..1]);
        let first = output.take().unwrap();
        assert_eq!(first.stdout, "price: ");
        output.push(Pipe::Stdout, &euro[1..]);
        output.push(Pipe::Stderr, b"\0warn");
        let second = output.take().unwrap();
        assert_eq!(second.stdout, "€");
        assert_eq!(second.stderr, "\u{FFFD}warn");
        assert!(output.take().is_none());
    }

    #[test]
    fn a_command_relays_at_most_its_bound_in_pieces_of_at_most_the_piece_size() {
        let output = LiveOutput::default();
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..8 {
            output.push(Pipe::Stdout, &chunk);
            output.push(Pipe::Stderr, &chunk);
        }
        let mut relayed = 0;
        while let Some(piece) = output.take() {
            let size = piece.stdout.len() + piece.stderr.len();
            assert!(size <= LIVE_OUTPUT_PIECE_MAX_BYTES, "{size}");
            relayed += size;
        }
        assert_eq!(relayed, LIVE_OUTPUT_MAX_BYTES);
        output.push(Pipe::Stdout, b"more");
        assert!(output.take().is_none(), "nothing past the bound");
    }
}
