//! How a running step is told to stop, and why; and how its model call is
//! told of interrupt inputs.

use std::sync::{Arc, OnceLock};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Why a step was stopped. The first reason wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The lease is gone (renewal said so, or it could not be renewed in
    /// time): save nothing, another worker owns the agent now.
    LeaseLost,
    /// The turn was cancelled: close it as `turn.cancelled`.
    Cancel,
    /// The worker is shutting down past its drain timeout: release the agent
    /// so another worker continues it at once.
    Drain,
}

/// A cancellation token that remembers why it fired, and the interrupt
/// inputs heard of while the step runs. An interrupt is not a stop: only a
/// model call in flight that did not include one of them is aborted (the
/// step saves `model.interrupted`); a tool batch runs on.
#[derive(Clone, Debug, Default)]
pub struct StopSignal {
    token: CancellationToken,
    reason: Arc<OnceLock<StopReason>>,
    interrupts: Arc<watch::Sender<Vec<Uuid>>>,
}

impl StopSignal {
    pub fn stop(&self, reason: StopReason) {
        let _ = self.reason.set(reason);
        self.token.cancel();
    }

    pub fn reason(&self) -> Option<StopReason> {
        self.reason.get().copied()
    }

    pub async fn stopped(&self) {
        self.token.cancelled().await
    }

    /// An interrupt input for this agent was created (notified, or reported
    /// by a renewal: the same input may be heard of twice).
    pub fn interrupt(&self, input: Uuid) {
        self.interrupts.send_if_modified(|inputs| {
            let new = !inputs.contains(&input);
            if new {
                inputs.push(input);
            }
            new
        });
    }

    /// Forget the interrupt inputs heard of so far: the step whose model
    /// call they were for has ended, and the agent's next step (under a
    /// lease it kept) loads every input still pending, these included.
    pub fn forget_interrupts(&self) {
        self.interrupts.send_if_modified(|inputs| {
            let had = !inputs.is_empty();
            inputs.clear();
            had
        });
    }

    /// Resolves with the interrupt inputs not in `seen` (those a model call
    /// was built with) once there are any, heard of before this call or
    /// after.
    pub async fn interrupted(&self, seen: &[Uuid]) -> Vec<Uuid> {
        let mut inputs = self.interrupts.subscribe();
        let unseen = |inputs: &Vec<Uuid>| -> Vec<Uuid> {
            inputs
                .iter()
                .filter(|i| !seen.contains(i))
                .copied()
                .collect()
        };
        // The guard wait_for answers is dropped at once (it must not be
        // held across an await).
        let found = inputs
            .wait_for(|inputs| !unseen(inputs).is_empty())
            .await
            .map(|inputs| unseen(&inputs));
        match found {
            Ok(found) => found,
            // The sender lives in self: it cannot be dropped while we wait.
            Err(_) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[tokio::test]
    async fn a_model_call_is_interrupted_only_by_inputs_it_was_not_built_with() {
        let signal = StopSignal::default();
        let (seen, new) = (Uuid::new_v4(), Uuid::new_v4());
        signal.interrupt(seen);
        signal.interrupt(seen);
        let built_with = [seen];
        assert_eq!(signal.interrupted(&built_with).now_or_never(), None);
        // Heard of before the call waits, or while it waits: both count.
        let waiting = signal.interrupted(&built_with);
        signal.interrupt(new);
        assert_eq!(waiting.await, [new]);
        assert_eq!(signal.interrupted(&[]).await, [seen, new]);
        assert_eq!(signal.reason(), None, "an interrupt is not a stop");
    }
}
