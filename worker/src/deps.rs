//! What a worker's steps share: the pool, the model providers, the tools'
//! clients and the committer. Its own module so that the step and the
//! toolbox both depend on it, not on each other.

use std::sync::Arc;

use deadpool_postgres::Pool;
use holdfast_providers::Providers;
use tokio_util::sync::CancellationToken;

use crate::committer::Committer;
use crate::settings::WorkerSettings;
use crate::tools::mcp::McpRegistry;
use crate::tools::web_fetch::WebFetchLimits;

/// What every step needs, shared by a worker's steps.
pub struct StepDeps {
    pub pool: Pool,
    pub providers: Arc<Providers>,
    pub settings: WorkerSettings,
    /// Built once from `settings.web_fetch` (it pools connections).
    pub web_fetch_client: reqwest::Client,
    pub web_fetch_limits: WebFetchLimits,
    /// For the operator's search backend (`settings.web_search`): a plain
    /// client, as the backend is the operator's, not the model's, choice.
    pub web_search_client: reqwest::Client,
    /// MCP tool lists, cached across steps.
    pub mcp: McpRegistry,
    /// Model steps are saved through it, grouped into shared commits.
    pub committer: Committer,
    /// Fires when the worker starts draining: a lease kept for an agent's
    /// next step is then released instead, for another worker.
    pub shutdown: CancellationToken,
}
