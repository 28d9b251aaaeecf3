//! The worker's settings (docs/configuration.md: each is an env var and a flag).

use std::sync::Arc;
use std::time::Duration;

use holdfast_db::group_commit::GroupCommit;
use holdfast_outbound::backoff::Backoff;
use holdfast_providers::egress::EgressPolicy;
use holdfast_wire::domain::LimitMaxima;

use crate::tools::web_search::WebSearchLimits;

#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// This worker's name in leases (`lease_owner`): host, pid and a nonce,
    /// so a restarted process never mistakes an old lease for its own.
    pub name: String,
    /// Steps run at once (`HOLDFAST_WORKER_CONCURRENCY`).
    pub concurrency: usize,
    pub lease_ttl: Duration,
    pub renew_interval: Duration,
    pub drain_timeout: Duration,
    pub poll_interval: Duration,
    pub model_max_retries: u32,
    /// Delays between model retries (durable: saved as `run_after`).
    pub model_backoff: Backoff,
    /// Failed steps in a row (errors other than a lost lease, panics) after
    /// which the turn fails with `internal_error` (`HOLDFAST_STEP_MAX_ATTEMPTS`).
    pub step_max_attempts: u32,
    /// Delays before a failed step is tried again (durable: `run_after`;
    /// `HOLDFAST_STEP_BACKOFF_BASE`, `HOLDFAST_STEP_BACKOFF_MAX`).
    pub step_backoff: Backoff,
    /// The operator's maxima for agents' limits, written to
    /// `holdfast.limit_settings` at start (SQL enforces them).
    pub limits: LimitMaxima,
    /// Which addresses `web_fetch` and MCP servers may reach
    /// (`HOLDFAST_EGRESS_ALLOW`). The default, public addresses only, keeps
    /// a model from being steered into the internal network or a cloud
    /// metadata endpoint.
    pub egress: Arc<EgressPolicy>,
    /// How model steps are grouped into commits (`HOLDFAST_COMMIT_WINDOW`,
    /// `HOLDFAST_COMMIT_BATCH`).
    pub group_commit: GroupCommit,
    /// The `web_search` tool's backend, key and retries
    /// (`HOLDFAST_WEB_SEARCH_*`); without a backend, calls say so.
    pub web_search: WebSearchLimits,
}

impl WorkerSettings {
    /// A unique worker name: `host-pid-nonce`.
    pub fn default_name() -> String {
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "worker".into());
        format!(
            "{host}-{}-{:04x}",
            std::process::id(),
            rand::random::<u16>()
        )
    }
}

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings {
            name: WorkerSettings::default_name(),
            concurrency: 16,
            lease_ttl: Duration::from_secs(60),
            renew_interval: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(20),
            poll_interval: Duration::from_secs(1),
            model_max_retries: 8,
            model_backoff: Backoff::default(),
            step_max_attempts: 5,
            step_backoff: Backoff::default(),
            limits: LimitMaxima::default(),
            egress: Arc::default(),
            group_commit: GroupCommit::default(),
            web_search: WebSearchLimits::default(),
        }
    }
}
