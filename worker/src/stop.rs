//! How a running step is told to stop, and why.

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

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

/// A cancellation token that remembers why it fired.
#[derive(Clone, Debug, Default)]
pub struct StopSignal {
    token: CancellationToken,
    reason: Arc<OnceLock<StopReason>>,
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
}
